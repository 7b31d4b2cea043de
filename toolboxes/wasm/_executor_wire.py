"""Reading the frames between the WASM toolbox and its executor processes (:mod:`._executor`): the worker protocol's
frames (``toolboxes._protocol``: :func:`~toolboxes._protocol.encode`, :class:`~toolboxes._protocol.FrameDecoder`,
directions ``to_executor`` and ``from_executor``), read here with what each end needs around them.

:class:`FrameReader` waits for the next frame on a non-blocking pipe with a deadline and a cancel flag, so a worker
thread waiting for an executor can give up on it at the time limit; :func:`read_blocking` is the executor's plain
blocking read of its next request; :func:`write_frame` writes one whole frame.
"""

from __future__ import annotations

import os
import select
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from .._protocol import FrameDecoder, ProtocolError, encode

if TYPE_CHECKING:
    import threading

__all__ = ["MAX_EXECUTOR_FRAME_BYTES", "FrameReader", "PeerGone", "WaitEnded", "read_blocking", "write_frame"]

#: The largest frame either end reads: a component's data may be as large as its memory (MaxMemoryMB, up to 4 GiB;
#: the worker cuts results at limits.output_bytes after); past this the executor is broken.
MAX_EXECUTOR_FRAME_BYTES = 1 << 30
#: How often a waiting reader looks at its cancel flag.
_POLL_S = 0.05


class PeerGone(Exception):
    """The other end closed its pipe (or died), or sent what is not a frame of its direction."""


class WaitEnded(Exception):
    """:meth:`FrameReader.read` stopped waiting: ``reason`` is ``"deadline"`` or ``"cancelled"``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def write_frame(fd: int, message: dict[str, Any]) -> None:
    """Write ``message`` as one frame on the blocking fd ``fd``. Raises ``OSError`` (``BrokenPipeError``: the
    reader is gone)."""
    view = memoryview(encode(message))
    while view:
        view = view[os.write(fd, view) :]


class _Frames:
    """Frames of one direction decoded from what is fed, kept in order."""

    def __init__(self, direction: str) -> None:
        self._decoder = FrameDecoder(direction, MAX_EXECUTOR_FRAME_BYTES)
        self._ready: deque[dict[str, Any]] = deque()

    def feed(self, data: bytes) -> None:
        try:
            self._ready.extend(self._decoder.feed(data))
        except ProtocolError as exc:
            raise PeerGone(f"a broken frame: {exc}") from exc

    def next(self) -> dict[str, Any] | None:
        return self._ready.popleft() if self._ready else None


class FrameReader:
    """Reads the ``direction`` frames of ``fd`` (set non-blocking here)."""

    def __init__(self, fd: int, direction: str = "from_executor") -> None:
        os.set_blocking(fd, False)
        self._fd = fd
        self._frames = _Frames(direction)

    def read(self, deadline: float | None = None, cancelled: threading.Event | None = None) -> dict[str, Any]:
        """The next frame. Raises :class:`WaitEnded` at ``deadline`` (a ``time.monotonic()`` value) or once
        ``cancelled`` is set, :class:`PeerGone` at end of file or on a broken frame."""
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        while (frame := self._frames.next()) is None:
            if cancelled is not None and cancelled.is_set():
                raise WaitEnded("cancelled")
            wait = _POLL_S if cancelled is not None else None
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise WaitEnded("deadline")
                wait = left if wait is None else min(wait, left)
            if not poller.poll(None if wait is None else max(1, int(wait * 1000))):
                continue
            try:
                chunk = os.read(self._fd, 1 << 20)
            except BlockingIOError:
                continue
            if not chunk:
                raise PeerGone("end of file")
            self._frames.feed(chunk)
        return frame


def read_blocking(fd: int, frames: _Frames | None = None) -> tuple[dict[str, Any] | None, _Frames]:
    """The next ``to_executor`` frame from the blocking fd ``fd`` (``None`` at end of file between frames) and the
    decoder state to pass to the next read. Raises :class:`PeerGone` for a broken frame or an end inside one."""
    frames = frames if frames is not None else _Frames("to_executor")
    pending = False
    while (frame := frames.next()) is None:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            if pending:
                raise PeerGone("end of file inside a frame")
            return None, frames
        pending = True
        frames.feed(chunk)
    return frame, frames
