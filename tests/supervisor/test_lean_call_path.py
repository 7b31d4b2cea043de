"""The lean call path keeps its promises: a finished call's trace records are in the file when its result is back
(no flush interval to lose to a crash), the arguments encoded once reach the trace and the session store intact,
and the validator's answer for ``{}`` (found once) is the one a full check gives. Real confined workers."""

from __future__ import annotations

import json
import sqlite3
from typing import TYPE_CHECKING

import pytest

from supervisor._supervisor import Supervisor
from supervisor.tools._validation import ArgumentValidator
from supervisor.traces import TraceRecorder
from tests._policies import agent, system_toolbox, write_policy

if TYPE_CHECKING:
    from pathlib import Path


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.root
async def test_a_finished_calls_records_are_written_before_its_result_is_back(sandbox_tmp: Path) -> None:
    policy = write_policy(sandbox_tmp, {"tester": agent(builtinToolboxes=[system_toolbox(capabilities=["date"])])})
    trace = sandbox_tmp / "state" / "trace.jsonl"
    async with Supervisor.open(policy) as sup:
        args = {"capability": "date"}
        result = await sup.call("system_system_date", args)
        # No await since the result came back: the flusher cannot have run; what is in the file was written by
        # the call itself, and is what a SIGKILL right now would leave.
        seen = [r for r in _records(trace) if r["event"] in ("call_start", "call_end")]
        unicode = {"capability": "date", "note": 'zürich ✓ "quoted"'}
        refused = await sup.call("system_system_date", unicode)  # not in the schema: refused before dispatch
        assert refused.status == "error"
    assert result.status == "passed", result.data
    assert [r["event"] for r in seen] == ["call_start", "call_end"]
    assert seen[0]["args"] == args and seen[1]["status"] == "passed" and seen[0]["call_id"] == seen[1]["call_id"]
    db = sqlite3.connect(sandbox_tmp / "state" / "sessions.sqlite3")
    try:
        [(stored,)] = db.execute("SELECT args FROM tool_calls").fetchall()
    finally:
        db.close()
    assert json.loads(stored) == args


def test_raw_fields_are_spliced_into_a_strict_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    trace = TraceRecorder(str(path))
    text = json.dumps({"path": "/tmp/ü", "n": [1, 2.5, None]}, ensure_ascii=False, separators=(",", ":"))
    trace.record_raw("call_start", {"args": text}, call_id="c1", tool="t")
    trace.record("call_end", call_id="c1", status="passed")  # written at once, with the buffered start
    trace.record_raw("call_start", {"args": "{}", 'other "key"': "[1]"}, call_id="c2")  # a key's prefix is kept
    trace.record("call_end", call_id="c2", status="passed")
    [start, end, again, _] = _records(path)
    trace.close()
    assert start["args"] == {"path": "/tmp/ü", "n": [1, 2.5, None]} and start["call_id"] == "c1"
    assert end["status"] == "passed"
    assert again["args"] == {} and again['other "key"'] == [1] and again["call_id"] == "c2"


def test_the_errors_of_empty_arguments_are_those_of_a_full_check() -> None:
    schema = {
        "type": "object",
        "properties": {"path": {"type": "string"}, "n": {"type": "integer"}},
        "required": ["path"],
        "additionalProperties": False,
    }
    fresh = ArgumentValidator(schema)
    cached = ArgumentValidator(schema)
    first = cached.errors({})
    first.clear()  # a caller changing the list it got changes nothing for the next caller
    assert cached.errors({}) == fresh._errors({}) != []
    assert ArgumentValidator({"type": "object", "properties": {"n": {"type": "integer"}}}).errors({}) == []
    assert cached.errors({"path": 3}) == fresh._errors({"path": 3}) != []


@pytest.mark.root
async def test_a_listing_is_made_once_per_registry_build(sandbox_tmp: Path) -> None:
    """``ServedTools.listing`` hands out the same tool objects until the registry is rebuilt (what lets a frontend
    encode a list once), and new ones, with what the rebuild says, after."""
    policy = write_policy(sandbox_tmp, {"tester": agent(builtinToolboxes=[system_toolbox(capabilities=["date"])])})
    async with Supervisor.open(policy) as sup:
        first, again = sup.list_tools(), sup.list_tools()
        assert [t.name for t in first] == ["system_system_date"]
        assert first is not again and all(a is b for a, b in zip(first, again, strict=True))
        [runner] = sup.generation.runners
        runner.failed_reason = "a crash loop, for the test"  # what a rebuild reads into the description
        sup.running.tools.rebuild(sup.generation)
        [after] = sup.list_tools()
        runner.failed_reason = None
        assert after is not first[0] and after.description.startswith("Not available now: a crash loop, for the test")
