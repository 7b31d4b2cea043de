#!/opt/agents-supervise/venv/bin/python
"""Benchmark a trivial tool call over MCP Streamable HTTP: ``agents-supervise serve --http`` (the call runs in a
confined worker) against the official MCP SDK's own Streamable HTTP server (``MCPServer`` on uvicorn, JSON responses,
stateful sessions, an equivalent ``date`` tool run in its own process, unconfined), in one run, driven by the same
raw httpx client (``tests/_mcp_raw_http.py``, revision 2025-11-25).

    /opt/agents-supervise/venv/bin/python scripts/bench_http.py [--calls 1000] [--inflight 64] [--sessions 1000]

For each server: p50 and p99 latency and calls/s sequentially (one session, one call at a time) and with
``--inflight`` calls in flight (that many sessions, each calling in a loop), and sessions held per GiB (the growth of
the server process's resident memory while ``--sessions`` sessions are opened and held). The target: at least 5x the
SDK server's throughput with 64 in flight.
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import trio

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _bench_common import agent_file, system_toolbox, write_policy  # noqa: E402

from supervisor.frontends._http_auth import hash_token  # noqa: E402
from tests._mcp_raw_http import RawSession  # noqa: E402

TOKEN = "bench-token"

SDK_SERVER = '''
import datetime, sys
from mcp.server.mcpserver import MCPServer
server = MCPServer("sdk-bench")

@server.tool()
def date() -> dict:
    """The current date."""
    return {"utc": datetime.datetime.now(datetime.UTC).isoformat()}

server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]), json_response=True, max_sessions=None)
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _policy(root: Path, sessions: int) -> Path:
    """strict.yaml with the HTTP frontend, one tenant, and bounds the benchmark does not run into (calls per
    session, sessions, calls in flight)."""
    return write_policy(
        root,
        [agent_file(root, builtinToolboxes=[system_toolbox()])],
        sessions={"max_calls": None, "max_concurrent_calls": 256},
        frontends={"http": {"listen": "127.0.0.1:0", "max_sessions": sessions + 500}},
        tenants={
            "bench": {
                "tokens": [hash_token(TOKEN)],
                "agents": ["bench"],
                "limits": {"sessions": sessions + 500, "concurrent_calls": 1024},
            }
        },
    )


class Server:
    """A server under test: its process, its MCP URL, the tool's name there, and the headers it needs."""

    def __init__(
        self, name: str, process: subprocess.Popen[bytes], url: str, tool: str, headers: dict[str, str]
    ) -> None:
        self.name, self.process, self.url, self.tool, self.headers = name, process, url, tool, headers

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_supervisor(root: Path, sessions: int) -> Server:
    process = subprocess.Popen(
        [sys.executable, "-m", "supervisor", "serve", "--http", "--policy", str(_policy(root, sessions))],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None
    line = process.stderr.readline().decode()
    if "serving MCP over HTTP at " not in line:
        raise SystemExit(f"agents-supervise did not start: {line}{process.stderr.read().decode()[:2000]}")
    url = line.split(" at ", 1)[1].strip().replace("<slug>", "bench")
    return Server("agents-supervise", process, url, "system_system_date", {"authorization": f"Bearer {TOKEN}"})


def start_sdk(root: Path) -> Server:
    script = root / "sdk_server.py"
    script.write_text(SDK_SERVER)
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, str(script), str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
        except OSError:
            time.sleep(0.1)
    else:
        raise SystemExit("the SDK server did not start")
    return Server("MCP SDK (uvicorn)", process, f"http://127.0.0.1:{port}/mcp", "date", {})


def _tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by the process ``pid`` and its live descendants (the supervisor's
    confined workers): a cost per call that, unlike wall time, a loaded machine does not inflate much."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0.0
    for proc in procs:
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


async def _calls(server: Server, client: httpx.AsyncClient, calls: int, inflight: int) -> dict[str, float]:
    sessions = [RawSession(client, server.url, server.headers) for _ in range(inflight)]
    for s in sessions:
        await s.open()
        await s.request("tools/call", {"name": server.tool, "arguments": {}})  # warm
    latencies: list[float] = []
    per_session = max(1, calls // inflight)

    async def loop(s: RawSession) -> None:
        for _ in range(per_session):
            t0 = time.perf_counter()
            result = await s.request("tools/call", {"name": server.tool, "arguments": {}})
            latencies.append(time.perf_counter() - t0)
            if result.get("isError"):
                raise RuntimeError(f"{server.name}: the call failed: {result}")

    cpu_before = _tree_cpu_s(server.process.pid)
    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for s in sessions:
            nursery.start_soon(loop, s)
    elapsed = time.perf_counter() - start
    cpu = _tree_cpu_s(server.process.pid) - cpu_before
    return {
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * _pct(latencies, 0.99),
        "calls_s": len(latencies) / elapsed,
        "cpu_ms": 1000 * cpu / max(1, len(latencies)),
    }


async def _sessions_per_gib(server: Server, client: httpx.AsyncClient, count: int) -> float:
    before = _rss(server.process.pid)
    held = [RawSession(client, server.url, server.headers) for _ in range(count)]

    async def open_one(s: RawSession) -> None:
        await s.open()

    async with trio.open_nursery() as nursery:
        limiter = trio.CapacityLimiter(64)
        for s in held:

            async def guarded(s: RawSession = s) -> None:
                async with limiter:
                    await open_one(s)

            nursery.start_soon(guarded)
    grown = max(1, _rss(server.process.pid) - before)
    return count / (grown / 2**30)


async def bench(server: Server, args: argparse.Namespace) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=args.inflight + 8, max_keepalive_connections=args.inflight + 8)
    async with httpx.AsyncClient(limits=limits, timeout=120) as client:
        seq = await _calls(server, client, args.calls // 2, 1)
        par = await _calls(server, client, args.calls, args.inflight)
        per_gib = await _sessions_per_gib(server, client, args.sessions)
    return {"sequential": seq, "inflight": par, "sessions_per_gib": per_gib}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--inflight", type=int, default=64)
    parser.add_argument("--sessions", type=int, default=1000)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4 * args.sessions + 512)), hard))
    results: dict[str, dict[str, Any]] = {}
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.chmod(root, 0o755)
        for start in (start_supervisor, start_sdk):
            server = start(root, args.sessions) if start is start_supervisor else start(root)
            try:
                results[server.name] = trio.run(bench, server, args)
            finally:
                server.stop()
    print(
        f"trivial tool call over Streamable HTTP (2025-11-25), {args.calls} calls, {args.inflight} in flight, "
        f"{args.sessions} sessions held"
    )
    print(
        f"load average before the run: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; after: "
        f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)"
    )
    print(
        f"{'server':<22}{'seq p50 ms':>11}{'p99 ms':>9}{'calls/s':>9}{'CPU ms':>8}{'64 p50 ms':>11}{'p99 ms':>9}"
        f"{'calls/s':>9}{'CPU ms':>8}{'sessions/GiB':>14}"
    )
    for name, r in results.items():
        s, p = r["sequential"], r["inflight"]
        print(
            f"{name:<22}{s['p50_ms']:>11.2f}{s['p99_ms']:>9.2f}{s['calls_s']:>9.0f}{s['cpu_ms']:>8.2f}"
            f"{p['p50_ms']:>11.2f}{p['p99_ms']:>9.2f}{p['calls_s']:>9.0f}{p['cpu_ms']:>8.2f}"
            f"{r['sessions_per_gib']:>14.0f}"
        )
    ours, sdk = results["agents-supervise"], results["MCP SDK (uvicorn)"]
    print(
        f"throughput ratio with {args.inflight} in flight: "
        f"{ours['inflight']['calls_s'] / sdk['inflight']['calls_s']:.1f}x (target: at least 5x); sequential "
        f"{ours['sequential']['calls_s'] / sdk['sequential']['calls_s']:.1f}x"
    )
    print(
        f"server CPU per call (process tree; the supervisor's includes its confined worker) with {args.inflight} "
        f"in flight: {sdk['inflight']['cpu_ms'] / max(1e-9, ours['inflight']['cpu_ms']):.1f}x less than the "
        f"SDK server's; sequential {sdk['sequential']['cpu_ms'] / max(1e-9, ours['sequential']['cpu_ms']):.1f}x"
    )


if __name__ == "__main__":
    main()
