"""Writing whole frames to a pipe from several trio tasks, without a scheduler round trip when the pipe has room.

``trio.lowlevel.FdStream.send_all`` always yields to the scheduler (it checkpoints before and after the write); on
the call path that is two task switches per frame. :func:`send_whole` writes at once when no other task is in the
middle of a frame and the pipe takes the frame whole (the common case: frames are small and the peer reads
promptly), and otherwise falls back to ``send_all`` under the lock, so frames never interleave.
"""

from __future__ import annotations

import os

import trio

__all__ = ["send_whole"]


async def send_whole(stream: trio.abc.SendStream, lock: trio.Lock, data: bytes) -> None:
    """Write ``data`` to ``stream`` as one unit with respect to other callers sharing ``lock``.

    Not a checkpoint when the fast path succeeds (only for streams with a ``fileno``, such as
    ``trio.lowlevel.FdStream``; other streams always take the locked path). Raises ``trio.BrokenResourceError``
    when the reader is gone and ``trio.ClosedResourceError`` when the stream was closed.
    """
    fileno = getattr(stream, "fileno", None)
    if fileno is not None and not lock.locked():
        try:
            written = os.write(fileno(), data)
        except BlockingIOError:
            written = 0
        except BrokenPipeError as exc:
            raise trio.BrokenResourceError("the reader closed its end of the pipe") from exc
        except (OSError, ValueError) as exc:
            raise trio.ClosedResourceError("the pipe is closed") from exc
        if written == len(data):
            return
        data = data[written:]
    async with lock:  # a partial frame is finished before anyone else may write
        await stream.send_all(data)
