"""Trace lines are strict JSON, one complete bounded record per line, whatever the fields hold (hypothesis).

Fields come from workers (events, tool lists) and agents (arguments): NaN and infinities, lone surrogates, deep
nesting, huge strings, objects with odd ``repr``. Every record written is read back by the trace report, and each line
parses with a parser that refuses what JSON cannot spell.
"""

from __future__ import annotations

import json
import math
import os
from typing import TYPE_CHECKING, Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supervisor.traces._recorder import MAX_RECORD_CHARS, TraceRecorder
from supervisor.traces._report import load_trace

if TYPE_CHECKING:
    from pathlib import Path


def _examples(default: int) -> int:
    """Hypothesis examples: ``default`` in the normal suite, more with ``AGENTS_SUPERVISE_FUZZ_EXAMPLES`` (the long
    mode of ``scripts/chaos fuzz``)."""
    return int(os.environ.get("AGENTS_SUPERVISE_FUZZ_EXAMPLES") or default)


def _refuse(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def strict_loads(line: str) -> Any:
    return json.loads(line, parse_constant=_refuse)


class _Odd:
    def __repr__(self) -> str:
        raise RuntimeError("repr fails")


def _deep(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"a": [value]}
    return value


LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=20),
    st.sampled_from(["\ud800", "a\udfffb", "\x00", "\u2028", math.nan, -math.inf, b"\xff", (1, 2)]),
)
VALUES = st.recursive(
    LEAVES,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=5), inner, max_size=4)),
    max_leaves=20,
)


@settings(
    max_examples=_examples(80),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    records=st.lists(
        st.dictionaries(st.text(min_size=1, max_size=8).filter(lambda k: k not in ("ts", "event")), VALUES, max_size=5),
        min_size=1,
        max_size=5,
    )
)
def test_any_fields_make_strict_lines_the_report_reads(tmp_path: Path, records: list[dict[str, Any]]) -> None:
    path = tmp_path / "trace.jsonl"
    path.unlink(missing_ok=True)
    trace = TraceRecorder(str(path))
    for fields in records:
        trace.record("worker_event", **fields)
    trace.close()
    lines = path.read_bytes().decode("utf-8").split("\n")  # valid UTF-8, or this raises
    assert lines[-1] == "" and len(lines) - 1 == len(records)
    for line in lines[:-1]:
        assert isinstance(strict_loads(line), dict)
    assert [r["event"] for r in load_trace(str(path))] == ["worker_event"] * len(records)


def test_hostile_extremes_stay_strict_and_bounded(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    trace = TraceRecorder(str(path))
    trace.record("worker_event", deep=_deep(5000), odd=_Odd(), nan=math.nan)
    trace.record("worker_event", huge="x" * (10 << 20), many=["y" * 1000] * 5000)
    trace.record("call_end", ok=True)
    trace.close()
    lines = path.read_text().splitlines()
    assert len(lines) == 3
    first, second, third = (strict_loads(line) for line in lines)
    assert first["nan"] == "NaN" and first["odd"] == "<_Odd>"
    assert "nested too deeply" in json.dumps(first["deep"])
    assert second["trace_truncated"] is True and all(len(line) <= MAX_RECORD_CHARS + 1000 for line in lines)
    assert third["ok"] is True
