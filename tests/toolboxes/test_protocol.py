"""The wire protocol without I/O: framing, limits, validation of every message kind."""

from __future__ import annotations

import math
import tracemalloc
from typing import TYPE_CHECKING

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolboxes import Attachment, FrameDecoder, ProtocolError, ToolResult, encode, json_problem
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
        ("to_supervisor", {"t": "result", "id": None, "result": {}}, "id must be an integer"),
        ("to_supervisor", {"t": "event", "event": {}, "id": 1.5}, "id must be an integer"),
        ("to_supervisor", {"t": 7, "id": 1}, "unexpected message type 7"),
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


class _Text(str):
    pass


class _Number(float):
    pass


class _Count(int):
    pass


class _Over(Exception):
    pass


def _json_reference(value: object, max_depth: int, max_nodes: int, finite: bool) -> int | None:
    """What ``json_problem`` promises, said plainly (recursion): the number of values when ``value`` is plain JSON
    within the bounds, else ``None``."""
    nodes = 0

    def walk(v: object, depth: int) -> None:
        nonlocal nodes
        nodes += 1
        if nodes > max_nodes or depth > max_depth:
            raise _Over
        if isinstance(v, dict):
            if not all(isinstance(k, str) for k in v):
                raise _Over
            for x in v.values():
                walk(x, depth + 1)
        elif isinstance(v, list | tuple):
            for x in v:
                walk(x, depth + 1)
        elif isinstance(v, float):
            if finite and not math.isfinite(v):
                raise _Over
        elif not (v is None or isinstance(v, str | int)):
            raise _Over

    try:
        walk(value, 1)
    except _Over:
        return None
    return nodes


_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=3)
    | st.binary(max_size=2)
    | st.builds(_Text, st.text(max_size=2))
    | st.builds(_Number, st.floats(allow_nan=True))
    | st.builds(_Count, st.integers())
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=2) | st.builds(_Text, st.text(max_size=1)), inner, max_size=4)
        | st.dictionaries(st.integers() | st.text(max_size=1), inner, min_size=1, max_size=2)
    ),
    max_leaves=24,
)


@settings(max_examples=800, deadline=None)
@given(_VALUES, st.integers(1, 6), st.integers(1, 30), st.booleans())
def test_json_problem_answers_as_its_plain_statement(value: object, depth: int, nodes: int, finite: bool) -> None:
    """The fast checker (exact types first, plain scalars counted in place) refuses exactly what the plain recursive
    statement of its contract refuses, and counts the same values when it accepts."""
    problem, counted = json_problem(value, max_depth=depth, max_nodes=nodes, finite=finite)
    expected = _json_reference(value, depth, nodes, finite)
    assert (problem is None) == (expected is not None), (problem, expected)
    if expected is not None:
        assert counted == expected


def test_a_results_text_fields_are_checked_by_name_and_subclasses_pass() -> None:
    """The result's fast path (exact types looked up, not asked) names each wrong field and still takes what is a
    string by subclass; absent, empty and ``None`` lists are empty."""
    for key in ("summary", "data", "data_path"):
        with pytest.raises(ValueError, match=f"result {key} must be a string"):
            ToolResult.from_wire({"status": "passed", key: b"x"})
    taken = ToolResult.from_wire(
        {"status": "failed", "summary": _Text("s"), "data": "d", "metadata": None, "attachments": [], "links": None}
    )
    paired = ToolResult.from_wire({"status": "passed", "metadata": [("k", _Text("v")), ["a", "b"]]})
    assert paired.metadata == [("k", "v"), ("a", "b")]
    assert (taken.status, taken.summary, taken.data, taken.metadata, taken.attachments, taken.links) == (
        "failed",
        "s",
        "d",
        [],
        [],
        [],
    )
    for bad, why in [
        ({"status": "passed", "metadata": (("a", "b"),)}, "metadata must be a list"),
        ({"status": "passed", "metadata": [["a", 1]]}, r"\[string, string\] pairs"),
        ({"status": "passed", "metadata": [["a", "b", "c"]]}, r"\[string, string\] pairs"),
        ({"status": "passed", "metadata": ["ab"]}, r"\[string, string\] pairs"),
        ({"status": "passed", "metadata": [["a", "b" * 70_000]]}, "more than 65536 characters"),
        ({"status": "passed", "links": {"uri": "x"}}, "links must be a list"),
        ({"status": "passed", "structured": {"a": b"x"}}, "structured value holds a bytes"),
        ({"status": "passed", "structured": {1: "x"}}, "map key that is a int"),
    ]:
        with pytest.raises(ValueError, match=why):
            ToolResult.from_wire(bad)
