"""The wire protocol without I/O: framing, limits, validation of every message kind."""

from __future__ import annotations

import tracemalloc
from typing import TYPE_CHECKING

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolboxes import Attachment, FrameDecoder, ProtocolError, ToolResult, encode
from toolboxes._protocol import READ_SIZE

if TYPE_CHECKING:
    from collections.abc import Callable


def test_round_trip_in_arbitrary_chunks() -> None:
    messages = [
        {"t": "hello", "protocol": 1, "tools": []},
        {"t": "result", "id": 7, "result": {"status": "passed"}},
        {"t": "event", "event": {"kind": "x"}},
    ]
    data = b"".join(encode(m) for m in messages)
    for size in (1, 2, 3, 7, len(data)):
        decoder = FrameDecoder("to_supervisor")
        out = []
        for i in range(0, len(data), size):
            out.extend(decoder.feed(data[i : i + size]))
        assert out == messages


@pytest.mark.parametrize("size", [7, 4096, READ_SIZE, 100_000])
def test_frames_larger_than_the_buffer_round_trip_in_arbitrary_chunks(size: int) -> None:
    """The decoder makes its buffer again once drained; a frame cut anywhere must survive that."""
    messages = [{"t": "result", "id": i, "result": {"data": "x" * (i * 9973 % 200_000)}} for i in range(40)]
    data = b"".join(encode(m) for m in messages)
    decoder = FrameDecoder("to_supervisor")
    out = []
    for i in range(0, len(data), size):
        out.extend(decoder.feed(data[i : i + size]))
    assert out == messages


@pytest.mark.parametrize("garbage", [b"\xc1", b"\x93\x01\x02\x03", b"\xa3abc", b"\x01"])
def test_garbage_is_a_protocol_error(garbage: bytes) -> None:
    with pytest.raises(ProtocolError):
        list(FrameDecoder("to_supervisor").feed(garbage))


def _held_by(make: Callable[[], object]) -> tuple[object, int]:
    """What ``make`` returns and the bytes Python's allocators hold for it afterwards (msgpack's buffer is one
    ``PyMem_Malloc`` block, so tracemalloc sees it)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        made = make()
        return made, tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_a_decoder_holds_a_small_buffer_and_gives_back_what_a_large_frame_needed() -> None:
    """issue 19: msgpack's default buffer is 1 MiB per decoder (one per worker connection, and its fill pointer
    sweeps all of it, so each came to hold 1 MiB resident), and one 8 MiB frame left a buffer of twice that."""
    small = [encode({"t": "result", "id": i, "result": {"status": "passed", "data": "x" * 300}}) for i in range(400)]
    big = encode({"t": "result", "id": 9999, "result": {"status": "passed", "data": "y" * (8 << 20)}})

    def fed(frames: list[bytes]) -> FrameDecoder:
        decoder = FrameDecoder("to_supervisor")
        for frame in frames:
            for i in range(0, len(frame), READ_SIZE):
                assert all(m["t"] == "result" for m in decoder.feed(frame[i : i + READ_SIZE]))
        return decoder

    _, held = _held_by(lambda: FrameDecoder("to_supervisor"))
    assert held < 2 * READ_SIZE, held
    _, held = _held_by(lambda: fed(small))
    assert held < 4 * READ_SIZE, held
    _, held = _held_by(lambda: fed([*small, big, *small]))  # the big frame's buffer went once it was decoded
    assert held < 4 * READ_SIZE, held


def test_oversized_frame_is_refused_before_it_is_buffered() -> None:
    decoder = FrameDecoder("to_supervisor", max_frame_bytes=1024)
    with pytest.raises(ProtocolError, match="larger than the protocol limit"):
        list(decoder.feed(encode({"t": "event", "event": {"x": "y" * 4096}})))


@pytest.mark.parametrize(
    ("direction", "message", "why"),
    [
        ("to_supervisor", {"t": "call", "id": 1, "tool": "x", "args": {}, "ctx": {}}, "unexpected message type"),
        ("to_worker", {"t": "hello", "protocol": 1, "tools": []}, "unexpected message type"),
        ("to_supervisor", {"t": "result", "id": 1}, "lacks result"),
        ("to_supervisor", {"t": "result", "id": "1", "result": {}}, "id must be an integer"),
        ("to_supervisor", {"t": "result", "id": True, "result": {}}, "id must be an integer"),
        ("to_worker", {"t": "call", "id": 1, "tool": "x"}, "lacks args, ctx"),
        ("to_supervisor", {"no": "type"}, "unexpected message type"),
    ],
)
def test_wrong_messages_for_the_direction(direction: str, message: dict, why: str) -> None:
    with pytest.raises(ProtocolError, match=why):
        list(FrameDecoder(direction).feed(encode(message)))


def test_non_map_frame() -> None:
    with pytest.raises(ProtocolError, match="not a map"):
        list(FrameDecoder("to_worker").feed(msgpack.packb([1, 2])))


def test_map_with_non_string_keys_is_refused() -> None:
    with pytest.raises(ProtocolError):
        list(FrameDecoder("to_worker").feed(msgpack.packb({1: "x"})))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=256))
def test_any_bytes_decode_or_raise_protocol_error(data: bytes) -> None:
    decoder = FrameDecoder("to_supervisor", max_frame_bytes=4096)
    try:
        for message in decoder.feed(data):
            assert isinstance(message, dict) and isinstance(message["t"], str)
    except ProtocolError:
        pass


def test_result_wire_round_trip_and_refusals() -> None:
    result = ToolResult.json({"a": 1}, summary="s", truncated=True, attachments=[Attachment("image/png", "x.png")])
    result.with_meta("state_effect", "read")
    assert ToolResult.from_wire(result.to_wire()) == result
    for bad, why in [
        ({"status": "ok"}, "status must be one of"),
        ({"status": "passed", "data": 3}, "data must be"),
        ({"status": "passed", "metadata": [["k"]]}, "metadata"),
        ({"status": "passed", "attachments": [{"path": "x"}]}, "attachments"),
        ({"status": "passed", "extra": 1}, "unknown keys"),
        ([], "must be a map"),
    ]:
        with pytest.raises(ValueError, match=why):
            ToolResult.from_wire(bad)


def test_first_metadata_value_wins() -> None:
    result = ToolResult.passed("x").with_meta("resource_id", "a").with_meta("resource_id", "b")
    assert result.meta("resource_id") == "a"
    assert result.meta("missing") is None
