"""The pipe helpers of the worker connection (``supervisor/workers/_pipes.py``) over real pipes: a small frame is
written whole at once or not at all, and the chunk reader yields at least once per chunk (a peer that writes
without pause cannot keep the loop to itself) while reading what is waiting without a round trip."""

from __future__ import annotations

import os
import select

import trio
import trio.testing

from supervisor.workers._pipes import ChunkReader, FrameWriter


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
