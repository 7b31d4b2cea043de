#!/opt/agents-supervise/venv/bin/python
"""The trivial tool call (``date``), side by side in one run:

1. through the Python API (``Supervisor.call``) to a confined worker,
2. through the MCP stdio frontend (``agents-supervise``),
3. through the official MCP SDK's own stdio server (``MCPServer``) serving an equivalent tool, unconfined,

p50, p99 and calls/s for each, sequential and with 16 calls in flight, and the ratios. Both MCP servers are driven
twice: by a minimal JSON-RPC client (one line out, one line in: what the server itself costs) and by the official
MCP SDK client (what an SDK user sees; the client's own overhead is included and is the same for both). Every
policy is ``policies/strict.yaml`` (``scripts/_bench_common.py``). ``scripts/bench`` calls these functions for
issue 18's rows 1-4, with the floors of ``scripts/floor_pipes.py`` beside them.

Usage: scripts/bench_mcp.py [--calls N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import trio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _bench_common import agent_file, bench_folder, system_toolbox, write_policy  # noqa: E402

from supervisor import Supervisor  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

SDK_SERVER = '''
import datetime
from mcp.server.mcpserver import MCPServer
server = MCPServer("sdk-bench")

@server.tool()
def date() -> dict:
    """The current date."""
    now = datetime.datetime.now(datetime.UTC)
    return {"utc": now.isoformat()}

server.run()
'''


def mcp_policy(root: Path) -> Path:
    """strict.yaml with the benchmark's bounds: calls per session unbounded, 64 in flight per session."""
    return write_policy(
        root,
        [agent_file(root, builtinToolboxes=[system_toolbox()])],
        sessions={"max_calls": None, "max_concurrent_calls": 64},
    )


def _stats(name: str, samples: list[float], wall: float, n: int) -> dict[str, float | str]:
    samples = sorted(samples)
    return {
        "name": name,
        "p50_us": statistics.median(samples) * 1e6,
        "p99_us": samples[min(len(samples) - 1, int(len(samples) * 0.99))] * 1e6,
        "calls_per_s": n / wall,
    }


async def _timed(call: Call, n: int, concurrency: int) -> tuple[list[float], float]:
    samples: list[float] = []
    start = time.perf_counter()
    if concurrency == 1:
        for _ in range(n):
            t = time.perf_counter()
            await call()
            samples.append(time.perf_counter() - t)
    else:
        per = n // concurrency

        async def lane() -> None:
            for _ in range(per):
                t = time.perf_counter()
                await call()
                samples.append(time.perf_counter() - t)

        async with trio.open_nursery() as nursery:
            for _ in range(concurrency):
                nursery.start_soon(lane)
    return samples, time.perf_counter() - start


Call = Callable[[], Awaitable[None]]


@asynccontextmanager
async def api_caller(policy: Path) -> AsyncIterator[Call]:
    """A supervisor on ``policy`` in this process; yields a call of its ``date`` tool through the Python API."""
    async with Supervisor.open(policy) as sup:

        async def call() -> None:
            r = await sup.call("system_system_date", {})
            assert r.status == "passed", r.data

        yield call


@asynccontextmanager
async def sdk_client_caller(params: StdioServerParameters, tool: str) -> AsyncIterator[Call]:
    """The stdio server ``params`` driven by the official SDK client; yields a call of ``tool``."""
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()

        async def call() -> None:
            r = await session.call_tool(tool, {})
            assert not r.is_error, r.content

        yield call


async def interleaved(
    callers: dict[str, Call], n: int, concurrency: int, rounds: int = 5, warmup: int = 200
) -> dict[str, dict[str, float | str]]:
    """Time ``n`` calls of each of ``callers`` with ``concurrency`` in flight, in ``rounds`` rounds of ``n /
    rounds`` calls each, the order rotated every round (so that machine noise falls on all alike), after ``warmup``
    sequential calls of each; the figures of each (calls/s over the time it was being timed)."""
    for call in callers.values():
        await _timed(call, warmup, 1)
    samples: dict[str, list[float]] = {name: [] for name in callers}
    walls = dict.fromkeys(callers, 0.0)
    names = list(callers)
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            got, wall = await _timed(callers[name], max(concurrency, n // rounds), concurrency)
            samples[name] += got
            walls[name] += wall
    return {
        name: _stats(f"{name}, {concurrency} in flight", samples[name], walls[name], len(samples[name]))
        for name in names
    }


async def bench_api(policy: Path, n: int, concurrency: int) -> dict[str, float | str]:
    async with api_caller(policy) as call:
        await _timed(call, 200, 1)  # warm up
        samples, wall = await _timed(call, n, concurrency)
    return _stats(f"Python API (confined worker), {concurrency} in flight", samples, wall, len(samples))


async def bench_mcp(
    params: StdioServerParameters, tool: str, label: str, n: int, concurrency: int
) -> dict[str, float | str]:
    async with sdk_client_caller(params, tool) as call:
        await _timed(call, 200, 1)
        samples, wall = await _timed(call, n, concurrency)
    return _stats(f"{label}, {concurrency} in flight", samples, wall, len(samples))


class RawClient:
    """A minimal MCP client over a child's pipes: newline-delimited JSON-RPC, replies matched by id."""

    def __init__(self, proc: trio.Process) -> None:
        self.proc = proc
        self._buffer = b""
        self._next = 0
        self._waiting: dict[int, trio.Event] = {}
        self._replies: dict[int, dict] = {}
        self._lock = trio.Lock()

    async def reader(self) -> None:
        while chunk := await self.proc.stdout.receive_some(1 << 16):
            self._buffer += chunk
            *lines, self._buffer = self._buffer.split(b"\n")
            for line in lines:
                if not line.startswith(b"{"):  # not JSON-RPC (py-spy's own lines when it runs the server)
                    continue
                msg = json.loads(line)
                if "id" in msg and msg["id"] in self._waiting:
                    self._replies[msg["id"]] = msg
                    self._waiting.pop(msg["id"]).set()

    async def request(self, method: str, params: dict) -> dict:
        self._next += 1
        req_id = self._next
        event = self._waiting[req_id] = trio.Event()
        line = json.dumps({"jsonrpc": "2.0", "id": req_id, "method": method, "params": params}).encode() + b"\n"
        async with self._lock:
            await self.proc.stdin.send_all(line)
        await event.wait()
        return self._replies.pop(req_id)


@asynccontextmanager
async def raw_caller(
    argv: list[str], env: dict[str, str], tool: str, pids: list[int] | None = None
) -> AsyncIterator[Call]:
    """The stdio server ``argv`` driven by :class:`RawClient`, initialized; yields a call of ``tool`` (and appends
    the server's pid to ``pids``, when given)."""
    async with trio.open_nursery() as nursery:
        proc = await nursery.start(
            partial(
                trio.run_process,
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=env,
                cwd=str(REPO),
                check=False,
            )
        )
        if pids is not None:
            pids.append(proc.pid)
        client = RawClient(proc)
        nursery.start_soon(client.reader)
        await client.request(
            "initialize",
            {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}},
        )
        await proc.stdin.send_all(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')

        async def call() -> None:
            reply = await client.request("tools/call", {"name": tool, "arguments": {}})
            assert not reply["result"].get("isError"), reply

        yield call
        await proc.stdin.aclose()
        with trio.move_on_after(20):  # a stdio server ends at the end of its input; one that does not is stopped
            await proc.wait()
        nursery.cancel_scope.cancel()


async def bench_raw(
    argv: list[str], env: dict[str, str], tool: str, label: str, n: int, concurrencies: Sequence[int]
) -> list[dict[str, float | str]]:
    """Start the stdio server ``argv``, warm it up, and time ``n`` calls of ``tool`` with each of ``concurrencies``
    in flight, one after the other in the same server; one figure per concurrency."""
    rows = []
    async with raw_caller(argv, env, tool) as call:
        await _timed(call, 200, 1)
        for concurrency in concurrencies:
            samples, wall = await _timed(call, n, concurrency)
            rows.append(_stats(f"{label}, {concurrency} in flight", samples, wall, len(samples)))
    return rows


def _print(rows: list[dict[str, float | str]]) -> None:
    print(f"{'benchmark':62} {'p50 us':>9} {'p99 us':>9} {'calls/s':>9}")
    for r in rows:
        print(f"{r['name']:62} {r['p50_us']:9.0f} {r['p99_us']:9.0f} {r['calls_per_s']:9.0f}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    n = args.calls
    root = bench_folder()
    policy = mcp_policy(root)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    ours = StdioServerParameters(
        command=sys.executable, args=["-m", "supervisor", "--policy", str(policy)], env=env, cwd=str(REPO)
    )
    sdk_script = root / "sdk_server.py"
    sdk_script.write_text(SDK_SERVER)
    sdk = StdioServerParameters(command=sys.executable, args=[str(sdk_script)], env=env)
    ours_argv = [sys.executable, "-m", "supervisor", "--policy", str(policy)]
    sdk_argv = [sys.executable, str(sdk_script)]
    rows = []
    for conc in (1, 16):
        rows.append(await bench_api(policy, n, conc))
        rows += await bench_raw(
            ours_argv, env, "system_system_date", "agents-supervise MCP stdio, raw client", n, [conc]
        )
        rows += await bench_raw(sdk_argv, env, "date", "MCP SDK stdio server (unconfined), raw client", n, [conc])
        rows.append(await bench_mcp(ours, "system_system_date", "agents-supervise MCP stdio, SDK client", n, conc))
        rows.append(await bench_mcp(sdk, "date", "MCP SDK stdio server (unconfined), SDK client", n, conc))
    _print(rows)
    for i in (0, 5):
        api, raw_ours, raw_sdk, sdk_ours, sdk_sdk = rows[i : i + 5]
        print(
            f"\n{'sequential' if i == 0 else '16 in flight'}: Python API p50 {api['p50_us']:.0f} us "
            "(target <= 150 us sequential)"
        )
        print(
            f"  MCP frontend vs SDK server, raw client: p50 {raw_sdk['p50_us'] / raw_ours['p50_us']:.2f}x faster, "
            f"throughput {raw_ours['calls_per_s'] / raw_sdk['calls_per_s']:.2f}x (target >= 3x)"
        )
        print(
            f"  MCP frontend vs SDK server, SDK client: p50 {sdk_sdk['p50_us'] / sdk_ours['p50_us']:.2f}x faster, "
            f"throughput {sdk_ours['calls_per_s'] / sdk_sdk['calls_per_s']:.2f}x"
        )


if __name__ == "__main__":
    trio.run(main)
