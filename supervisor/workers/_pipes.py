"""Writing whole frames to a pipe from several trio tasks, without a scheduler round trip when the pipe has room;
reading one, without a round trip when data is already waiting.

``trio.lowlevel.FdStream.send_all`` always yields to the scheduler (it checkpoints before and after the write); on
the call path that is two task switches per frame. :func:`send_whole` writes at once when no other task is in the
middle of a frame and the pipe takes the frame whole (the common case: frames are small and the peer reads
promptly), and otherwise falls back to a locked write, so frames never interleave.

:class:`FrameWriter` does the same for one stream and also knows when a write was cancelled after part of a frame
went out (:attr:`FrameWriter.torn`): the stream is then unusable (the peer would read half a frame followed by the
next one), so every later send raises ``trio.BrokenResourceError`` and the owner is expected to end the peer.

:class:`ChunkReader` reads for one task: ``trio.lowlevel.FdStream.receive_some`` checkpoints before every read,
even when it then parks until the pipe is readable; the reader yields only once per chunk: by parking when
nothing waits, else right after the read, so a peer writing without pause still cannot keep the loop to itself.
After a read that emptied a pipe or socket (it returned less than asked) the next one parks first instead of
asking the kernel for data that is not there: one ``read`` a chunk, not two.
"""

from __future__ import annotations

import os
import select
import stat

import trio

__all__ = ["ChunkReader", "FrameWriter", "send_whole"]


def _write_now(fileno: int, data: bytes | memoryview) -> int:
    """Write what the pipe takes at once; raise trio's errors for a gone reader or a closed fd."""
    try:
        return os.write(fileno, data)
    except BlockingIOError:
        return 0
    except BrokenPipeError as exc:
        raise trio.BrokenResourceError("the reader closed its end of the pipe") from exc
    except (OSError, ValueError) as exc:
        raise trio.ClosedResourceError("the pipe is closed") from exc


async def send_whole(stream: trio.abc.SendStream, lock: trio.Lock, data: bytes) -> None:
    """Write ``data`` to ``stream`` as one unit with respect to other callers sharing ``lock``.

    Not a checkpoint when the fast path succeeds (only for streams with a ``fileno``, such as
    ``trio.lowlevel.FdStream``; other streams always take the locked path). Raises ``trio.BrokenResourceError``
    when the reader is gone and ``trio.ClosedResourceError`` when the stream was closed.
    """
    fileno = getattr(stream, "fileno", None)
    if fileno is not None and not lock.locked():
        written = _write_now(fileno(), data)
        if written == len(data):
            return
        data = data[written:]
    async with lock:  # a partial frame is finished before anyone else may write
        await stream.send_all(data)


def _is_pipe(fileno: int) -> bool:
    try:
        return stat.S_ISFIFO(os.fstat(fileno).st_mode)
    except (OSError, ValueError):
        return False


def _is_pipe_or_socket(fileno: int) -> bool:
    try:
        mode = os.fstat(fileno).st_mode
    except (OSError, ValueError):
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


class FrameWriter:
    """Whole frames onto one stream from many tasks; a cancelled half-written frame marks the stream :attr:`torn`.

    Cancelling :meth:`send` is always safe for the caller: either nothing of the frame was written (waiting for the
    lock or for room), or the stream is torn and every later send fails.
    """

    def __init__(self, stream: trio.abc.SendStream) -> None:
        self.stream = stream
        self.torn = False
        self._lock = trio.Lock()
        #: the stream's fd, asked each time (a closed ``FdStream`` answers -1, never a reused number)
        self._fileno_of = getattr(stream, "fileno", None)
        #: a pipe: a write of at most ``PIPE_BUF`` bytes to it goes whole or not at all (POSIX), even non-blocking
        self._pipe = self._fileno_of is not None and _is_pipe(self._fileno_of())

    def send_now(self, data: bytes) -> bool:
        """Write ``data`` whole at once, without a checkpoint, when that can be done atomically: the stream is a
        pipe, ``data`` is at most ``PIPE_BUF`` bytes, no other frame is being written and the pipe has room.
        Whether it went; ``False`` means nothing of it was written (use :meth:`send`). Raises as :meth:`send`."""
        if self.torn:
            raise trio.BrokenResourceError("an earlier frame was cut off half way")
        if not self._pipe or len(data) > select.PIPE_BUF or self._lock.locked():
            return False
        assert self._fileno_of is not None
        written = _write_now(self._fileno_of(), data)
        if 0 < written < len(data):  # never for a pipe (the write is atomic); if ever, the stream is unusable
            self.torn = True
            raise trio.BrokenResourceError("a frame was cut off half way")
        return written == len(data)

    async def send(self, data: bytes) -> None:
        """Write ``data`` whole. Raises ``trio.BrokenResourceError`` (reader gone, or the stream torn by an earlier
        cancelled write) or ``trio.ClosedResourceError``; ``trio.Cancelled`` leaves :attr:`torn` set when part of
        the frame had been written."""
        if self.torn:
            raise trio.BrokenResourceError("an earlier frame was cut off half way")
        if self._fileno_of is not None and not self._lock.locked():
            written = _write_now(self._fileno_of(), data)
            if written == len(data):
                return
            if written:
                # Part of the frame is out: nobody else may write until it is finished.
                try:
                    async with self._lock:  # free: we checked, and nothing yielded since
                        await self._finish(data, written)
                except trio.Cancelled:
                    self.torn = True
                    raise
                return
        async with self._lock:
            if self.torn:
                raise trio.BrokenResourceError("an earlier frame was cut off half way")
            await self._finish(data, 0)

    async def _finish(self, data: bytes, written: int) -> None:
        if self._fileno_of is None:
            try:
                await self.stream.send_all(data[written:])
            except trio.Cancelled:
                self.torn = True  # a generic stream does not say how much it took: assume part of it
                raise
            return
        view = memoryview(data)[written:]
        try:
            while view:
                fileno = self._fileno_of()
                if fileno < 0:
                    raise trio.ClosedResourceError("the pipe is closed")
                await trio.lowlevel.wait_writable(fileno)
                view = view[_write_now(self._fileno_of(), view) :]
        except trio.Cancelled:
            if len(view) < len(data):
                self.torn = True
            raise


class ChunkReader:
    """Chunks of at most ``size`` bytes from ``stream``, for one task; ``b""`` once the stream ended, broke or was
    closed. A stream without a ``fileno`` is read with its own ``receive_some``."""

    def __init__(self, stream: trio.abc.ReceiveStream, size: int) -> None:
        self.stream = stream
        self.size = size
        #: the stream's fd, asked each time (a closed ``FdStream`` answers -1, never a reused number)
        self._fileno_of = getattr(stream, "fileno", None)
        #: a pipe or socket: a read shorter than asked emptied it (a regular file, which epoll cannot wait on, is
        #: never waited for)
        self._waitable = self._fileno_of is not None and _is_pipe_or_socket(self._fileno_of())
        #: the last read emptied the stream: the next waits for it to be readable instead of reading nothing
        self._drained = False

    async def receive(self) -> bytes:
        """The next chunk. A checkpoint: cancellation is looked at first, and it yields at least once, parking until
        the stream is readable or, when data was waiting, right after reading it (shielded: a chunk read is never
        lost to a cancel)."""
        if self._fileno_of is None:
            try:
                return bytes(await self.stream.receive_some(self.size))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return b""
        await trio.lowlevel.checkpoint_if_cancelled()
        parked = False
        if self._drained:  # one read system call a chunk, not two (the second would find nothing)
            self._drained = False
            fileno = self._fileno_of()
            if fileno < 0:
                return b""
            try:
                await trio.lowlevel.wait_readable(fileno)
            except trio.ClosedResourceError:
                return b""
            parked = True
        while True:
            fileno = self._fileno_of()
            if fileno < 0:
                return b""
            try:
                data = os.read(fileno, self.size)
                self._drained = self._waitable and 0 < len(data) < self.size
            except BlockingIOError:
                try:
                    await trio.lowlevel.wait_readable(fileno)
                except trio.ClosedResourceError:
                    return b""
                parked = True
                continue
            except OSError:  # EBADF, EIO: as broken
                return b""
            if not parked:
                await trio.lowlevel.cancel_shielded_checkpoint()
            return data
