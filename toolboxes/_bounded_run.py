"""Running one script to completion under a wall-time limit, with capped output, leaving no process behind
(the process tree is killed by :class:`~toolboxes._reaper.Reaper`; its docstring tells how).

Each script starts in a new session (``start_new_session=True``: its pid is its session and process-group id) with
a minimal environment, stdin either ``/dev/null`` or a pipe that is closed once the stdin-mode arguments are
written, and stdout/stderr pipes read in the calling thread by a selector together with a pidfd of the script (so the
exit of the script is seen even while a child still holds the pipes) and a wake pipe (so a cancel from another thread
is seen at once).
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ._reaper import KILL_WAIT_S, Reaper, Spawned

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["ProcessOutcome", "run_bounded"]

#: After the script exits, how long the pipes may stay open (held by an escaped child) before they are abandoned.
_DRAIN_GRACE_S = 1.0
_READ_CHUNK = 65536


@dataclass
class ProcessOutcome:
    """How a run ended. ``exit_code`` is ``None`` when the script died of ``signal``; ``spawn_error`` is set (and
    everything else empty) when it could not start. ``stdout_total``/``stderr_total`` count every byte printed,
    including the ones past the cap."""

    exit_code: int | None = None
    signal: int | None = None
    stdout: bytes = b""
    stderr: bytes = b""
    stdout_total: int = 0
    stderr_total: int = 0
    timed_out: bool = False
    cancelled: bool = False
    spawn_error: str | None = None
    elapsed_s: float = 0.0

    @property
    def stdout_truncated(self) -> bool:
        return self.stdout_total > len(self.stdout)

    @property
    def stderr_truncated(self) -> bool:
        return self.stderr_total > len(self.stderr)


class _Waker:
    """A pipe a cancel callback writes to; safe to trigger after the run is over (it then does nothing)."""

    def __init__(self) -> None:
        self.read_fd, self._write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._lock = threading.Lock()
        self._open = True

    def wake(self) -> None:
        with self._lock:
            if self._open:
                with contextlib.suppress(BlockingIOError):
                    os.write(self._write_fd, b"x")

    def close(self) -> None:
        with self._lock:
            if self._open:
                self._open = False
                os.close(self._write_fd)
                os.close(self.read_fd)


def run_bounded(
    reaper: Reaper,
    argv: list[str],
    *,
    env: dict[str, str],
    cwd: str,
    stdin: bytes | None,
    deadline: float,
    stdout_cap: int,
    stderr_cap: int,
    on_cancel: Callable[[Callable[[], None]], None] | None = None,
) -> ProcessOutcome:
    """Run ``argv`` until it exits or ``deadline`` (``time.monotonic()``) passes, and kill its whole tree either way.

    Blocks the calling thread. Output past the caps is read and counted but not kept. A callback registered through
    ``on_cancel`` ends the run early with ``cancelled`` set. Never raises for anything the script does; a script that
    cannot be started gives an outcome with ``spawn_error``.
    """
    started = time.monotonic()
    try:
        spawned = reaper.spawn(argv, env, cwd, stdin is not None)
    except (OSError, ValueError, RuntimeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return ProcessOutcome(spawn_error=reason)
    proc = spawned.proc
    outcome = ProcessOutcome()
    waker = _Waker()
    try:
        _pump(reaper, spawned, outcome, waker, stdin, deadline, stdout_cap, stderr_cap, on_cancel)
    finally:
        # Whatever happened above (even an exception), leave nothing running.
        if proc.poll() is None:
            reaper.kill_tree(proc.pid)
        proc.wait()
        reaper.forget(proc)
        spawned.close()
        waker.close()
    code = proc.returncode
    if code is not None and code < 0:
        outcome.signal = -code
    else:
        outcome.exit_code = code
    outcome.elapsed_s = time.monotonic() - started
    return outcome


def _pump(
    reaper: Reaper,
    spawned: Spawned,
    outcome: ProcessOutcome,
    waker: _Waker,
    stdin: bytes | None,
    deadline: float,
    stdout_cap: int,
    stderr_cap: int,
    on_cancel: Callable[[Callable[[], None]], None] | None,
) -> None:
    proc = spawned.proc
    out, err = bytearray(), bytearray()
    poller = select.poll()
    pidfd = os.pidfd_open(proc.pid)
    try:
        what = {spawned.stdout_fd: "out", spawned.stderr_fd: "err", pidfd: "exit", waker.read_fd: "wake"}
        for fd in what:
            poller.register(fd, select.POLLIN)
        pending_in = memoryview(stdin or b"")
        if spawned.stdin_fd is not None:
            os.set_blocking(spawned.stdin_fd, False)
            if pending_in:
                what[spawned.stdin_fd] = "in"
                poller.register(spawned.stdin_fd, select.POLLOUT)
            else:
                os.close(spawned.stdin_fd)
                spawned.stdin_fd = None
        if on_cancel is not None:
            on_cancel(waker.wake)
        streams = 2
        exited = False
        killed = False
        end = deadline
        while streams or not exited:
            left = end - time.monotonic()
            if left <= 0:
                if exited or killed:
                    break  # an escaped child still holds the pipes, or the kill is stuck: give up on them
                outcome.timed_out = True
                reaper.kill_tree(proc.pid)
                killed = True
                end = time.monotonic() + KILL_WAIT_S
                continue
            for fd, _events in poller.poll(left * 1000):
                kind = what[fd]
                if kind == "out" or kind == "err":
                    chunk = os.read(fd, _READ_CHUNK)
                    if not chunk:
                        poller.unregister(fd)
                        streams -= 1
                        continue
                    if kind == "out":
                        outcome.stdout_total += len(chunk)
                        if len(out) < stdout_cap:
                            out += chunk[: stdout_cap - len(out)]
                    else:
                        outcome.stderr_total += len(chunk)
                        if len(err) < stderr_cap:
                            err += chunk[: stderr_cap - len(err)]
                elif kind == "in":
                    try:
                        n = os.write(fd, pending_in[:_READ_CHUNK])
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:
                        n = len(pending_in)
                    pending_in = pending_in[n:]
                    if not pending_in:
                        poller.unregister(fd)
                        os.close(fd)
                        spawned.stdin_fd = None
                elif kind == "exit":
                    poller.unregister(pidfd)
                    exited = True
                    # The leader is a zombie until reaped: its group id cannot be reused yet.
                    reaper.leader_exited(proc)
                    end = min(end, time.monotonic() + _DRAIN_GRACE_S) if not killed else end
                elif kind == "wake":
                    poller.unregister(waker.read_fd)
                    outcome.cancelled = True
                    reaper.kill_tree(proc.pid)
                    killed = True
                    end = time.monotonic() + KILL_WAIT_S
    finally:
        os.close(pidfd)
        outcome.stdout = bytes(out)
        outcome.stderr = bytes(err)
