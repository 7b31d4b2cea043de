"""The pipe helpers of the worker connection (``supervisor/workers/_pipes.py``) over real pipes: a small frame is
written whole at once or not at all, and the chunk reader yields at least once per chunk (a peer that writes
without pause cannot keep the loop to itself) while reading what is waiting without a round trip."""

from __future__ import annotations

import os
import select
from typing import TYPE_CHECKING

import trio
import trio.testing

from supervisor.workers._pipes import ChunkReader, FrameWriter

if TYPE_CHECKING:
    from pathlib import Path

    import pytest


def _pipe() -> tuple[trio.lowlevel.FdStream, trio.lowlevel.FdStream]:
    read_end, write_end = os.pipe()
    return trio.lowlevel.FdStream(read_end), trio.lowlevel.FdStream(write_end)


async def test_a_small_frame_goes_whole_at_once_or_not_at_all() -> None:
    receive, send = _pipe()
    async with receive, send:
        writer = FrameWriter(send)
        with trio.testing.assert_no_checkpoints():
            assert writer.send_now(b"x" * 100)
        assert await receive.receive_some(1000) == b"x" * 100
        assert not writer.send_now(b"y" * (select.PIPE_BUF + 1))  # larger: not atomic, left to send()
        while writer.send_now(b"z" * select.PIPE_BUF):  # fill the pipe
            pass
        assert not writer.torn  # a full pipe took nothing of the last frame
        drained = b""
        while True:
            try:
                drained += os.read(receive.fileno(), 1 << 20)
            except BlockingIOError:
                break
        assert set(drained) == {ord("z")} and len(drained) % select.PIPE_BUF == 0  # whole frames only


async def test_a_writer_that_is_not_a_pipe_never_writes_at_once() -> None:
    send, _receive = trio.testing.memory_stream_one_way_pair()
    assert not FrameWriter(send).send_now(b"x")


async def test_the_reader_yields_once_per_chunk_and_reads_what_waits() -> None:
    receive, send = _pipe()
    async with receive, send:
        reader = ChunkReader(receive, 1 << 16)

        async def later() -> None:
            await trio.testing.wait_all_tasks_blocked()
            os.write(send.fileno(), b"first")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(later)
            with trio.testing.assert_checkpoints():  # nothing waiting: it parks
                assert await reader.receive() == b"first"
        for i in range(3):  # a peer that never pauses: data waits each time, and each chunk still yields
            os.write(send.fileno(), b"more%d" % i)
            with trio.testing.assert_checkpoints():
                assert await reader.receive() == b"more%d" % i
        await send.aclose()
        assert await reader.receive() == b""  # end of the stream


async def test_the_reader_of_a_closed_stream_ends() -> None:
    receive, send = _pipe()
    async with send:
        reader = ChunkReader(receive, 1 << 16)
        await receive.aclose()
        assert await reader.receive() == b""


async def test_the_reader_waiting_on_a_stream_closed_meanwhile_ends() -> None:
    receive, send = _pipe()
    async with send:
        reader = ChunkReader(receive, 1 << 16)
        got: list[bytes] = []

        async def read() -> None:
            got.append(await reader.receive())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            await trio.testing.wait_all_tasks_blocked()
            await receive.aclose()
        assert got == [b""]


async def test_a_cancelled_read_takes_nothing() -> None:
    receive, send = _pipe()
    async with receive, send:
        reader = ChunkReader(receive, 1 << 16)
        os.write(send.fileno(), b"kept")
        with trio.CancelScope() as scope:
            scope.cancel()
            await reader.receive()
        assert scope.cancelled_caught
        assert await reader.receive() == b"kept"  # still there for the next read


async def test_after_a_read_that_emptied_the_pipe_the_next_waits_without_reading_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """One ``read`` a chunk, not two: a read shorter than asked emptied the pipe, so the next receive parks until the
    pipe is readable instead of asking the kernel first (and getting EAGAIN); what comes after still arrives, and a
    regular file (which epoll cannot wait on) is read as before."""
    from supervisor.workers import _pipes

    reads: list[int] = []
    real_read = os.read

    def counted(fd: int, n: int) -> bytes:
        reads.append(fd)
        return real_read(fd, n)

    monkeypatch.setattr(_pipes.os, "read", counted)
    receive, send = _pipe()
    async with receive, send:
        reader = ChunkReader(receive, 1 << 16)
        for i in range(3):  # a call's answer comes after the reader went back to waiting, as on the call path

            async def answer(i: int = i) -> None:
                await trio.testing.wait_all_tasks_blocked()
                os.write(send.fileno(), b"answer%d" % i)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(answer)
                assert await reader.receive() == b"answer%d" % i
        assert len(reads) == 4  # the first receive read and found nothing; then one read per answer
        os.write(send.fileno(), b"x" * 10)
        await send.aclose()
        assert await reader.receive() == b"x" * 10  # drained, and data waiting already: no read lost
        assert await reader.receive() == b""  # the end
    path = tmp_path / "file"
    path.write_bytes(b"abc")
    fd = os.open(path, os.O_RDONLY)
    async with trio.lowlevel.FdStream(fd) as stream:
        reader = ChunkReader(stream, 2)
        assert [await reader.receive() for _ in range(3)] == [b"ab", b"c", b""]
