"""A ``python -m supervisor serve`` process for tests: started, its stderr read line by line, its trace, SIGHUP."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

REPO = str(Path(__file__).resolve().parents[2])


class Service:
    """A ``serve`` process: its stderr read line by line (``wait_line``), its trace, SIGHUP."""

    def __init__(self, process: trio.Process, state: Path) -> None:
        self.process = process
        self.state = state
        self.lines: list[str] = []
        self._changed = trio.Event()

    async def read_stderr(self) -> None:
        assert self.process.stderr is not None
        buffer = b""
        while chunk := await self.process.stderr.receive_some(65536):
            buffer += chunk
            *done, buffer = buffer.split(b"\n")
            self.lines += [d.decode(errors="replace") for d in done]
            self._changed.set()
            self._changed = trio.Event()

    async def wait_line(self, text: str, after: int = 0) -> str:
        """The first stderr line from index ``after`` on that holds ``text`` (waits for it)."""
        while True:
            for line in self.lines[after:]:
                if text in line:
                    return line
            await self._changed.wait()

    def records(self, kind: str) -> list[dict[str, Any]]:
        path = self.state / "trace.jsonl"
        lines = path.read_text().split("\n")[:-1] if path.exists() else []  # a line still being written is left
        return [r for r in map(json.loads, lines) if r.get("event") == kind]

    def spawns(self, toolbox: str) -> list[int]:
        return [r["pid"] for r in self.records("worker_spawn") if r["toolbox"] == toolbox]

    def hup(self) -> int:
        """Send SIGHUP; returns how many stderr lines came before it."""
        seen = len(self.lines)
        self.process.send_signal(signal.SIGHUP)
        return seen


@asynccontextmanager
async def serve_processes(root: Path) -> AsyncIterator[Any]:
    """``start(*args)`` runs ``python -m supervisor serve --policy <root>/policy.yaml *args`` as a :class:`Service`;
    every one started is stopped (SIGTERM) at the end."""
    services: list[Service] = []

    async def start(*extra: str) -> Service:
        process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "supervisor", "serve", "--policy", str(root / "policy.yaml"), *extra],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": REPO},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        service = Service(process, root / "state")
        services.append(service)
        nursery.start_soon(service.read_stderr)
        return service

    async with trio.open_nursery() as nursery:
        try:
            yield start
        finally:
            for s in services:
                s.process.terminate()
                await s.process.wait()
            nursery.cancel_scope.cancel()
