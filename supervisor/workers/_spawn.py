"""A child process owned by the supervisor, spawned from the trio thread itself (a launcher, or the zygote; a child
the zygote forks is a ``_zygote_client.ZygoteChild``, which has this interface).

Why not ``trio.lowlevel.open_process``: trio forks from a cached worker thread, and a child's ``PR_SET_PDEATHSIG``
fires when the *thread* that forked it exits (about 10 s after it goes idle), which killed healthy workers
(FACTS.md). Here ``subprocess.Popen`` runs synchronously on the thread that runs trio, which lives as long as the
supervisor; with no ``preexec_fn`` CPython takes its vfork fast path, so the loop is blocked for about a millisecond.
The pipes are wrapped in :class:`trio.lowlevel.FdStream` and the exit is awaited on a pidfd.

:meth:`ChildProcess.aclose` is the kill path: SIGTERM, a grace period, SIGKILL, reap; shielded, safe to call twice.
"""

from __future__ import annotations

import os
import signal
import subprocess
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ["ChildProcess", "PidfdChild", "spawn_child"]


class PidfdChild:
    """A running child the supervisor holds by a pidfd, with trio streams for its stdin, stdout and stderr: what a
    worker's connection needs of its process, whoever made it. Subclasses say how its exit status is learnt
    (:meth:`wait`, :meth:`poll`); signals go through the pidfd, so a recycled pid is never signalled."""

    def __init__(self, pid: int, pidfd: int, stdin: int, stdout: int, stderr: int) -> None:
        self.pid = pid
        self._pidfd = pidfd
        self.stdin = trio.lowlevel.FdStream(stdin)
        self.stdout = trio.lowlevel.FdStream(stdout)
        self.stderr = trio.lowlevel.FdStream(stderr)
        self.returncode: int | None = None
        #: the child joined its cgroup itself (it was sent the group's ``cgroup.procs`` fds); else the caller moves it
        self.cgroup_joined = False
        #: how many bytes of its stdin were written before it ran (the plan, waiting in the pipe)
        self.stdin_sent = 0
        self._closed = False
        self._wait_lock = trio.Lock()  # one task at a time may wait on the pidfd

    async def wait(self) -> int:
        """Wait for the child to exit; its status as ``Popen.returncode`` (negative = signal). A checkpoint;
        cancellation leaves the child running."""
        raise NotImplementedError

    def poll(self) -> int | None:
        """The exit status if it is known, else ``None``."""
        raise NotImplementedError

    def send_signal(self, sig: int) -> None:
        """Signal the child through its pidfd unless its exit is already known."""
        if self.poll() is None:
            try:
                signal.pidfd_send_signal(self._pidfd, sig)
            except ProcessLookupError:
                pass

    async def aclose(self, grace_s: float = 2.0) -> None:
        """Stop the child: SIGTERM, up to ``grace_s`` to exit, then SIGKILL, wait, close every fd.

        Shielded from cancellation so that the child is always waited for; calling it twice is fine.
        """
        with trio.CancelScope(shield=True):
            if self.poll() is None:
                self.send_signal(signal.SIGTERM)
                with trio.move_on_after(grace_s):
                    await self.wait()
                if self.poll() is None:
                    self.send_signal(signal.SIGKILL)
                    await self.wait()
            if not self._closed:
                self._closed = True
                for stream in (self.stdin, self.stdout, self.stderr):
                    await stream.aclose()
                os.close(self._pidfd)

    async def kill(self) -> None:
        """SIGKILL and wait at once (no grace), then close the fds."""
        await self.aclose(grace_s=0.0)


class ChildProcess(PidfdChild):
    """A child this process spawned (and reaps) itself."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        assert popen.stdin is not None
        assert popen.stdout is not None
        assert popen.stderr is not None
        super().__init__(
            popen.pid,
            os.pidfd_open(popen.pid),
            os.dup(popen.stdin.fileno()),
            os.dup(popen.stdout.fileno()),
            os.dup(popen.stderr.fileno()),
        )
        self._popen = popen
        for f in (popen.stdin, popen.stdout, popen.stderr):
            f.close()

    async def wait(self) -> int:
        """Wait for the child to exit and reap it; returns its status as ``Popen.returncode`` (negative = signal).

        A checkpoint. Cancellation leaves the child running.
        """
        async with self._wait_lock:
            if self.returncode is None:
                await trio.lowlevel.wait_readable(self._pidfd)
                self.returncode = self._popen.wait()
        return self.returncode

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._popen.poll()
        return self.returncode


def spawn_child(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str,
    pass_fds: Sequence[int] = (),
    new_session: bool = False,
) -> ChildProcess:
    """Start ``argv`` with pipes on stdin/stdout/stderr and exactly ``env``; ``new_session``: in a session (and
    process group) of its own. Synchronous (no checkpoint).

    Raises ``OSError`` when the program cannot be started.
    """
    popen = subprocess.Popen(
        list(argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(env),
        cwd=cwd,
        close_fds=True,
        pass_fds=tuple(pass_fds),
        start_new_session=new_session,
    )
    return ChildProcess(popen)
