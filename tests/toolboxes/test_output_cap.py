"""The output limit's cut, pure: what is cut, what is said, what is left alone."""

from __future__ import annotations

from dataclasses import replace

import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st

from toolboxes import TRUNCATED_KEY, FrameDecoder, ToolResult, cap_output, encode
from toolboxes._output_cap import ENVELOPE_BYTES, JSON_PER_MSGPACK_BYTE, json_bytes


def test_a_result_within_the_limit_and_its_envelope_is_returned_as_it_is() -> None:
    result = ToolResult.json({"a": "b" * 100}, summary="s")
    assert cap_output(result, 1000) is result
    assert cap_output(result, None) is result
    # what a kind bounded itself (rows within the limit, wrapped in a little more) is not cut again
    near = ToolResult.json({"rows": ["r" * 1000] * 20, "rowCount": 20})
    assert json_bytes(near.structured) > 20_000 and cap_output(near, 20_000) is near


def test_data_is_cut_at_a_character_boundary_with_the_note_inside_the_limit() -> None:
    result = ToolResult.passed("é" * 100_000, summary="short")  # 200 000 bytes of UTF-8
    capped = cap_output(result, 4096)
    assert capped is not result and result.data == "é" * 100_000  # the original is not changed
    assert capped.data is not None and len(capped.data.encode()) <= 4096
    assert capped.data.startswith("é" * 100)
    assert capped.data.endswith("[output cut at 4096 bytes by limits.output_bytes: data was 200000 bytes]")
    assert (capped.status, capped.summary, capped.truncated) == ("passed", "short", True)
    assert capped.meta(TRUNCATED_KEY) == "data was 200000 bytes (limit 4096 bytes, limits.output_bytes)"
    # one byte past the envelope is enough
    edge = cap_output(ToolResult.passed("x" * (4096 + ENVELOPE_BYTES + 1)), 4096)
    assert edge.truncated and edge.data is not None and len(edge.data) <= 4096


def test_a_structured_value_past_the_limit_is_dropped_and_said() -> None:
    value = {"rows": [{"n": i, "text": "x" * 50} for i in range(1000)]}
    result = ToolResult.json(value)
    size = json_bytes(value)
    capped = cap_output(result, 8192)
    assert capped.structured is None and capped.truncated
    assert capped.data is not None and len(capped.data.encode()) <= 8192
    assert f"the structured value was {size} bytes of JSON and was dropped" in capped.data
    assert capped.data.startswith('{"rows": [{"n": 0')  # the text form is kept, cut
    only = cap_output(ToolResult("passed", structured=value), 8192)
    assert only.data is not None and only.data.startswith("[output cut at 8192 bytes")


def test_summary_is_cut_and_a_limit_smaller_than_the_note_still_holds() -> None:
    big = 40 + ENVELOPE_BYTES + 1
    capped = cap_output(ToolResult.failed("d" * big, summary="s" * big), 40)
    assert capped.summary == "s" * 40 and capped.data == "d" * 40 and capped.status == "failed"
    assert f"summary was {big} bytes" in (capped.meta(TRUNCATED_KEY) or "")


_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(st.characters(max_codepoint=0x10FFFF, exclude_categories=("Cs",)), max_size=12)
    | st.text(st.characters(max_codepoint=0x1F), max_size=12),  # the control characters JSON escapes in six
    lambda inner: st.lists(inner, max_size=8) | st.dictionaries(st.text(max_size=4), inner, max_size=8),
    max_leaves=40,
)


@settings(max_examples=1500, deadline=None)
@given(_JSON_VALUES, st.booleans())
def test_a_value_is_less_json_than_six_times_its_msgpack(value: object, single_floats: bool) -> None:
    """The bound the cap's shortcut stands on (JSON_PER_MSGPACK_BYTE): whatever a frame of n bytes decodes to is
    less than 6n bytes of compact JSON, also a float a worker sent in 4 bytes."""
    try:
        frame = msgpack.packb(value, use_bin_type=True, use_single_float=single_floats)
    except OverflowError:  # a double past what 4 bytes hold: not a frame anyone can send
        frame = msgpack.packb(value, use_bin_type=True)
    decoded = msgpack.unpackb(frame, raw=False)
    assert json_bytes(decoded) < JSON_PER_MSGPACK_BYTE * len(frame)


def test_a_result_from_a_small_frame_is_not_measured_again_unless_a_part_changed() -> None:
    """A result read from a frame a sixth of the allowance is returned as it is, without encoding its parts; one
    whose data or structured value was replaced since (another object) is measured and cut as any other."""
    wire = {"status": "passed", "data": "d" * 100, "structured": {"k": "v" * 100}}
    frame = msgpack.packb(wire)
    small = ToolResult.from_wire(wire, len(frame))
    assert small.parts_within is not None and small.parts_within[3] == JSON_PER_MSGPACK_BYTE * len(frame)
    assert cap_output(small, 4096) is small
    small.data = "x" * (4096 + ENVELOPE_BYTES + 1)  # changed in place after it was read: no shortcut
    assert cap_output(small, 4096).truncated
    grown = ToolResult.from_wire(wire, len(frame))
    grown.structured = {"k": "v" * (4096 + ENVELOPE_BYTES)}
    assert cap_output(grown, 4096).structured is None
    # a frame too large for the bound takes the measuring way (and a result within the limit is still kept)
    large = ToolResult.from_wire(wire, 4096)
    assert cap_output(large, 4096) is large
    # dataclasses.replace makes a result that was not read from any frame
    assert replace(small, data="y").parts_within is None


def test_the_decoder_says_each_frames_size() -> None:
    frames = [encode({"t": "result", "id": i, "result": {"status": "passed", "data": "z" * i}}) for i in (1, 300, 70)]
    decoder = FrameDecoder("to_supervisor")
    sizes = []
    for message in decoder.feed(b"".join(frames)):
        sizes.append((message["id"], decoder.last_frame_bytes))
    assert sizes == [(1, len(frames[0])), (300, len(frames[1])), (70, len(frames[2]))]


@settings(max_examples=800, deadline=None)
@given(_JSON_VALUES, st.none() | st.text(max_size=30))
def test_a_json_results_parts_are_within_its_bound(value: object, summary: str | None) -> None:
    """ToolResult.json's bound on its parts holds (the compact JSON of its value is no larger than its text), and
    the cap answers with the bound what it answers by measuring."""
    result = ToolResult.json(value, summary=summary)
    assert result.parts_within is not None
    bound = result.parts_within[3]
    assert json_bytes(value) <= bound and len((result.data or "").encode()) <= bound
    assert len((summary or "").encode()) <= bound
    for limit in (1, 64, bound - ENVELOPE_BYTES, bound):
        measured = replace(result)  # the same parts, no bound: measured
        assert measured.parts_within is None
        assert cap_output(result, max(1, limit)) == cap_output(measured, max(1, limit))
