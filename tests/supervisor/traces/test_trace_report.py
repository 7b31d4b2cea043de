"""The trace report: redundant-read rules on synthetic records, then a real trace written by a supervisor with
confined workers, read back through ``agents-supervise trace``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from supervisor._supervisor import Supervisor
from supervisor.traces._report import load_trace, redundant_reads, render_text, report, resource_of
from tests._policies import agent, system_toolbox, write_policy

REPO = str(Path(__file__).resolve().parents[3])


def _call(
    i: int, tool: str, effect: str | None = None, resource: str | None = None, args: dict[str, Any] | None = None
) -> dict[str, Any]:
    meta = [[k, v] for k, v in (("state_effect", effect), ("resource_id", resource)) if v is not None]
    return {"id": f"c{i}", "tool": tool, "args": args or {}, "metadata": meta, "status": "passed"}


def test_resource_is_the_declared_id_else_a_path_in_the_input() -> None:
    assert resource_of({"path": "/a"}, [["resource_id", "sym:Foo"]]) == "sym:Foo"
    assert resource_of({"filepath": "/a"}, [["resource_id", ""]]) == "path:/a"
    assert resource_of({"query": "x"}, []) is None


def test_a_second_read_without_a_mutation_between_is_redundant() -> None:
    calls = [_call(1, "read", "read", "f:a"), _call(2, "read", "read", "f:b"), _call(3, "read", "read", "f:a")]
    assert redundant_reads(calls) == [{"call_id": "c3", "tool": "read", "resource": "f:a", "first_read": "c1"}]


def test_a_mutation_of_the_resource_invalidates_earlier_reads() -> None:
    calls = [
        _call(1, "read", "read", "f:a"),
        _call(2, "write", "mutate", "f:a"),
        _call(3, "read", "read", "f:a"),
        _call(4, "write", "mutate", "f:b"),
        _call(5, "read", "read", "f:a"),
    ]
    assert [r["call_id"] for r in redundant_reads(calls)] == ["c5"]


def test_unknown_effects_are_treated_like_mutations_and_undeclared_calls_invalidate_everything() -> None:
    unknown_same = [_call(1, "r", "read", "f:a"), _call(2, "x", "frobnicate", "f:a"), _call(3, "r", "read", "f:a")]
    assert redundant_reads(unknown_same) == []
    undeclared = [_call(1, "r", "read", "f:a"), _call(2, "bash_tool"), _call(3, "r", "read", "f:a")]
    assert redundant_reads(undeclared) == []
    # a read that declares no resource falls back to the path in its input
    by_path = [_call(1, "r", "read", args={"path": "/x"}), _call(2, "r", "read", args={"path": "/x"})]
    assert [r["resource"] for r in redundant_reads(by_path)] == ["path:/x"]
    # a call that never declared 'read' is never credited as redundant
    never = [_call(1, "r", None, "f:a"), _call(2, "r", None, "f:a")]
    assert redundant_reads(never) == []


def test_call_ids_are_kept_apart_per_supervisor_run() -> None:
    records = []
    for _ in range(2):
        records += [
            {"event": "supervisor_start"},
            {"event": "call_start", "call_id": "c1", "parent_call_id": None, "tool": "t"},
            {"event": "call_start", "call_id": "c2", "parent_call_id": "c1", "tool": "u"},
            {"event": "call_end", "call_id": "c2", "tool": "u", "status": "passed", "duration_s": 0.5},
            {"event": "call_end", "call_id": "c1", "tool": "t", "status": "failed", "duration_s": 1.0},
        ]
    records.append({"event": "call_start", "call_id": "c3", "parent_call_id": None, "tool": "t"})
    data = report(records)
    assert data["runs"] == 2
    assert [(c["id"], [k["id"] for k in c["children"]]) for c in data["tree"]] == [
        ("r1:c1", ["r1:c2"]),
        ("r2:c1", ["r2:c2"]),
        ("r2:c3", []),
    ]
    assert data["per_tool"]["t"] == {
        "count": 3,
        "passed": 0,
        "failed": 2,
        "error": 0,
        "unfinished": 1,
        "total_s": 2.0,
        "mean_s": 1.0,
        "max_s": 1.0,
    }


@pytest.mark.root
async def test_report_of_a_real_trace(sandbox_tmp: Path) -> None:
    policy = write_policy(
        sandbox_tmp, {"tester": agent(builtinToolboxes=[system_toolbox("sys", ["date", "hostname", "list-sessions"])])}
    )
    async with Supervisor.open(policy) as sup:
        assert (await sup.call("system_sys_hostname", {})).status == "passed"
        assert (await sup.call("system_sys_date", {})).status == "passed"
        assert (await sup.call("system_sys_hostname", {})).status == "passed"
        assert (await sup.call("system_sys_date", {"bogus": 1})).status == "error"
        assert (await sup.call("no_such_tool", {})).status == "error"
    trace = sandbox_tmp / "state" / "trace.jsonl"
    with trace.open("a") as fh:
        fh.write("{not json\n")
        fh.write(
            json.dumps(
                {
                    "ts": 1.0,
                    "event": "egress",
                    "toolbox": "sys",
                    "method": "CONNECT",
                    "host": "evil.example",
                    "port": 443,
                    "verdict": "refused",
                    "reason": "host not in AllowedHosts",
                }
            )
            + "\n"
        )
    data = report(load_trace(str(trace)))
    assert data["calls"] == 3 and data["unreadable_lines"] == [len(trace.read_text().splitlines()) - 1]
    assert data["per_tool"]["system_sys_hostname"]["passed"] == 2
    assert data["refusals_by_kind"] == {"PortalInvalidArguments": 1, "PortalToolNotFound": 1}
    assert data["redundant_reads"] == [
        {"call_id": "c3", "tool": "system_sys_hostname", "resource": "system:hostname", "first_read": "c1"}
    ]
    assert data["egress"]["decisions"] == {"evil.example:443 refused": 1}
    text = render_text(data)
    assert "c3 system_sys_hostname re-read system:hostname (first read by c1" in text
    assert "PortalToolNotFound: no_such_tool" in text

    env = {**os.environ, "PYTHONPATH": REPO}
    cli = subprocess.run(
        [sys.executable, "-m", "supervisor", "trace", str(trace), "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
    )
    assert cli.returncode == 0, cli.stderr
    assert json.loads(cli.stdout)["redundant_reads"] == data["redundant_reads"]
    missing = subprocess.run(
        [sys.executable, "-m", "supervisor", "trace", str(sandbox_tmp / "nope.jsonl")],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
    )
    assert missing.returncode == 2 and "cannot read the trace file" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_the_trace_rotates_past_max_bytes_and_the_report_reads_both_parts(tmp_path: Path) -> None:
    from supervisor.traces._recorder import TraceRecorder
    from supervisor.traces._report import load_trace

    path = tmp_path / "trace.jsonl"
    trace = TraceRecorder(str(path), max_bytes=4096)
    for i in range(400):  # about 60 bytes each: the file is rotated several times
        trace.record("portal_refusal", n=i)  # not buffered: every record is written at once
    trace.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.jsonl", "trace.jsonl.1"]
    older, newer = (tmp_path / "trace.jsonl.1").read_text(), path.read_text()
    assert 4096 <= len(older) < 4096 + 200 and len(newer) < 4096  # disk use stays under about twice max_bytes
    assert all(line.endswith("}") for line in (older + newer).splitlines())  # no record split by a rotation
    numbers = [r["n"] for r in load_trace(str(path))]
    assert numbers == list(range(numbers[0], 400)) and numbers[0] > 0  # the newest records, in order, none lost
    # A supervisor started again on a file near max_bytes continues it, and rotates it after the write past it.
    again = TraceRecorder(str(path), max_bytes=len(newer) + 1)
    again.record("portal_refusal", n="restart")
    again.close()
    assert '"restart"' in (tmp_path / "trace.jsonl.1").read_text() and path.read_text() == ""
