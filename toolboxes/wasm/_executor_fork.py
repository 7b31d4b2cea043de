"""The first executors of a WASM toolbox, forked from the worker while it still runs one thread.

An executor started by exec costs an interpreter start and wasmtime's import (about half a second here), and the
first one is on the path of the worker's ``hello`` (the load checks run in it). The worker has wasmtime imported
already, and while it opens its toolbox it runs a single thread: a fork then copies a consistent process, and the
child can run :func:`._executor.main` at once. Later executors (replacements, bursts) are exec'd
(:mod:`._executors`): by then the worker runs threads, and a fork of a threaded process may copy a lock another
thread held. :func:`fork_executors` checks the thread count itself (``/proc/self/task``) and forks nothing
otherwise (a toolbox opened in a test process, for one).

A forked executor is the worker's child like an exec'd one (the same walls); it closes every fd but its two pipes,
puts the default disposition back on the signals the worker handles, and gets ``TOKIO_WORKER_THREADS=1``. It shares
the worker's address layout and hash seed (as the worker shares the zygote's: docs/CONFINEMENT.md).
"""

from __future__ import annotations

import os
import signal
import threading

__all__ = ["ForkedProcess", "fork_executors", "single_threaded"]


def single_threaded() -> bool:
    """Whether this process runs exactly one thread now (the kernel's count, not only Python's)."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False


class ForkedProcess:
    """The handle of a forked executor, with what :class:`subprocess.Popen` offers that the pool uses: ``pid``,
    ``stdin``/``stdout`` (unbuffered), :meth:`poll`, :meth:`kill`, :meth:`wait`. Thread-safe; the pid is never
    signalled once reaped (it is this process's child, so it cannot be reused before)."""

    def __init__(self, pid: int, stdin_fd: int, stdout_fd: int) -> None:
        self.pid = pid
        self.stdin = os.fdopen(stdin_fd, "wb", buffering=0)
        self.stdout = os.fdopen(stdout_fd, "rb", buffering=0)
        self.returncode: int | None = None
        self._lock = threading.Lock()

    def _reap(self, flags: int) -> int | None:
        with self._lock:
            if self.returncode is None:
                pid, status = os.waitpid(self.pid, flags)
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
            return self.returncode

    def poll(self) -> int | None:
        return self._reap(os.WNOHANG)

    def kill(self) -> None:
        with self._lock:
            if self.returncode is None:
                os.kill(self.pid, signal.SIGKILL)

    def wait(self) -> int | None:
        return self._reap(0)


def fork_executors(count: int) -> list[ForkedProcess]:
    """``count`` executors forked from this process now, each waiting for its ``setup`` on its stdin; none when this
    process runs more than one thread."""
    out: list[ForkedProcess] = []
    for _ in range(count):
        if not single_threaded():
            break
        child_in, parent_out = os.pipe()
        parent_in, child_out = os.pipe()
        pid = os.fork()
        if pid == 0:  # the executor
            try:
                os.dup2(child_in, 0)
                os.dup2(child_out, 1)
                os.closerange(3, os.sysconf("SC_OPEN_MAX"))
                for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                    signal.signal(sig, signal.SIG_DFL)
                # the worker's signal wake-up pipe (toolboxes/_worker.py) is closed above and is not this process's:
                # the executor's file size watch sets its own
                signal.set_wakeup_fd(-1)
                os.environ["TOKIO_WORKER_THREADS"] = "1"
                from ._executor import main

                main()
            finally:
                os._exit(70)
        os.close(child_in)
        os.close(child_out)
        out.append(ForkedProcess(pid, parent_out, parent_in))
    return out
