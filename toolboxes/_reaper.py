"""Spawning scripts and leaving no process behind: the reaper every kind that runs programs shares.

Each script starts in a new session (``start_new_session=True``: its pid is its session and process-group id) with
a minimal environment, stdin either ``/dev/null`` or a pipe that is closed once the stdin-mode arguments are
written, and stdout/stderr pipes read in the calling thread by a selector together with a pidfd of the script (so the
exit of the script is seen even while a child still holds the pipes) and a wake pipe (so a cancel from another thread
is seen at once).

When the script exits, times out, or its call is cancelled, :meth:`Reaper.kill_tree` kills what it left:

1. its process group (``killpg``), while the leader is still an unreaped zombie so its pid cannot be reused;
2. every process of its session found in ``/proc`` (children that moved to another process group);
3. with ``subreaper`` on (one toolbox per worker process), every child of this process that no call is tracking:
   the worker is a child subreaper (``PR_SET_CHILD_SUBREAPER``), so a grandchild that escaped with ``setsid`` is
   re-parented here when its parent dies, and is killed and reaped.

Steps 2 and 3 need a ``/proc`` that shows this process's own PID namespace. A confined worker needs neither: it
is PID 1 of a PID namespace of its own, so every process of the namespace descends from it and every orphan is
re-parented to it. There the reaper uses what PID 1 gets instead: whenever no other script is running (when the
only running script's leader exits, and the moment the last call or describe of the worker ends) it kills every
other process of the namespace (``kill(-1, SIGKILL)``, which a PID 1 only delivers inside its namespace) and reaps
them all. That costs nothing in the common case: a PID 1 with no child left (``waitid`` says ``ECHILD``) has no
process left in its namespace, so there is nothing to kill and no ``/proc`` to scan.

What this does not cover: a process that escaped with ``setsid`` while its parent is still alive and then outlives
the sweep's parent-exit (it is caught by the next sweep, the next idle moment of a PID-1 worker, or
:meth:`Reaper.close`); and a process that is neither in a PID namespace of its own nor able to read ``/proc``, where
only the process group is killed. Memory, CPU and process-count limits are the worker's rlimits, set by the
launcher; they are not this module's concern.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import threading
import time
from dataclasses import dataclass

from sandbox import LIBC

__all__ = ["KILL_WAIT_S", "Reaper", "Spawned"]

_PR_SET_CHILD_SUBREAPER = 36
#: How long a tree kill waits for its victims to die before it rescans.
KILL_WAIT_S = 2.0
#: ``__WALL``: wait for every kind of child, including ``clone()`` children whose exit signal is not ``SIGCHLD``
#: (invisible to ``waitid`` without it). Defensive: the kernel gives a child re-parented to the worker ``SIGCHLD``
#: as its exit signal, and the worker makes no such children itself.
_WALL = 0x40000000


@dataclass
class Spawned:
    """A started script: its process and this side's ends of its pipes (``stdin_fd`` ``None``: it reads
    ``/dev/null``). :func:`run_bounded` closes the ends."""

    proc: subprocess.Popen[bytes]
    stdout_fd: int
    stderr_fd: int
    stdin_fd: int | None

    def close(self) -> None:
        for fd in (self.stdout_fd, self.stderr_fd, self.stdin_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)


def _proc_stat(pid: int) -> tuple[str, int, int, int] | None:
    """``(state, ppid, pgrp, session)`` of ``pid`` from ``/proc``, or ``None`` when it is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    try:
        return fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[3])
    except (IndexError, ValueError):
        return None


def _proc_is_ours() -> bool:
    """Whether ``/proc`` shows this process's PID namespace (its ``/proc/self`` is our own pid)."""
    try:
        with open("/proc/self/stat", "rb") as f:
            return int(f.read().split(b" ", 1)[0]) == os.getpid()
    except (OSError, ValueError):
        return False


def _all_pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


class Reaper:
    """Spawns scripts and kills whatever they leave behind. Thread-safe; one per toolbox.

    Args:
        subreaper: make this process a child subreaper and treat every child it has that no call tracks as a leftover
            to kill and reap. Right for a worker process (it runs one toolbox and has no other children); leave it
            off in a process that has children of its own.
    """

    def __init__(self, subreaper: bool = False) -> None:
        self._lock = threading.Lock()
        self._tracked: set[int] = set()
        self._subreaper = subreaper
        self._closed = False
        self._devnull_fd: int | None = None
        self._proc_ok = _proc_is_ours()
        if subreaper and LIBC.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            self._subreaper = False
        #: PID 1 of a PID namespace: every other process of the namespace descends from this one, so whenever no
        #: script runs, every other process is a leftover to wipe (no /proc needed).
        self.wipe_when_idle = subreaper and os.getpid() == 1

    def spawn(self, argv: list[str], env: dict[str, str], cwd: str, stdin: bool) -> Spawned:
        """Start ``argv`` in a new session and track it. Raises ``OSError`` (cannot exec) or ``RuntimeError``
        (reaper closed)."""
        # Plain pipes (no Python file objects around them); stdin is /dev/null unless the caller writes to it.
        ours: list[int] = []
        theirs: list[int] = []
        try:
            out_r, out_w = os.pipe2(os.O_CLOEXEC)
            ours.append(out_r)
            theirs.append(out_w)
            err_r, err_w = os.pipe2(os.O_CLOEXEC)
            ours.append(err_r)
            theirs.append(err_w)
            in_w: int | None = None
            if stdin:
                child_in, in_w = os.pipe2(os.O_CLOEXEC)
                ours.append(in_w)
                theirs.append(child_in)
            with self._lock:
                if self._closed:
                    raise RuntimeError("the toolbox is closing")
                if not stdin:
                    child_in = self._devnull()
                proc = subprocess.Popen(
                    argv,
                    stdin=child_in,
                    stdout=out_w,
                    stderr=err_w,
                    env=env,
                    cwd=cwd,
                    start_new_session=True,
                    close_fds=True,
                )
                self._tracked.add(proc.pid)
        except BaseException:
            for fd in ours:
                os.close(fd)
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        return Spawned(proc, out_r, err_r, in_w)

    def _devnull(self) -> int:
        """A descriptor of ``/dev/null`` for scripts' stdin, opened once (read-only: a script's write fails).
        Holds the lock."""
        if self._devnull_fd is None:
            self._devnull_fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        return self._devnull_fd

    def forget(self, proc: subprocess.Popen[bytes]) -> None:
        """Stop tracking a script that has been reaped."""
        with self._lock:
            self._tracked.discard(proc.pid)
            if self.wipe_when_idle and not self._tracked:
                self._wipe_namespace_locked()

    def leader_exited(self, proc: subprocess.Popen[bytes]) -> None:
        """The leader of ``proc``'s tree has exited (it is a zombie, not yet reaped): kill what it left behind, so
        that nothing holds its pipes open, and reap the leader when that is part of the cleanup."""
        with self._lock:
            if self.wipe_when_idle and self._tracked == {proc.pid}:
                # No other script runs and none can start while the lock is held: every other process of the
                # namespace is a leftover of this one. Reap the leader first (then its pid names nothing of ours).
                proc.wait()
                self._wipe_namespace_locked()
                return
        self.kill_tree(proc.pid)

    def _wipe_namespace_locked(self) -> None:
        """Kill every process of the namespace but this one and reap them (bounded). Holds the lock, so no spawn
        races with the reaping. Costs one ``waitid`` when there is nothing to kill."""
        flags = os.WEXITED | os.WNOHANG | _WALL
        try:
            os.waitid(os.P_ALL, 0, flags | os.WNOWAIT)
        except ChildProcessError:
            return  # no child at all, so (as PID 1) no other process in the namespace
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(-1, signal.SIGKILL)
        deadline = time.monotonic() + KILL_WAIT_S
        while True:
            try:
                reaped = os.waitid(os.P_ALL, 0, flags)
            except ChildProcessError:
                return  # no children left
            if reaped is None:
                if time.monotonic() > deadline:
                    return  # still dying: reaped at the next idle moment
                time.sleep(0.002)

    def _targets(self, sid: int) -> list[int]:
        """Live processes to kill; zombie orphans seen on the way are reaped (one scan of ``/proc`` for both).
        Holds the lock."""
        if not self._proc_ok:
            return []
        me = os.getpid()
        out = []
        for pid in _all_pids():
            st = _proc_stat(pid)
            if st is None or pid == me:
                continue
            orphan = self._subreaper and st[1] == me and pid not in self._tracked
            if st[0] in "ZX":
                if orphan:
                    with contextlib.suppress(ChildProcessError, OSError):
                        os.waitpid(pid, os.WNOHANG)
                continue
            if st[3] == sid or st[2] == sid or orphan:
                out.append(pid)
        return out

    def _reap_orphans(self) -> None:
        if not (self._subreaper and self._proc_ok):
            return
        me = os.getpid()
        with self._lock:
            for pid in _all_pids():
                st = _proc_stat(pid)
                if st is not None and st[1] == me and pid not in self._tracked:
                    with contextlib.suppress(ChildProcessError, OSError):
                        os.waitpid(pid, os.WNOHANG)

    def kill_tree(self, sid: int) -> None:
        """Kill the session/process group ``sid`` and every untracked leftover child, and wait (bounded) until they
        are dead; reap the ones that are this process's children. Never raises for processes already gone."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(sid, signal.SIGKILL)
        killed = False
        for _round in range(10):
            fds: list[int] = []
            with self._lock:
                for pid in self._targets(sid):
                    try:
                        fd = os.pidfd_open(pid)
                    except OSError:
                        continue
                    try:
                        signal.pidfd_send_signal(fd, signal.SIGKILL)
                    except OSError:
                        os.close(fd)
                        continue
                    fds.append(fd)
            if not fds:
                break
            killed = True
            try:
                _wait_readable(fds, KILL_WAIT_S)
            finally:
                for fd in fds:
                    os.close(fd)
        if killed:  # otherwise the one scan above already reaped every zombie orphan
            self._reap_orphans()

    def close(self) -> None:
        """Refuse new spawns and kill every tracked script with its tree. Safe to call twice."""
        with self._lock:
            self._closed = True
            tracked = list(self._tracked)
        for pid in tracked:
            self.kill_tree(pid)
        if self.wipe_when_idle:
            with self._lock:
                self._wipe_namespace_locked()
        with self._lock:
            if self._devnull_fd is not None:
                os.close(self._devnull_fd)
                self._devnull_fd = None


def _wait_readable(fds: list[int], timeout_s: float) -> None:
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    pending = set(fds)
    deadline = time.monotonic() + timeout_s
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        for fd, _ev in poller.poll(left * 1000):
            pending.discard(fd)
            poller.unregister(fd)
