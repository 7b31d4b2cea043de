#!/opt/agents-supervise/venv/bin/python
"""What one trivial call costs the supervisor's own side, counted (issue 29: "the profile of the supervisor's side
per call"): the Python functions its trio thread enters per call, by room, from ``cProfile`` over a batch of calls
(deterministic: the same code makes the same calls, whatever the machine's load), with the thread's CPU per call
beside them (``time.thread_time``, the profiler's overhead included: a guide, not a figure to compare across runs),
and, with ``--syscalls``, the system calls of that thread per call (``strace -c``).

Three ways of calling the ``date`` tool of a System toolbox in a confined worker (``policies/strict.yaml``, as every
benchmark):

- ``api``: the Python API (``Supervisor.call``), sequential;
- ``api x16``: the same, 16 calls in flight (16 tasks, each in its own session);
- ``floor``: row 4's floor (``scripts/floor_pipes.py``: one msgpack frame over a pipe to an echo process and its
  answer back, nothing checked or recorded), sequential, for scale;
- ``stdio``: the real MCP stdio frontend (:class:`~supervisor.frontends._mcp_stdio.McpStdioServer`) on a pair of
  pipes, its client a thread of this process writing one request line and reading its answer (a thread that
  ``cProfile`` does not see: only the supervisor's side is counted), sequential;
- ``http``: the real Streamable HTTP service (:class:`~supervisor.frontends._http_server.HttpService`, the
  2025-11-25 revision, one session, a bearer token) on a loopback port, its client such a thread on one keep-alive
  connection, sequential.

The pure parts (:func:`area_of`, :func:`summarize`, :func:`render`) are tested in ``tests/test_bench_rows.py``.

Usage: ``call_cost.py [--calls N] [--syscalls] [--top K]`` (as root: the worker is confined as in production).
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO))

import bench_http  # noqa: E402
import bench_mcp  # noqa: E402
import floor_pipes  # noqa: E402
from _bench_common import bench_folder, remove_bench_folders  # noqa: E402

from supervisor._supervisor import Supervisor  # noqa: E402
from supervisor.config import load_config  # noqa: E402
from supervisor.frontends._http_auth import http_frontend_from_policy  # noqa: E402
from supervisor.frontends._http_server import HttpService  # noqa: E402
from supervisor.frontends._mcp_stdio import McpStdioServer  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence

__all__ = ["AREAS", "CallCost", "area_of", "measure", "render", "summarize"]

TOOL = "system_system_date"

#: The rooms of our code and the libraries a call's functions are summed under, in the order a table shows them.
AREAS = (
    "frontends (MCP)",
    "supervisor (root)",
    "calls (portal, records)",
    "sessions (store)",
    "traces",
    "tools (validation)",
    "workers (connection, pipes)",
    "toolboxes (protocol, results)",
    "trio",
    "json",
    "sqlite3",
    "msgpack",
    "h11",
    "system calls (os, select)",
    "other (stdlib, builtins)",
)

_ROOMS = {
    "frontends": "frontends (MCP)",
    "calls": "calls (portal, records)",
    "sessions": "sessions (store)",
    "traces": "traces",
    "tools": "tools (validation)",
    "workers": "workers (connection, pipes)",
}
_BUILTIN = re.compile(r"^<(?:built-in method|method '[^']*' of) '?(?P<owner>[\w.]+)")


def area_of(filename: str, function: str) -> str:
    """The area (one of :data:`AREAS`) a profiled function belongs to, from ``cProfile``'s file name (``~`` for a
    built-in, whose name says its module or type: ``<built-in method posix.write>``, ``<method 'execute' of
    'sqlite3.Connection' objects>``) and function name."""
    path = filename.replace("\\", "/")
    if path == "~":
        match = _BUILTIN.match(function)
        owner = match["owner"] if match else ""
        if owner.startswith("sqlite3"):
            return "sqlite3"
        if owner.startswith(("posix", "select", "_socket", "socket")):
            return "system calls (os, select)"
        if owner.startswith("_json"):
            return "json"
        if owner.startswith("msgpack"):
            return "msgpack"
        return "other (stdlib, builtins)"
    if "/supervisor/" in path and "/site-packages/" not in path:
        room = path.rsplit("/supervisor/", 1)[1].split("/", 1)
        if len(room) == 1:
            return "supervisor (root)"
        return _ROOMS.get(room[0], "supervisor (root)")
    if "/toolboxes/" in path and "/site-packages/" not in path:
        return "toolboxes (protocol, results)"
    if "/trio/" in path or "/outcome/" in path or "/sniffio/" in path:
        return "trio"
    if path.endswith(("/json/encoder.py", "/json/decoder.py", "/json/__init__.py")):
        return "json"
    if "/sqlite3/" in path:
        return "sqlite3"
    if "/msgpack/" in path:
        return "msgpack"
    if "/h11/" in path:
        return "h11"
    return "other (stdlib, builtins)"


@dataclass(frozen=True)
class CallCost:
    """One way's figures per call: function calls in all and by area, the thread's CPU (us, profiled) in all and by
    area (self time), the most entered functions, and system calls (``None``: not counted)."""

    way: str
    calls: int
    functions: float
    by_area: Mapping[str, float]
    cpu_us: float
    cpu_by_area: Mapping[str, float]
    top: Sequence[tuple[str, float]] = ()
    #: every function entered, per call, by area (for ``--area``)
    functions_by_area: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    syscalls: float | None = None
    syscalls_by_name: Mapping[str, float] = field(default_factory=dict)


def summarize(
    way: str, stats: Mapping[tuple[str, int, str], tuple[Any, ...]], calls: int, top: int = 12, repo: str = ""
) -> CallCost:
    """``cProfile``'s stats (``Profile.create_stats``'s dict: ``(file, line, name) -> (primitive calls, calls, self
    time, cumulative time, callers)``, each caller ``(file, line, name) -> (primitive calls, calls, ...)``) over
    ``calls`` calls, per call. A plain built-in (``len``, ``isinstance``, a ``dict`` method) is counted in the areas
    of the functions that called it, in proportion; the built-ins of a library (SQLite's, the system calls, the
    C JSON and msgpack codecs) in that library's area."""
    by_area: Counter[str] = Counter()
    cpu: Counter[str] = Counter()
    per_function: Counter[str] = Counter()
    in_area: dict[str, Counter[str]] = {}
    for (filename, _line, name), (_cc, nc, tt, _ct, callers) in stats.items():
        area = area_of(filename, name)
        if area == "other (stdlib, builtins)" and filename == "~" and callers:
            # a plain built-in (len, isinstance, dict.get) counts for the code that called it
            entered = sum(c[1] for c in callers.values()) or 1
            for (c_file, _c_line, c_name), c_stats in callers.items():
                share = c_stats[1] / entered
                by_area[area_of(c_file, c_name)] += nc * share
                cpu[area_of(c_file, c_name)] += tt * share
        else:
            by_area[area] += nc
            cpu[area] += tt
        shown = filename[len(repo) + 1 :] if repo and filename.startswith(repo + "/") else Path(filename).name
        label = f"{name} ({shown})" if filename != "~" else name
        per_function[label] += nc
        in_area.setdefault(area, Counter())[label] += nc
    total = sum(by_area.values())
    return CallCost(
        way=way,
        calls=calls,
        functions=total / calls,
        by_area={a: by_area[a] / calls for a in AREAS if by_area[a]},
        cpu_us=1e6 * sum(cpu.values()) / calls,
        cpu_by_area={a: 1e6 * cpu[a] / calls for a in AREAS if by_area[a]},
        top=[(name, n / calls) for name, n in per_function.most_common(top)],
        functions_by_area={a: {k: n / calls for k, n in c.most_common()} for a, c in in_area.items()},
    )


def parse_strace_summary(text: str) -> dict[str, int]:
    """``strace -c``'s table as ``{syscall: calls}`` (the ``total`` line left out)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "total":
            try:
                calls = int(parts[3])
            except ValueError:
                continue
            out[parts[-1]] = calls
    return out


def render(costs: Sequence[CallCost]) -> str:
    """The markdown block: one column per way, a row per area (function calls per call, the thread's CPU in
    brackets), then the system calls and the most entered functions of each way."""
    if not costs:
        return "No call cost was measured."
    lines = [
        "| area | " + " | ".join(f"{c.way}: functions (CPU us)" for c in costs) + " |",
        "|---|" + "---|" * len(costs),
    ]
    for area in AREAS:
        if not any(area in c.by_area for c in costs):
            continue
        cells = [
            f"{c.by_area[area]:.0f} ({c.cpu_by_area.get(area, 0.0):.0f})" if area in c.by_area else "-" for c in costs
        ]
        lines.append(f"| {area} | " + " | ".join(cells) + " |")
    lines.append("| **all** | " + " | ".join(f"**{c.functions:.0f}** ({c.cpu_us:.0f})" for c in costs) + " |")
    if any(c.syscalls is not None for c in costs):
        cells = []
        for c in costs:
            if c.syscalls is None:
                cells.append("-")
                continue
            named = ", ".join(f"{name} {n:.2f}" for name, n in sorted(c.syscalls_by_name.items(), key=lambda x: -x[1]))
            cells.append(f"{c.syscalls:.1f} ({named})")
        lines.append("| system calls of the trio thread | " + " | ".join(cells) + " |")
    for c in costs:
        lines += ["", f"Most entered per call, {c.way}: " + ", ".join(f"`{n}` {k:.1f}" for n, k in c.top) + "."]
    return "\n".join(lines)


# -- measuring --------------------------------------------------------------------------------------------------


class _Strace:
    """``strace -c`` attached to this process's trio thread while a batch runs (``None`` when strace is missing)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        if shutil.which("strace") is None:
            return
        self.proc = subprocess.Popen(
            ["strace", "-c", "-p", str(threading.get_native_id())],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stderr is not None
        self.proc.stderr.readline()  # "strace: Process N attached"

    def stop(self) -> dict[str, int] | None:
        if self.proc is None:
            return None
        self.proc.send_signal(signal.SIGINT)
        _, err = self.proc.communicate(timeout=30)
        return parse_strace_summary(err)


async def _profiled(
    way: str, batch: Callable[[int], Awaitable[None]], calls: int, syscalls: bool, top: int
) -> CallCost:
    """Run ``batch(calls)`` under ``cProfile`` (the trio thread's CPU as its clock); with ``syscalls``, then
    ``batch(calls)`` again under ``strace -c`` without the profiler (whose clock is a system call itself)."""
    profiler = cProfile.Profile(time.thread_time)
    profiler.enable()
    try:
        await batch(calls)
    finally:
        profiler.disable()
    profiler.create_stats()
    cost = summarize(way, profiler.stats, calls, top=top, repo=str(REPO))  # type: ignore[attr-defined]
    if syscalls:
        tracer = _Strace()
        tracer.start()
        try:
            await batch(calls)
        finally:
            counted = tracer.stop()
        if counted is not None:
            cost = dataclasses.replace(
                cost,
                syscalls=sum(counted.values()) / calls,
                syscalls_by_name={k: v / calls for k, v in counted.items() if v / calls >= 0.05},
            )
    return cost


class _HttpClient:
    """A client of the HTTP service in a thread of its own: one keep-alive connection, one POST at a time, each
    answer read by its ``content-length``."""

    def __init__(self, address: str) -> None:
        host, port = address.removeprefix("http://").rsplit(":", 1)
        self.host = f"{host}:{port}"
        self.sock = socket.create_connection((host.strip("[]"), int(port)))
        self.buffer = b""
        self.session: str | None = None

    def post(self, message: dict[str, Any]) -> tuple[bytes, bytes]:
        body = json.dumps(message).encode()
        head = {
            "host": self.host,
            "authorization": f"Bearer {bench_http.TOKEN}",
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
            "mcp-protocol-version": "2025-11-25",
            **({"mcp-session-id": self.session} if self.session else {}),
            "content-length": str(len(body)),
        }
        lines = "".join(f"{k}: {v}\r\n" for k, v in head.items())
        self.sock.sendall(f"POST /agents/bench/mcp HTTP/1.1\r\n{lines}\r\n".encode() + body)
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end >= 0:
                top = self.buffer[:end]
                at = top.lower().find(b"content-length:")
                length = int(top[at + 15 :].split(b"\r\n", 1)[0]) if at >= 0 else 0
                if len(self.buffer) >= end + 4 + length:
                    answer, self.buffer = self.buffer[end + 4 : end + 4 + length], self.buffer[end + 4 + length :]
                    return top, answer
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("the server closed the connection")
            self.buffer += chunk

    def open(self) -> None:
        client = {"name": "cost", "version": "1"}
        init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": client}
        top, _ = self.post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init})
        at = top.lower().find(b"mcp-session-id:")
        self.session = top[at + 15 :].split(b"\r\n", 1)[0].strip().decode()
        self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def calls(self, n: int) -> None:
        for _ in range(n):
            top, answer = self.post(
                {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": TOOL, "arguments": {}}}
            )
            assert top.startswith(b"HTTP/1.1 200"), top
            assert not json.loads(answer)["result"]["isError"], answer


class _StdioClient:
    """A client of the stdio frontend in a thread of its own: writes one request line, reads its answer."""

    def __init__(self, to_server: int, from_server: int) -> None:
        self.to_server = to_server
        self.from_server = from_server
        self.buffer = b""
        self.next_id = 1

    def exchange(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        ident = self.next_id
        self.next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": ident, "method": method}
        if params is not None:
            message["params"] = params
        os.write(self.to_server, json.dumps(message).encode() + b"\n")
        while True:
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                answer = json.loads(line)
                if answer.get("id") == ident:
                    return answer
            chunk = os.read(self.from_server, 65536)
            if not chunk:
                raise EOFError("the server closed its output")
            self.buffer += chunk

    def notify(self, method: str) -> None:
        os.write(self.to_server, json.dumps({"jsonrpc": "2.0", "method": method}).encode() + b"\n")

    def calls(self, n: int) -> None:
        for _ in range(n):
            answer = self.exchange("tools/call", {"name": TOOL, "arguments": {}})
            assert answer["result"]["isError"] is False, answer


async def measure(calls: int = 2000, *, syscalls: bool = False, top: int = 12, warmup: int = 300) -> list[CallCost]:
    """The five ways' :class:`CallCost` over ``calls`` calls each, after ``warmup`` calls of each."""
    root = bench_folder()
    out: list[CallCost] = []
    async with Supervisor.open(bench_mcp.mcp_policy(root)) as sup:
        if sup.load_errors():
            raise RuntimeError(f"load errors: {sup.load_errors()}")

        async def sequential(calls: int) -> None:
            for _ in range(calls):
                result = await sup.call(TOOL, {})
                assert result.status == "passed", result.data

        async def in_flight(calls: int) -> None:
            async def lane(i: int) -> None:
                for _ in range(calls // 16):
                    result = await sup.call(TOOL, {}, session_id=f"lane-{i}")
                    assert result.status == "passed", result.data

            async with trio.open_nursery() as nursery:
                for i in range(16):
                    nursery.start_soon(lane, i)

        for _ in range(warmup):
            await sup.call(TOOL, {})
        out.append(await _profiled("api", sequential, calls, syscalls, top))
        for i in range(16):
            for _ in range(max(1, warmup // 16)):
                await sup.call(TOOL, {}, session_id=f"lane-{i}")
        out.append(await _profiled("api x16", in_flight, 16 * (calls // 16), syscalls, top))

        async with floor_pipes.echo_workers(1) as echoes:

            async def floor(calls: int) -> None:
                for _ in range(calls):
                    await echoes[0].call()

            for _ in range(warmup):
                await echoes[0].call()
            out.append(await _profiled("floor", floor, calls, syscalls, top))

        to_server_r, to_server_w = os.pipe()
        from_server_r, from_server_w = os.pipe()
        client = _StdioClient(to_server_w, from_server_r)
        receive = trio.lowlevel.FdStream(to_server_r)
        send = trio.lowlevel.FdStream(from_server_w)
        async with receive, send, trio.open_nursery() as nursery:
            nursery.start_soon(McpStdioServer(sup, receive, send).serve)

            def handshake() -> None:
                client.exchange(
                    "initialize",
                    {
                        "protocolVersion": "2025-06-18",
                        "capabilities": {},
                        "clientInfo": {"name": "cost", "version": "1"},
                    },
                )
                client.notify("notifications/initialized")
                client.calls(warmup)

            await trio.to_thread.run_sync(handshake)
            out.append(
                await _profiled("stdio", lambda n: trio.to_thread.run_sync(client.calls, n), calls, syscalls, top)
            )
            os.close(to_server_w)  # EOF: the server ends
            nursery.cancel_scope.deadline = trio.current_time() + 10
        os.close(from_server_r)
    out.append(await _http_way(calls, syscalls, top, warmup))
    return out


async def _http_way(calls: int, syscalls: bool, top: int, warmup: int) -> CallCost:
    policy = bench_http._policy(bench_folder(), 1)
    settings, auth = await http_frontend_from_policy(load_config(str(policy)).policy, None)
    async with Supervisor.open(policy) as sup, trio.open_nursery() as nursery:
        if sup.load_errors():
            raise RuntimeError(f"load errors: {sup.load_errors()}")
        address = await nursery.start(HttpService(sup, settings, auth, None).run)
        client = await trio.to_thread.run_sync(_HttpClient, address)

        def opened() -> None:
            client.open()
            client.calls(warmup)

        await trio.to_thread.run_sync(opened)
        cost = await _profiled("http", lambda n: trio.to_thread.run_sync(client.calls, n), calls, syscalls, top)
        client.sock.close()
        nursery.cancel_scope.cancel()
    return cost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--syscalls", action="store_true", help="also count the trio thread's system calls (strace)")
    parser.add_argument("--top", type=int, default=12, help="the most entered functions shown per way")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON instead of markdown")
    parser.add_argument("--area", action="append", default=[], help="also list every function of this area")
    args = parser.parse_args()
    try:
        costs = trio.run(lambda: measure(args.calls, syscalls=args.syscalls, top=args.top))
    finally:
        remove_bench_folders()
    if args.json:
        print(json.dumps([c.__dict__ for c in costs], indent=1, default=list))
    else:
        print(render(costs))
    for area in args.area:
        for c in costs:
            listed = c.functions_by_area.get(area, {})
            print(f"\n{c.way}, {area}: " + ", ".join(f"{k} {n:.2f}" for k, n in listed.items()))


if __name__ == "__main__":
    main()
