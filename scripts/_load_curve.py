"""The HTTP service's load curve past saturation (``scripts/load_http curve``): throughput and latency against the
number of sessions calling at once, with the server's work bound (``frontends.http.max_requests_in_flight``) and
without one.

One ``agents-supervise serve --http`` (strict.yaml's protections, one tenant whose own limits stay out of the way, a
System toolbox whose ``date`` is the call) per bound. For each number of sessions N: N sessions are opened, each
gets a keep-alive connection (the lean lane of ``scripts/bench_http.py``: the request encoded once, the answer read by
its ``content-length``, so that the client costs little CPU) and calls in a loop for ``--seconds`` after a warm-up.
A refused call (503 or 429) is counted and its lane waits what ``Retry-After`` says (at most ``--max-wait``), as a
client that honours it does. Per N: admitted calls per second, their p50 and p99, refusals per second, errors
(any other answer, a closed connection). The sessions are ended (``DELETE``) before the next N.
"""

from __future__ import annotations

import os
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
        }


async def _point(url: str, n: int, seconds: float, warmup: float, max_wait: float) -> Point:
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
    measuring = False
    stop = trio.Event()

    async def loop(lane: LeanLane) -> None:
        while not stop.is_set():
            began = time.perf_counter()
            try:
                status, retry = await lane.answer()
            except (RuntimeError, OSError, trio.BrokenResourceError):
                point.errors += measuring
                continue
            if status == 200:
                if measuring:
                    point.latencies.append(time.perf_counter() - began)
            elif status in (429, 503):
                if measuring:
                    point.refused[status] = point.refused.get(status, 0) + 1
                await trio.sleep(min(retry if retry is not None else 1.0, max_wait))
            else:
                point.errors += measuring

    async with trio.open_nursery() as nursery:
        for lane in lanes:
            nursery.start_soon(loop, lane)
        await trio.sleep(warmup)
        measuring = True
        await trio.sleep(seconds)
        measuring = False
        stop.set()
    for lane in lanes:
        await lane.aclose()
    async with httpx.AsyncClient(timeout=60) as closer:
        for s in sessions:
            await closer.delete(url, headers={**headers, "mcp-session-id": s.session_id or ""})
    return point


def _start(root: Path, bound: int, sessions: int) -> tuple[subprocess.Popen[bytes], str]:
    return start_http_service(_policy(root, bound, sessions))


def curve(
    root: Path, bounds: list[int], sessions: list[int], seconds: float, warmup: float, max_wait: float
) -> list[dict[str, Any]]:
    """Every (bound, N): its row (see :meth:`Point.row`), with ``bound`` and the load average."""
    rows = []
    for bound in bounds:
        folder = root / f"bound-{bound}"
        folder.mkdir()
        folder.chmod(0o755)
        process, url = _start(folder, bound, max(sessions))
        try:
            for n in sessions:
                point = trio.run(_point, url, n, seconds, warmup, max_wait)
                row = {"bound": bound, **point.row(), "load": os.getloadavg()[0]}
                rows.append(row)
                print(
                    f"  bound {bound:>7}  sessions {n:>5}  {row['calls_s']:7.0f} calls/s  p50 {row['p50_ms']:7.1f} ms  "
                    f"p99 {row['p99_ms']:7.1f} ms  refused {row['refused_s']:7.0f}/s {row['refused']}  errors "
                    f"{row['errors']}  load {row['load']:.1f}",
                    flush=True,
                )
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    return rows
