#!/opt/agents-supervise/venv/bin/python
"""Floors of the call rows of ``scripts/bench`` (rows 1-5): what a trivial call costs when nothing but Python, trio,
msgpack and a pipe stand between the caller and a second process that answers.

- :func:`round_trips`: a trio program (this process) sends one msgpack frame (a ``call`` shaped like the
  supervisor's) over a pipe to an echo worker, a second Python process that decodes each frame and answers a
  ``result`` frame; ``callers`` tasks call in a loop, caller ``i`` on worker ``i mod workers``. With one caller and one
  worker it is the floor of the Python API's p50 (row 4); with 64 callers over 8 workers the floor of the throughput
  row (row 5).
- ``relay`` (``floor_pipes.py relay``): a stdio MCP server shaped like our frontend, client -> Python relay -> Python
  echo worker: it reads JSON-RPC lines on stdin, answers ``initialize``, ``tools/list`` and ``ping`` itself, and for
  ``tools/call`` sends one msgpack frame to its echo worker (one trio task per request, as the frontend does) and
  writes the result line when the answer comes. ``scripts/bench`` drives it with the same clients as the two real
  servers (rows 1-3).

Neither checks, records or confines anything: the floor is the shape of the path, not its work.

Usage: ``floor_pipes.py [--calls N] [--callers C] [--workers W]`` prints the round trip's p50 us and calls/s;
``floor_pipes.py relay`` serves MCP on stdin/stdout.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

import msgpack
import trio

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

__all__ = ["ECHO_WORKER", "EchoWorker", "RoundTrips", "echo_workers", "fan_out", "relay", "round_trips"]

#: The echo worker: decodes every frame and answers a ``result`` frame for it (a worker's read-decode-encode-write).
ECHO_WORKER = """
import os, msgpack
unpacker = msgpack.Unpacker()
while data := os.read(0, 65536):
    unpacker.feed(data)
    out = b"".join(msgpack.packb({"t": "result", "id": f["id"], "status": "passed", "data": "2026-12-01T00:00:00"})
                   for f in unpacker)
    os.write(1, out)
"""


class EchoWorker:
    """An echo worker process and the trio side of its pipes: :meth:`call` sends a frame and waits for its answer
    (answers matched by id by :meth:`reader`, which must run in a nursery)."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", ECHO_WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self._out = trio.lowlevel.FdStream(os.dup(self.process.stdin.fileno()))
        self._in = trio.lowlevel.FdStream(os.dup(self.process.stdout.fileno()))
        self._ids = itertools.count(1)
        self._waiting: dict[int, trio.Event] = {}
        self._replies: dict[int, dict] = {}
        self._lock = trio.Lock()

    async def reader(self) -> None:
        unpacker = msgpack.Unpacker()
        while data := await self._in.receive_some(65536):
            unpacker.feed(data)
            for frame in unpacker:
                self._replies[frame["id"]] = frame
                self._waiting.pop(frame["id"]).set()

    async def call(self) -> dict:
        n = next(self._ids)
        done = self._waiting[n] = trio.Event()
        frame = msgpack.packb({"t": "call", "id": n, "tool": "date", "args": {}, "ctx": {}})
        async with self._lock:  # one writer at a time on the pipe
            await self._out.send_all(frame)
        await done.wait()
        return self._replies.pop(n)

    async def finish(self) -> None:
        """Close the worker's stdin: it exits, and :meth:`reader` returns at the end of its output."""
        await self._out.aclose()
        assert self.process.stdin is not None
        self.process.stdin.close()

    def close(self) -> None:
        """After :meth:`reader` returned (or was cancelled): close the rest and reap the worker."""
        self._in.close()
        assert self.process.stdout is not None
        self.process.stdout.close()
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


@dataclass(frozen=True)
class RoundTrips:
    p50_us: float
    calls_per_s: float


@asynccontextmanager
async def echo_workers(count: int) -> AsyncIterator[list[EchoWorker]]:
    """``count`` echo workers with their readers running, ended and reaped on exit."""
    echoes = [EchoWorker() for _ in range(count)]
    try:
        async with trio.open_nursery() as nursery:
            for echo in echoes:
                nursery.start_soon(echo.reader)
            yield echoes
            for echo in echoes:
                await echo.finish()
    finally:
        for echo in echoes:
            echo.close()


async def fan_out(echoes: list[EchoWorker], calls: int, callers: int) -> tuple[list[float], float]:
    """``calls`` round trips by ``callers`` tasks, caller ``i`` on ``echoes[i mod len(echoes)]``: the latencies and
    the wall time (seconds)."""
    samples: list[float] = []
    per = max(1, calls // callers)

    async def caller(i: int) -> None:
        echo = echoes[i % len(echoes)]
        for _ in range(per):
            t = time.perf_counter()
            await echo.call()
            samples.append(time.perf_counter() - t)

    start = time.perf_counter()
    async with trio.open_nursery() as lanes:
        for i in range(callers):
            lanes.start_soon(caller, i)
    return samples, time.perf_counter() - start


async def round_trips(calls: int, callers: int = 1, workers: int = 1, warmup: int = 200) -> RoundTrips:
    """``calls`` round trips by ``callers`` tasks over ``workers`` echo workers (after ``warmup`` sequential ones
    on each worker): the p50 and the calls per second."""
    async with echo_workers(workers) as echoes:
        for echo in echoes:
            for _ in range(warmup):
                await echo.call()
        samples, wall = await fan_out(echoes, calls, callers)
    return RoundTrips(statistics.median(samples) * 1e6, len(samples) / wall)


_TOOL = {"name": "date", "description": "The current date.", "inputSchema": {"type": "object", "properties": {}}}


async def relay() -> None:
    """Serve MCP on stdin/stdout, each ``tools/call`` relayed to an echo worker (see the module docstring)."""
    stdin = trio.lowlevel.FdStream(os.dup(0))
    stdout = trio.lowlevel.FdStream(os.dup(1))
    echo = EchoWorker()
    write_lock = trio.Lock()

    async def answer(msg: dict) -> None:
        method = msg.get("method")
        if method == "tools/call":
            reply = await echo.call()
            result: dict = {"content": [{"type": "text", "text": reply["data"]}], "isError": False}
        elif method == "initialize":
            result = {
                "protocolVersion": msg["params"].get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "floor-relay", "version": "1"},
            }
        elif method == "tools/list":
            result = {"tools": [_TOOL]}
        else:
            result = {}
        line = json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}).encode() + b"\n"
        async with write_lock:
            await stdout.send_all(line)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(echo.reader)
        async with trio.open_nursery() as answers:  # at the end of stdin: the calls in flight are answered first
            buffer = b""
            while chunk := await stdin.receive_some(65536):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        msg = json.loads(line)
                        if "id" in msg and "method" in msg:  # notifications get no answer
                            answers.start_soon(answer, msg)
        nursery.cancel_scope.cancel()
    echo.close()


def main() -> None:
    if sys.argv[1:2] == ["relay"]:
        trio.run(relay)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--callers", type=int, default=1)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    r = trio.run(round_trips, args.calls, args.callers, args.workers)
    print(
        f"round trip over a pipe, {args.callers} callers over {args.workers} echo workers: p50 {r.p50_us:.0f} us, "
        f"{r.calls_per_s:.0f} calls/s"
    )


if __name__ == "__main__":
    main()
