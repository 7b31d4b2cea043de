"""The output limit's cut, pure: what is cut, what is said, what is left alone."""

from __future__ import annotations

from toolboxes import TRUNCATED_KEY, ToolResult, cap_output
from toolboxes._output_cap import ENVELOPE_BYTES, json_bytes


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
