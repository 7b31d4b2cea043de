#!/opt/agents-supervise/venv/bin/python
"""Benchmark a trivial tool call over MCP Streamable HTTP: ``agents-supervise serve --http`` (strict.yaml's
protections; the call runs in a confined worker) against the official MCP SDK's own Streamable HTTP server
(``MCPServer`` on uvicorn, JSON responses, stateful sessions, an equivalent ``date`` tool run in its own process,
unconfined), in one run, driven by the same client (revision 2025-11-25; sessions opened with
``labkit/_mcp_raw_http.py``).

    /opt/agents-supervise/venv/bin/python scripts/bench_http.py [--calls 2000] [--inflight 64] [--sessions 1000]
        [--client lean|httpx] [--no-floor]

For each server: p50 and p99 latency and calls/s sequentially (one session, one call at a time) and with
``--inflight`` calls in flight (that many sessions, each calling in a loop), the CPU per call of its process tree and
of its first process alone, and sessions held per GiB (on a server started for it alone: the growth of the server
process's resident memory while ``--sessions`` sessions are opened, each calling the tool once, and held). The
target: at least 5x the SDK server's throughput with 64 in flight.

The floor, in the same run: a server of a few lines on trio and h11 answering a fixed JSON body (``floor: h11
only``), the same with a round trip over a pipe to a second Python process per request (``floor: h11 + pipe hop``:
the shape of the supervisor's path without any of its checks or records), and a bare pipe round trip between two
Python processes. The default client (``lean``) holds one keep-alive socket per session and sends the request
encoded once, so that on two cores the servers set the pace; ``httpx`` is the heavier client of the tests.
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

from _bench_common import agent_file, start_http_service, system_toolbox, write_policy  # noqa: E402
from floor_pipes import ECHO_WORKER  # noqa: E402

from labkit import LeanLane as _LeanLane  # noqa: E402
from labkit import RawSession  # noqa: E402
from supervisor.frontends._http_auth import hash_token  # noqa: E402

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


# The floor: what any server in Python on h11 and trio costs per request, without MCP, sessions or a worker. "plain"
# answers a fixed JSON body; "pipe" also sends a small msgpack frame to a second Python process (the echo worker of
# scripts/floor_pipes.py, which decodes it and answers a result frame, as a worker would) and waits for the answer
# before answering. Same keep-alive HTTP/1.1, same client.
FLOOR_SERVER = """
import os, subprocess, sys
import h11, msgpack, trio
MODE, PORT = sys.argv[1], int(sys.argv[2])
BODY = (b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"2026-12-01T00:00:00+00:00"}],'
        b'"isError":false}}\\n')
ECHO = sys.argv[3]  # floor_pipes.ECHO_WORKER: decodes each frame and answers a result frame

async def main():
    waiting, replies = {}, {}
    if MODE == "pipe":
        child = subprocess.Popen([sys.executable, "-c", ECHO], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        out = trio.lowlevel.FdStream(os.dup(child.stdin.fileno()))
        into = trio.lowlevel.FdStream(os.dup(child.stdout.fileno()))
        async def reader():
            unpacker = msgpack.Unpacker()
            while data := await into.receive_some(65536):
                unpacker.feed(data)
                for frame in unpacker:
                    replies[frame["id"]] = frame
                    waiting.pop(frame["id"]).set()
    ids = iter(range(1, 1 << 62))
    lock = trio.Lock()

    async def answer():
        if MODE == "pipe":
            n = next(ids)
            done = waiting[n] = trio.Event()
            async with lock:  # one writer at a time on the pipe
                await out.send_all(msgpack.packb({"t": "call", "id": n, "tool": "date", "args": {}, "ctx": {}}))
            await done.wait()
            replies.pop(n)
        return BODY

    async def serve(stream):
        conn = h11.Connection(h11.SERVER)
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await stream.receive_some(65536)
                if not data:
                    return
                conn.receive_data(data)
                continue
            if isinstance(event, h11.Request):
                continue
            if isinstance(event, h11.EndOfMessage):
                body = await answer()
                headers = [("content-type", "application/json"), ("content-length", str(len(body)))]
                await stream.send_all(conn.send(h11.Response(status_code=200, headers=headers))
                                      + conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage()))
                conn.start_next_cycle()
                continue
            if isinstance(event, h11.ConnectionClosed):
                return

    async with trio.open_nursery() as nursery:
        if MODE == "pipe":
            nursery.start_soon(reader)
        await trio.serve_tcp(serve, PORT, host="127.0.0.1")

trio.run(main)
"""

# A round trip over a pipe pair between two Python processes: the floor of one hop to a worker.
PIPE_PING = """
import os, sys, time
n = int(sys.argv[1])
r1, w1 = os.pipe(); r2, w2 = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(w1); os.close(r2)
    while d := os.read(r1, 65536):
        os.write(w2, d)
    os._exit(0)
os.close(r1); os.close(w2)
frame = b"x" * 120
for _ in range(200):
    os.write(w1, frame); os.read(r2, 65536)
t0, c0 = time.perf_counter(), time.process_time()
lat = []
for _ in range(n):
    t = time.perf_counter(); os.write(w1, frame); os.read(r2, 65536); lat.append(time.perf_counter() - t)
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
ticks = os.sysconf("SC_CLK_TCK")
f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
child_cpu = (int(f[11]) + int(f[12])) / ticks
os.close(w1); os.waitpid(pid, 0)
lat.sort()
print(lat[len(lat) // 2] * 1e6, cpu / n * 1e6, child_cpu / (n + 200) * 1e6)
"""


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
    process, url = start_http_service(_policy(root, sessions))
    return Server("agents-supervise", process, url, "system_system_date", {"authorization": f"Bearer {TOKEN}"})


def _wait_listening(port: int, what: str) -> None:
    """Until something accepts connections on ``127.0.0.1:port`` (at most 30 s; ``what`` names it if not)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{what} did not start")


def start_sdk(root: Path) -> Server:
    script = root / "sdk_server.py"
    script.write_text(SDK_SERVER)
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, str(script), str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    _wait_listening(port, "the SDK server")
    return Server("MCP SDK (uvicorn)", process, f"http://127.0.0.1:{port}/mcp", "date", {})


def start_floor(root: Path, mode: str) -> Server:
    script = root / "floor_server.py"
    script.write_text(FLOOR_SERVER)
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, str(script), mode, str(port), ECHO_WORKER],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _wait_listening(port, "the floor server")
    name = "floor: h11 only" if mode == "plain" else "floor: h11 + pipe hop"
    return Server(name, process, f"http://127.0.0.1:{port}/mcp", "date", {})


def pipe_round_trip(n: int = 20000) -> tuple[float, float, float]:
    """p50 us of a round trip over a pipe pair between two Python processes, and the CPU us per round trip of
    each side."""
    out = subprocess.run([sys.executable, "-c", PIPE_PING, str(n)], capture_output=True, text=True, check=True)
    p50, cpu, child = (float(x) for x in out.stdout.split())
    return p50, cpu, child


def _process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of the process ``pid`` alone."""
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return times.user + times.system


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


class _Lanes:
    """``inflight`` sessions on ``server``, opened and warmed once (:meth:`open`); :meth:`run` times calls over them,
    as often as asked; :meth:`aclose` closes their connections."""

    def __init__(self, server: Server, sessions: list[RawSession], lanes: list[_LeanLane], lean: bool) -> None:
        self.server, self.sessions, self.lanes, self.lean = server, sessions, lanes, lean

    @classmethod
    async def open(cls, server: Server, client: httpx.AsyncClient, inflight: int, lean: bool) -> _Lanes:
        # The lean lanes open their own connections: the sessions are opened by a client of their own, closed after
        # (its idle connections would count against the server's connection cap).
        opener = httpx.AsyncClient(timeout=120) if lean else client
        sessions = [RawSession(opener, server.url, server.headers) for _ in range(inflight)]
        if not server.name.startswith("floor"):
            for s in sessions:
                await s.open()
                await s.request("tools/call", {"name": server.tool, "arguments": {}})  # warm
        if lean:
            await opener.aclose()
        lanes = [_LeanLane(server.url, server.headers, s.session_id, server.tool) for s in sessions]
        if lean:
            for lane in lanes:
                await lane.open()
                await lane.call()  # warm
        return cls(server, sessions, lanes, lean)

    async def run(self, calls: int) -> dict[str, float]:
        """``calls`` calls spread over the lanes, each lane calling in a loop: latency, calls/s, CPU per call. The
        lean lanes connect afresh first (a server may have closed a connection idle since the last run: uvicorn
        does after 5 s); the sessions stay."""
        server, lean = self.server, self.lean
        if lean:
            for lane in self.lanes:
                await lane.aclose()
                await lane.open()
        latencies: list[float] = []
        per_session = max(1, calls // len(self.lanes))

        async def loop(s: RawSession, lane: _LeanLane) -> None:
            for _ in range(per_session):
                t0 = time.perf_counter()
                if lean:
                    try:
                        await lane.call()
                    except (RuntimeError, OSError, trio.BrokenResourceError) as exc:
                        raise RuntimeError(f"{server.name}: {exc}") from None
                else:
                    result = await s.request("tools/call", {"name": server.tool, "arguments": {}})
                    if result.get("isError"):
                        raise RuntimeError(f"{server.name}: the call failed: {result}")
                latencies.append(time.perf_counter() - t0)

        cpu_before = _tree_cpu_s(server.process.pid)
        own_before = _process_cpu_s(server.process.pid)
        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for s, lane in zip(self.sessions, self.lanes, strict=True):
                nursery.start_soon(loop, s, lane)
        elapsed = time.perf_counter() - start
        cpu = _tree_cpu_s(server.process.pid) - cpu_before
        own = _process_cpu_s(server.process.pid) - own_before
        return {
            "p50_ms": 1000 * statistics.median(latencies),
            "p99_ms": 1000 * _pct(latencies, 0.99),
            "calls_s": len(latencies) / elapsed,
            "cpu_us": 1e6 * cpu / max(1, len(latencies)),
            "own_cpu_us": 1e6 * own / max(1, len(latencies)),
        }

    async def aclose(self) -> None:
        if self.lean:
            for lane in self.lanes:
                await lane.aclose()


async def _sessions_per_gib(server: Server, count: int) -> float:
    """Sessions held per GiB of ``server``, a server started for this alone (a server that has served the timed
    calls reuses the memory they freed, which flattered this figure): 16 sessions opened and each called once first
    (one-time costs: lazy imports, the first call's caches), then the growth of its resident memory while ``count``
    more sessions are opened, each calling the tool once, and held."""
    limits = httpx.Limits(max_connections=72, max_keepalive_connections=72)
    async with httpx.AsyncClient(limits=limits, timeout=120) as client:

        async def open_many(n: int) -> None:
            limiter = trio.CapacityLimiter(64)

            async def one() -> None:
                async with limiter:
                    session = RawSession(client, server.url, server.headers)
                    await session.open()
                    await session.request("tools/call", {"name": server.tool, "arguments": {}})

            async with trio.open_nursery() as nursery:
                for _ in range(n):
                    nursery.start_soon(one)

        await open_many(16)
        before = _rss(server.process.pid)
        await open_many(count)
        grown = max(1, _rss(server.process.pid) - before)
    return count / (grown / 2**30)


def _merge(parts: list[dict[str, float]]) -> dict[str, float]:
    """One figure of several rounds of equal calls: calls/s over the whole time (the harmonic mean), the median of
    the rounds' p50s and p99s, the mean CPU per call."""
    return {
        "p50_ms": statistics.median(p["p50_ms"] for p in parts),
        "p99_ms": statistics.median(p["p99_ms"] for p in parts),
        "calls_s": len(parts) / sum(1 / p["calls_s"] for p in parts),
        "cpu_us": statistics.fmean(p["cpu_us"] for p in parts),
        "own_cpu_us": statistics.fmean(p["own_cpu_us"] for p in parts),
    }


async def _rounds(servers: list[Server], args: argparse.Namespace, rounds: int) -> dict[str, dict[str, Any]]:
    lean = args.client == "lean"
    limits = httpx.Limits(max_connections=args.inflight + 8, max_keepalive_connections=args.inflight + 8)
    parts: dict[str, dict[str, list[dict[str, float]]]] = {s.name: {"sequential": [], "inflight": []} for s in servers}
    out: dict[str, dict[str, Any]] = {}
    async with httpx.AsyncClient(limits=limits, timeout=120) as client:
        lanes = {
            s.name: (await _Lanes.open(s, client, 1, lean), await _Lanes.open(s, client, args.inflight, lean))
            for s in servers
        }
        for r in range(rounds):
            k = r % len(servers)
            for server in servers[k:] + servers[:k]:
                seq, par = lanes[server.name]
                parts[server.name]["sequential"].append(await seq.run(args.calls // 2 // rounds))
                parts[server.name]["inflight"].append(await par.run(args.calls // rounds))
        for seq, par in lanes.values():
            await seq.aclose()
            await par.aclose()
        for server in servers:
            got = parts[server.name]
            out[server.name] = {
                "sequential": _merge(got["sequential"]),
                "inflight": _merge(got["inflight"]),
                "sessions_per_gib": float("nan"),
            }
    return out


def measure(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Run every server of the comparison (``args``: ``calls``, ``inflight``, ``sessions``, ``client``,
    ``no_floor``, ``rounds``); their figures by server name. The servers run side by side, each with its
    sessions (one, and ``inflight``) opened once, and are timed in ``rounds`` rounds of ``calls / rounds`` calls,
    the order rotated each round (so that the noise of a shared machine falls on all alike); then sessions per GiB
    of ours and the SDK's, each on a server started for it (not with ``sessions`` 0). Synchronous: it
    runs its own trio loop."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4 * args.sessions + 512)), hard))
    rounds = max(1, getattr(args, "rounds", 1))
    starts: list[Any] = [lambda root: start_supervisor(root, args.sessions), start_sdk]
    if not args.no_floor:
        starts += [lambda root: start_floor(root, "plain"), lambda root: start_floor(root, "pipe")]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.chmod(root, 0o755)
        servers: list[Server] = []
        try:
            for start in starts:
                servers.append(start(root))
            out = trio.run(_rounds, servers, args, rounds)
        finally:
            for server in servers:
                server.stop()
        if args.sessions > 0:
            for start in starts[:2]:  # ours and the SDK's; the floors hold no sessions
                server = start(root)
                try:
                    out[server.name]["sessions_per_gib"] = trio.run(_sessions_per_gib, server, args.sessions)
                finally:
                    server.stop()
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--inflight", type=int, default=64)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument(
        "--client",
        choices=("lean", "httpx"),
        default="lean",
        help="lean: one keep-alive socket per session, the request encoded once (the servers set the pace); "
        "httpx: labkit/_mcp_raw_http.py's client (its own CPU is most of the machine's at 64 in flight)",
    )
    parser.add_argument("--no-floor", action="store_true", help="skip the floor rows (h11 alone, h11 + pipe hop)")
    parser.add_argument(
        "--rounds", type=int, default=1, help="time the servers in this many interleaved rounds (default: one each)"
    )
    args = parser.parse_args()
    load = os.getloadavg()
    results = measure(args)
    ping = pipe_round_trip()
    print(
        f"trivial tool call over Streamable HTTP (2025-11-25), {args.calls} calls, {args.inflight} in flight, "
        f"{args.sessions} sessions held, {args.client} client"
    )
    print(
        f"load average before the run: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; after: "
        f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)"
    )
    print(
        f"{'server':<24}{'seq p50 ms':>11}{'p99 ms':>9}{'calls/s':>9}{'CPU us':>8}{'own us':>8}{'64 p50 ms':>11}"
        f"{'p99 ms':>9}{'calls/s':>9}{'CPU us':>8}{'own us':>8}{'sessions/GiB':>14}"
    )
    for name, r in results.items():
        s, p = r["sequential"], r["inflight"]
        print(
            f"{name:<24}{s['p50_ms']:>11.2f}{s['p99_ms']:>9.2f}{s['calls_s']:>9.0f}{s['cpu_us']:>8.0f}"
            f"{s['own_cpu_us']:>8.0f}{p['p50_ms']:>11.2f}{p['p99_ms']:>9.2f}{p['calls_s']:>9.0f}{p['cpu_us']:>8.0f}"
            f"{p['own_cpu_us']:>8.0f}{r['sessions_per_gib']:>14.0f}"
        )
    print(
        "CPU us: the server's process tree per call (the supervisor's includes its zygote and confined worker); "
        "own us: its first process alone (the supervisor, whose one trio thread sets the pace)"
    )
    print(
        f"pipe round trip between two Python processes: p50 {ping[0]:.1f} us, CPU {ping[1]:.1f} us (writer) + "
        f"{ping[2]:.1f} us (echo) per round trip"
    )
    ours, sdk = results["agents-supervise"], results["MCP SDK (uvicorn)"]
    print(
        f"throughput ratio with {args.inflight} in flight: "
        f"{ours['inflight']['calls_s'] / sdk['inflight']['calls_s']:.1f}x (target: at least 5x); sequential "
        f"{ours['sequential']['calls_s'] / sdk['sequential']['calls_s']:.1f}x"
    )
    print(
        f"server CPU per call with {args.inflight} in flight: "
        f"{sdk['inflight']['cpu_us'] / max(1e-9, ours['inflight']['cpu_us']):.1f}x less than the SDK server's; "
        f"sequential {sdk['sequential']['cpu_us'] / max(1e-9, ours['sequential']['cpu_us']):.1f}x"
    )


if __name__ == "__main__":
    main()
