"""The frames between the WASM toolbox and its executor processes (:mod:`._executor`): a 4-byte big-endian length,
then that many bytes of msgpack (a map). Both ends are this toolbox's own code in one worker; the bound on a frame
only keeps a broken peer from making the other allocate without end.

:func:`write_frame` writes a whole frame; :class:`FrameReader` collects one from a non-blocking read side, with a
deadline and a cancel flag, so a worker thread waiting for an executor can give up on it at the time limit.
"""

from __future__ import annotations

import os
import select
import struct
import time
from typing import TYPE_CHECKING, Any

import msgpack

if TYPE_CHECKING:
    import threading

__all__ = ["MAX_FRAME_BYTES", "FrameReader", "PeerGone", "WaitEnded", "read_frame_blocking", "write_frame"]

#: The largest frame either end reads (a component's data may be as large as its memory: up to 4 GiB of
#: MaxMemoryMB, but the worker cuts results at limits.output_bytes anyway; a larger reply is a broken executor).
MAX_FRAME_BYTES = 1 << 30
#: How often a waiting reader looks at its cancel flag.
_POLL_S = 0.05


class PeerGone(Exception):
    """The other end closed its pipe (or died) before a whole frame came."""


class WaitEnded(Exception):
    """:meth:`FrameReader.read` stopped waiting: ``reason`` is ``"deadline"`` or ``"cancelled"``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def write_frame(fd: int, message: dict[str, Any]) -> None:
    """Write ``message`` as one frame on the blocking fd ``fd``. Raises ``OSError`` (``BrokenPipeError``: the
    reader is gone)."""
    body = msgpack.packb(message, use_bin_type=True)
    view = memoryview(struct.pack(">I", len(body)) + body)
    while view:
        view = view[os.write(fd, view) :]


def _decode(body: bytes) -> dict[str, Any]:
    message = msgpack.unpackb(body, raw=False, strict_map_key=True)
    if not isinstance(message, dict):
        raise PeerGone("a frame that is not a map")
    return message


class FrameReader:
    """Reads frames from ``fd`` (set non-blocking here)."""

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self._fd = fd
        self._buffer = bytearray()

    def read(self, deadline: float | None = None, cancelled: threading.Event | None = None) -> dict[str, Any]:
        """The next frame. Raises :class:`WaitEnded` at ``deadline`` (a ``time.monotonic()`` value) or once
        ``cancelled`` is set, :class:`PeerGone` at end of file or on a malformed frame."""
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        while True:
            if len(self._buffer) >= 4:
                size = struct.unpack(">I", self._buffer[:4])[0]
                if size > MAX_FRAME_BYTES:
                    raise PeerGone(f"a frame of {size} bytes, more than {MAX_FRAME_BYTES}")
                if len(self._buffer) >= 4 + size:
                    body = bytes(self._buffer[4 : 4 + size])
                    del self._buffer[: 4 + size]
                    try:
                        return _decode(body)
                    except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
                        raise PeerGone(f"an undecodable frame: {exc}") from exc
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
            self._buffer += chunk


def read_frame_blocking(fd: int) -> dict[str, Any] | None:
    """The next frame from the blocking fd ``fd`` (the executor's stdin), or ``None`` at end of file. Raises
    :class:`PeerGone` for a truncated or malformed frame."""
    head = _read_exactly(fd, 4)
    if head is None:
        return None
    size = struct.unpack(">I", head)[0]
    if size > MAX_FRAME_BYTES:
        raise PeerGone(f"a frame of {size} bytes, more than {MAX_FRAME_BYTES}")
    body = _read_exactly(fd, size) if size else b""
    if body is None:
        raise PeerGone("end of file inside a frame")
    try:
        return _decode(body)
    except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise PeerGone(f"an undecodable frame: {exc}") from exc


def _read_exactly(fd: int, size: int) -> bytes | None:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = os.read(fd, min(size - len(chunks), 1 << 20))
        if not chunk:
            if not chunks and size == 4:
                return None  # a clean end between frames
            raise PeerGone("end of file inside a frame")
        chunks += chunk
    return bytes(chunks)
