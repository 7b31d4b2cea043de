"""Running one child program to completion from the supervisor: the supervisor side's one child runner.

:func:`collect` does the part every one-shot child shares: write its stdin (then close it), read its stdout and
stderr up to their caps (counting every byte), wait for its exit at most ``timeout_s`` (then SIGKILL, of its
process group when it leads one), reap it and close its fds, whatever happens (cancellation too). It waits in trio,
so the supervisor's loop keeps serving meanwhile; only the spawn is synchronous (``_spawn.spawn_child``, about a
millisecond). :func:`run_child` runs a program of the supervisor's own (a credential's ``command:`` source)
unconfined, in a session of its own; ``_confined_exec.run_confined`` runs untrusted work through the launcher and
collects it with :func:`collect` too.

The worker side's runner is ``toolboxes/_bounded_run.py`` (threads, no trio); the two share no code because a
worker has no trio loop and the supervisor has no thread to block.
"""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

from ._spawn import spawn_child

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from ._spawn import PidfdChild

__all__ = ["ChildOutcome", "collect", "run_child"]

#: How long the readers may go on after the child exited or was killed (a grandchild may hold the pipes).
_DRAIN_S = 2.0


@dataclass(frozen=True)
class ChildOutcome:
    """How a one-shot child ended. ``returncode`` is negative for a signal, ``None`` when it was killed at the time
    limit (``timed_out``). Output past the caps is dropped; ``*_total`` counts every byte."""

    returncode: int | None
    stdout: bytes
    stderr: bytes
    stdout_total: int
    timed_out: bool
    stderr_total: int = 0

    @property
    def stdout_truncated(self) -> bool:
        return self.stdout_total > len(self.stdout)

    def stderr_text(self, limit: int = 2000) -> str:
        return self.stderr.decode("utf-8", "replace").strip()[-limit:]


async def _read_capped(stream: Any, cap: int, into: list[bytes], total: list[int]) -> None:
    kept = 0
    try:
        while chunk := await stream.receive_some(65536):
            total[0] += len(chunk)
            if kept < cap:
                into.append(chunk[: cap - kept])
                kept += len(into[-1])
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass


async def collect(
    proc: PidfdChild,
    *,
    timeout_s: float,
    stdout_cap: int,
    stderr_cap: int,
    stdin: bytes = b"",
    group: bool = False,
    beside: Callable[[trio.Nursery], None] | None = None,
) -> ChildOutcome:
    """Feed, read and wait for ``proc`` (module docstring); always reaps it and closes its fds.

    Args:
        proc: the started child, its three pipes still open.
        timeout_s: the most it may run; then it is killed (``timed_out``).
        stdout_cap, stderr_cap: bytes kept of each stream.
        stdin: written, then stdin is closed (a child that does not read it is no error).
        group: ``proc`` leads a process group of its own: the kill at the time limit is the group's.
        beside: called with the nursery the child is read in, once its stdin is sent, to start tasks that run
            beside it (the launcher's bridge); they end with the child, or are cancelled after it.
    """
    out: list[bytes] = []
    err: list[bytes] = []
    out_total, err_total = [0], [0]
    timed_out = False
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_read_capped, proc.stdout, stdout_cap, out, out_total)
            nursery.start_soon(_read_capped, proc.stderr, stderr_cap, err, err_total)
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                if stdin:
                    await proc.stdin.send_all(stdin)
            await proc.stdin.aclose()
            with trio.move_on_after(timeout_s) as scope:
                if beside is not None:
                    beside(nursery)
                await proc.wait()
            if scope.cancelled_caught:
                timed_out = True
                if group:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)  # the leader is not reaped yet: its group id is its own
                await proc.kill()
            nursery.cancel_scope.deadline = trio.current_time() + _DRAIN_S  # readers end at EOF; never hang
    finally:
        await proc.aclose(grace_s=0.0)
    return ChildOutcome(
        None if timed_out else proc.returncode, b"".join(out), b"".join(err), out_total[0], timed_out, err_total[0]
    )


async def run_child(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    timeout_s: float,
    stdout_cap: int,
    stderr_cap: int = 64 << 10,
    cwd: str = "/",
    stdin: bytes = b"",
) -> ChildOutcome:
    """Run ``argv`` (no shell) unconfined, as the supervisor, with exactly ``env``, in a session of its own (the
    whole group is killed at the time limit). Raises ``OSError`` when it cannot be started; everything the program
    does is in the outcome."""
    proc = spawn_child(argv, env=env, cwd=cwd, new_session=True)
    return await collect(
        proc, timeout_s=timeout_s, stdout_cap=stdout_cap, stderr_cap=stderr_cap, stdin=stdin, group=True
    )
