"""The HTTP service's load curve past saturation (``scripts/load_http curve``): throughput and latency against the
number of sessions calling at once, with the server's work bound (``frontends.http.max_requests_in_flight``) and
without one.

One ``agents-supervise serve --http`` (strict.yaml's protections, one tenant whose own limits stay out of the way, a
System toolbox whose ``date`` is the call) per bound. For each number of sessions N: N sessions are opened, each
gets a keep-alive connection (the lean lane of ``scripts/bench_http.py``: the request encoded once, the answer read by
its ``content-length``, so that the client costs little CPU) and calls in a loop for ``--seconds`` after a warm-up.
The lanes' connections are opened and make their first call 32 at a time before the warm-up, as sessions arrive at a
service (N connections opened at once from one address are a connection storm, which the unauthenticated
connections' per-address cap answers by closing the ones not yet read, so the lanes' first calls took seconds: that
is ``scripts/chaos http``'s matter, not this curve's).

A refused call (503 or 429) is counted and its lane waits what ``Retry-After`` says (at most ``--max-wait``), as a
client that honours it does: the official SDK client does not retry by itself (it hands the JSON-RPC error, with
``data.retryAfterSeconds``, to its caller), so a caller that waits the time it is told and tries again is the most
a real client sends. Each wait is spread by up to ``--jitter`` of itself (default 0.1), as independent clients'
retries are: lanes refused in one instant do not come back in one instant.

Per N: the calls **begun** in the measured window (each is waited for to its end): admitted ones per second, their
p50 and p99, refusals per second, errors (any other answer, a closed connection). A call begun in the warm-up counts
nowhere, so no latency of the warm-up leaks into the window. The sessions are ended (``DELETE``) before the next N.
"""

from __future__ import annotations

import math
import os
import random
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench_common import agent_file, start_http_service, system_toolbox, write_policy

from labkit import LeanLane, RawSession
from supervisor.frontends._http_auth import hash_token

__all__ = ["curve"]

REPO = Path(__file__).resolve().parents[1]
TOKEN = "load-curve-token"
TOOL = "system_system_date"


def _policy(root: Path, bound: int, sessions: int) -> Path:
    return write_policy(
        root,
        [agent_file(root, builtinToolboxes=[system_toolbox()])],
        sessions={"max_calls": None, "max_concurrent_calls": 64},
        frontends={
            "http": {
                "listen": "127.0.0.1:0",
                "max_sessions": sessions + 100,
                "max_connections": 2 * sessions + 200,
                "max_requests_in_flight": bound,
            }
        },
        tenants={
            "load": {
                "tokens": [hash_token(TOKEN)],
                "agents": ["bench"],
                "limits": {"sessions": sessions + 100, "concurrent_calls": 1_000_000},
            }
        },
    )


@dataclass
class Point:
    """What N sessions calling at once got."""

    sessions: int
    seconds: float
    latencies: list[float] = field(default_factory=list)
    refused: dict[int, int] = field(default_factory=dict)
    errors: int = 0
    #: CPU seconds spent in the window by the service (the supervisor and its workers) and by this client
    service_cpu: float = 0.0
    client_cpu: float = 0.0

    def row(self) -> dict[str, Any]:
        ordered = sorted(self.latencies)
        return {
            "sessions": self.sessions,
            "calls_s": len(ordered) / self.seconds,
            "p50_ms": 1000 * statistics.median(ordered) if ordered else 0.0,
            "p99_ms": 1000 * ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else 0.0,
            "refused_s": sum(self.refused.values()) / self.seconds,
            "refused": {str(k): v for k, v in sorted(self.refused.items())},
            "errors": self.errors,
            # CPU per admitted call, the refusals' included: what holds or not past saturation whatever else the
            # machine runs (time figures move with the load of a shared machine, these barely do)
            "service_cpu_ms_per_call": 1000 * self.service_cpu / max(1, len(ordered)),
            "client_cpu_ms_per_call": 1000 * self.client_cpu / max(1, len(ordered)),
        }


def _tree_cpu(pid: int) -> float:
    """CPU seconds (user and system) used so far by process ``pid`` and its descendants alive now."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    used: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        parents[int(entry)] = int(fields[1])
        used[int(entry)] = (int(fields[11]) + int(fields[12])) / tick
    total = 0.0
    for proc, seconds in used.items():
        ancestor = proc
        while ancestor not in (pid, 0, 1) and ancestor in parents:
            ancestor = parents[ancestor]
        total += seconds if ancestor == pid else 0.0
    return total


def _own_cpu() -> float:
    times = os.times()
    return times.user + times.system


async def _point(
    url: str, pid: int, n: int, seconds: float, warmup: float, max_wait: float, jitter: float = 0.1
) -> Point:
    headers = {"authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=64)) as opener:
        sessions = [RawSession(opener, url, headers) for _ in range(n)]
        limiter = trio.CapacityLimiter(32)

        async def open_one(s: RawSession) -> None:
            async with limiter:
                await s.open()

        async with trio.open_nursery() as nursery:
            for s in sessions:
                nursery.start_soon(open_one, s)
    lanes = [LeanLane(url, headers, s.session_id, TOOL) for s in sessions]
    point = Point(n, seconds)
    window = (math.inf, math.inf)  # when calls begun count: set once the warm-up is over
    stop = trio.Event()

    async def wait_as_told(retry: float | None) -> None:
        told = min(retry if retry is not None else 1.0, max_wait)
        await trio.sleep(told * (1 + jitter * random.random()))

    async def ramp(lane: LeanLane) -> None:
        async with limiter:  # connected, authenticated by a first call, 32 at a time
            try:
                status, retry = await lane.answer()
            except (RuntimeError, OSError, trio.BrokenResourceError):
                return
        if status in (429, 503):
            await wait_as_told(retry)

    async def loop(lane: LeanLane) -> None:
        while not stop.is_set():
            began = time.perf_counter()
            counted = window[0] <= began < window[1]
            try:
                status, retry = await lane.answer()
            except (RuntimeError, OSError, trio.BrokenResourceError):
                point.errors += counted
                continue
            if status == 200:
                if counted:
                    point.latencies.append(time.perf_counter() - began)
            elif status in (429, 503):
                if counted:
                    point.refused[status] = point.refused.get(status, 0) + 1
                await wait_as_told(retry)
            else:
                point.errors += counted

    async with trio.open_nursery() as nursery:
        ramped = 0
        all_ramped = trio.Event()  # every lane connected and past its first call

        async def counted_ramp(lane: LeanLane) -> None:
            nonlocal ramped
            await ramp(lane)
            ramped += 1
            if ramped == n:
                all_ramped.set()
            await loop(lane)

        for lane in lanes:
            nursery.start_soon(counted_ramp, lane)
        await all_ramped.wait()
        await trio.sleep(warmup)
        cpu = _tree_cpu(pid), _own_cpu()
        now = time.perf_counter()
        window = (now, now + seconds)
        await trio.sleep(seconds)
        point.service_cpu, point.client_cpu = _tree_cpu(pid) - cpu[0], _own_cpu() - cpu[1]
        stop.set()
    for lane in lanes:
        await lane.aclose()

    async def end(closer: httpx.AsyncClient, session: RawSession) -> None:
        async with limiter:
            await closer.delete(url, headers={**headers, "mcp-session-id": session.session_id or ""})

    async with httpx.AsyncClient(timeout=60) as closer, trio.open_nursery() as nursery:
        for s in sessions:
            nursery.start_soon(end, closer, s)
    return point


def _start(root: Path, bound: int, sessions: int, checkout: Path) -> tuple[subprocess.Popen[bytes], str]:
    return start_http_service(_policy(root, bound, sessions), checkout)


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def curve(
    root: Path,
    bounds: list[int],
    sessions: list[int],
    seconds: float,
    warmup: float,
    max_wait: float,
    jitter: float = 0.1,
    checkouts: list[Path] | None = None,
) -> list[dict[str, Any]]:
    """Every (bound, N, checkout): its row (see :meth:`Point.row`), with ``bound``, ``checkout`` and the load
    average. ``checkouts``: the code served (default this checkout); with several (before and after a change), one
    service of each runs per bound and each N is measured on each in turn, back to back, so that what else the
    machine runs weighs on both alike (in turn: the first of one N is the last of the next)."""
    rows = []
    trees = checkouts or [REPO]
    for bound in bounds:
        services: list[tuple[Path, subprocess.Popen[bytes], str]] = []
        try:
            for index, tree in enumerate(trees):
                folder = root / f"bound-{bound}-{index}"
                folder.mkdir()
                folder.chmod(0o755)
                services.append((tree, *_start(folder, bound, max(sessions), tree)))
            for index, n in enumerate(sessions):
                for tree, process, url in services if index % 2 == 0 else services[::-1]:  # neither always first
                    point = trio.run(_point, url, process.pid, n, seconds, warmup, max_wait, jitter)
                    row = {"bound": bound, "checkout": str(tree), **point.row(), "load": os.getloadavg()[0]}
                    rows.append(row)
                    label = f"  [{tree.name}]" if len(trees) > 1 else ""
                    print(
                        f"  bound {bound:>7}  sessions {n:>5}  {row['calls_s']:7.0f} calls/s  p50 {row['p50_ms']:7.1f} "
                        f"ms  p99 {row['p99_ms']:7.1f} ms  refused {row['refused_s']:7.0f}/s {row['refused']}  errors "
                        f"{row['errors']}  cpu/call {row['service_cpu_ms_per_call']:.2f}"
                        f"+{row['client_cpu_ms_per_call']:.2f} ms  load {row['load']:.1f}{label}",
                        flush=True,
                    )
        finally:
            for _, process, _ in services:
                _stop(process)
    return rows
