"""The largest file a component may write, held by the kernel: the ``RLIMIT_FSIZE`` of the executor running it.

wasmtime's WASI writes files itself (on its own threads, by ``pwrite``/``write``), so no check in Python sees the
writes. The kernel does: a write that would take a file past ``RLIMIT_FSIZE`` writes up to the limit, and the
next one fails with ``EFBIG`` (the component gets ``file-too-large``) and raises ``SIGXFSZ`` in the writing thread.

The limit is the smaller of the FileSandbox's ``fsbMaxFileSize`` and the ``RLIMIT_FSIZE`` the worker already has
(the policy's ``limits.file_size_bytes``); :func:`plan_file_size_limit` picks it and the key that names it (pure).
:class:`FileSizeWatch` applies it (the soft limit; the hard one stays the launcher's) and counts ``SIGXFSZ``:
a no-op Python handler makes CPython's C handler write the signal number to a wakeup pipe at once, from whichever
thread the signal hit, so a call can ask whether a write past the limit happened while it ran
(:meth:`FileSizeWatch.mark`, :meth:`FileSizeWatch.hit_since`). The process-wide limit covers every file the
process writes, and files wasmtime makes for itself: the memfd images it initialises linear memories from count
(``ftruncate`` of a memfd checks ``RLIMIT_FSIZE``), so a toolbox with a limit runs its engine without them (each
instance copies its data segments; :func:`~._engine.make_engine`). An executor writes nothing of its own, so every
``SIGXFSZ`` it counts comes from the component; the worker's compile cache is bounded by the worker's own limit
(a compiled file larger than it is not written: :func:`fits`).

Where: each executor process (:mod:`._executor`) applies the limit to itself and runs one call at a time, so a hit
is that call's own; the worker that opened the toolbox keeps its own limit and signal handling.
"""

from __future__ import annotations

import os
import resource
import signal
import threading
from dataclasses import dataclass
from typing import Any

__all__ = ["FileSizeLimit", "FileSizeWatch", "current_limit", "fits", "plan_file_size_limit"]

FSB_KEY = "FileSandbox.fsbMaxFileSize"
POLICY_KEY = "limits.file_size_bytes"


@dataclass(frozen=True)
class FileSizeLimit:
    """``bytes``: the largest file; ``key``: the setting it comes from (for the messages)."""

    bytes: int
    key: str

    def message(self, tool: str) -> str:
        """What a call that wrote past the limit is told."""
        return (
            f"{tool}: a file write went past the file size limit of {self.bytes} bytes ({self.key}) and was "
            "refused (EFBIG; the component saw file-too-large); the file was cut at the limit"
        )


def plan_file_size_limit(fsb_max: int | None, current_soft: int) -> FileSizeLimit | None:
    """The limit for a worker whose FileSandbox allows files of ``fsb_max`` bytes (``None``: no FileSandbox
    limit) and whose ``RLIMIT_FSIZE`` is ``current_soft`` (``RLIM_INFINITY``: none). ``None`` when neither
    limits."""
    policy = None if current_soft == resource.RLIM_INFINITY else current_soft
    if fsb_max is not None and (policy is None or fsb_max <= policy):
        return FileSizeLimit(fsb_max, FSB_KEY)
    return None if policy is None else FileSizeLimit(policy, POLICY_KEY)


def current_limit(fsb_max: int | None) -> FileSizeLimit | None:
    """:func:`plan_file_size_limit` for this process's ``RLIMIT_FSIZE``."""
    return plan_file_size_limit(fsb_max, resource.getrlimit(resource.RLIMIT_FSIZE)[0])


def fits(size: int) -> bool:
    """Whether a file of ``size`` bytes can be written under this process's ``RLIMIT_FSIZE``."""
    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return soft == resource.RLIM_INFINITY or size <= soft


def _ignore(signum: int, frame: Any) -> None:
    """The Python side of the SIGXFSZ handler: nothing (the C side has written the wakeup pipe)."""


class FileSizeWatch:
    """The applied limit and the count of writes refused at it. :meth:`install` needs the main thread and a
    wakeup fd nobody else uses (a worker's main thread has both)."""

    def __init__(self, limit: FileSizeLimit, read_fd: int, write_fd: int, restore: tuple[int, Any]) -> None:
        self.limit = limit
        self._read_fd = read_fd
        self._write_fd = write_fd
        self._restore: tuple[int, Any] | None = restore
        self._lock = threading.Lock()
        self._hits = 0

    @classmethod
    def install(cls, limit: FileSizeLimit) -> FileSizeWatch:
        """Apply ``limit`` (from :func:`plan_file_size_limit`) and start counting. Raises ``RuntimeError`` when the
        process cannot watch it (not the main thread, the wakeup fd taken): then nothing is changed."""
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("the file size limit can only be set up on the worker's main thread")
        read_fd, write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        if previous != -1:
            signal.set_wakeup_fd(previous)
            os.close(read_fd)
            os.close(write_fd)
            raise RuntimeError("the process's signal wakeup fd is already in use")
        handler = signal.signal(signal.SIGXFSZ, _ignore)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit.bytes, hard))
        return cls(limit, read_fd, write_fd, (soft, handler))

    def close(self) -> None:
        """Put back the soft limit, the signal handler and the wakeup fd (main thread). Safe to call twice."""
        if self._restore is None or threading.current_thread() is not threading.main_thread():
            return
        with self._lock:
            soft, handler = self._restore
            self._restore = None
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
        signal.signal(signal.SIGXFSZ, handler)
        signal.set_wakeup_fd(-1)
        os.close(self._write_fd)
        os.close(self._read_fd)

    def _drain(self) -> None:
        while self._restore is not None:
            try:
                chunk = os.read(self._read_fd, 4096)
            except BlockingIOError:
                return
            if not chunk:
                return
            self._hits += chunk.count(int(signal.SIGXFSZ))

    def mark(self) -> int:
        """The count of refused writes so far (take it when a call starts)."""
        with self._lock:
            self._drain()
            return self._hits

    def hit_since(self, mark: int) -> bool:
        """Whether a write was refused at the limit since :meth:`mark` returned ``mark``."""
        with self._lock:
            self._drain()
            return self._hits > mark
