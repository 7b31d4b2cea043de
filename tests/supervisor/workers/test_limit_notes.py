"""Denials by resource limits explained: the pure counter parsing and wording (any machine), then real bash tools in
real confined workers hitting their cgroup's pids and memory limits and an rlimit (root, cgroups)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from labkit import describe_json, write_script
from sandbox import (
    CgroupLayout,
    CounterFiles,
    LimitCounters,
    counter_files,
    plan_cgroup,
    read_counters,
    read_layout,
    rises,
)
from sandbox._cgroup_events import parse_counters
from supervisor._supervisor import Supervisor
from supervisor.traces._report import load_trace, render_text, report
from supervisor.workers import _limit_notes
from supervisor.workers._limit_notes import limit_hits, note, signal_of
from tests._policies import agent, system_toolbox, write_policy
from toolboxes import ToolResult

if TYPE_CHECKING:
    from pathlib import Path

V1 = CgroupLayout("v1", "/cg/pids/agents-supervise", "/cg/memory/x/agents-supervise")
V2 = CgroupLayout("v2", "/cg/u/agents-supervise", "/cg/u/agents-supervise", parent_enable="/cg/u")


# --- the pure part ----------------------------------------------------------------------------------------------


def test_counter_files_name_each_controllers_event_file() -> None:
    v1 = plan_cgroup(V1, pids_max=8, memory_bytes=1 << 20)
    assert v1 is not None
    assert counter_files(V1, v1.instance("tb", "1")) == CounterFiles(
        "/cg/pids/agents-supervise/tb-1/pids.events", "/cg/memory/x/agents-supervise/tb-1/memory.oom_control"
    )
    only_pids = plan_cgroup(V1, pids_max=8, memory_bytes=None)
    assert only_pids is not None
    assert counter_files(V1, only_pids.instance("tb", "1")).memory == ""
    v2 = plan_cgroup(V2, pids_max=8, memory_bytes=1 << 20)
    assert v2 is not None
    assert counter_files(V2, v2.instance("tb", "1")) == CounterFiles(
        "/cg/u/agents-supervise/tb-1/pids.events", "/cg/u/agents-supervise/tb-1/memory.events"
    )


def test_counters_parse_from_v1_and_v2_texts_and_unknown_stays_unknown() -> None:
    v1_oom = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"
    v2_events = "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 1\n"
    assert parse_counters("max 5\n", v1_oom) == LimitCounters(5, 3)
    assert parse_counters("max 0\n", v2_events) == LimitCounters(0, 2)  # memory.events' "max" is not pids'
    assert parse_counters(None, "garbage") == LimitCounters(None, None)
    assert read_counters(CounterFiles("/nonexistent/pids.events", "")) == LimitCounters(None, None)
    assert rises(LimitCounters(5, 3), LimitCounters(9, 3)) == {"pids_max": 4}
    assert rises(LimitCounters(None, 3), LimitCounters(9, None)) == {}  # unknown in either reading: no claim


def test_signals_the_toolboxes_report_are_read_and_exit_codes_are_not() -> None:
    assert signal_of(ToolResult.failed("x", metadata=[("exit_code", "-24")])) == 24
    assert signal_of(ToolResult.json({"exitCode": -25}, status="failed")) == 25
    assert signal_of(ToolResult.json({"exitCode": 152}, status="failed")) is None  # a shell's 128+N: any program
    assert signal_of(ToolResult.failed("x", metadata=[("exit_code", "3")])) is None
    assert signal_of(ToolResult.passed("ok")) is None


def test_the_note_names_the_limit_its_value_and_the_policy_keys_to_change() -> None:
    hits = limit_hits(
        {"pids_max": 3, "oom_kills": 1}, 24, pids_max=16, memory_bytes=1 << 27, cpu_seconds=2, file_size_bytes=None
    )
    assert [(h.limit, h.value) for h in hits] == [("processes", 16), ("memory_bytes", 1 << 27), ("cpu_seconds", 2)]
    text = note("tools", hits[0])
    assert "pids.max of 16" in text and "toolboxes.tools.limits.processes" in text and "limits.processes" in text
    assert "SIGXCPU" in note("tools", hits[2]) and "RLIMIT_CPU" in note("tools", hits[2])
    assert limit_hits({}, 9, pids_max=16, memory_bytes=None, cpu_seconds=None, file_size_bytes=None) == []


# --- real workers ------------------------------------------------------------------------------------------------

LAYOUT, WHY_NOT = read_layout()
needs_cgroups = pytest.mark.skipif(LAYOUT is None, reason=f"no usable cgroups here: {WHY_NOT}")

#: forks until the kernel refuses (bounded: a breach shows as 1000 children, never a hung machine), then ends them
FORK_BOMB = """python3 -c '
import os, signal, sys
kids = []
try:
    while len(kids) < 1000:
        pid = os.fork()
        if pid == 0:
            signal.pause()
            os._exit(0)
        kids.append(pid)
except OSError as exc:
    print("fork refused:", exc.strerror)
for k in kids:
    os.kill(k, signal.SIGKILL)
    os.waitpid(k, 0)
print("children", len(kids))
sys.exit(1)
'"""
HOG = "python3 -c \"b = b'x' * (400 << 20); print('BREACH: allocated', len(b))\""


def _policy(root: Path, scripts: dict[str, str], **policy: object) -> Path:
    tools = root / "tools"
    tools.mkdir()
    for name, run in scripts.items():
        write_script(tools, name, describe_json(name), run)
    return write_policy(
        root,
        {"tester": agent(bashToolboxes=[{"tag": "FileSystemDirectory", "contents": {"Path": "./tools"}}])},
        landlock_min_abi=6,
        **policy,
    )


def _limit_records(root: Path) -> list[dict]:
    lines = (root / "state" / "trace.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["event"] == "limit_hit"]


@pytest.mark.root
@needs_cgroups
async def test_a_fork_bomb_result_names_limits_processes_and_a_plain_failure_names_nothing(sandbox_tmp: Path) -> None:
    policy = _policy(
        sandbox_tmp,
        {"bomb": FORK_BOMB, "fails": "echo nope; exit 3"},
        toolboxes={"tools": {"limits": {"processes": 16}}},
    )
    async with Supervisor.open(policy) as sup:
        assert sup.load_errors() == []
        plain = await sup.call("bash_fails", {})
        bomb = await sup.call("bash_bomb", {})
        plain_after = await sup.call("bash_fails", {})
    assert plain.status == "failed" and "limit" not in plain.data and plain.meta("limit_hit") is None, plain.data
    assert plain_after.meta("limit_hit") is None, plain_after.data  # the counter is per call, not since the start
    assert bomb.status == "failed" and "fork refused" in bomb.data, bomb.data
    assert bomb.meta("limit_hit") == "limits.processes", bomb.metadata
    assert "limits.processes" in bomb.data and "pids.max of 16" in bomb.data, bomb.data
    [record] = _limit_records(sandbox_tmp)
    assert (record["toolbox"], record["limit"], record["value"], record["tool"]) == (
        "tools",
        "limits.processes",
        16,
        "bash_bomb",
    )
    assert record["call_id"]
    data = report(load_trace(str(sandbox_tmp / "state" / "trace.jsonl")))
    assert data["limits_hit_by_toolbox"] == {"tools": {"limits.processes": 1}}
    assert "tools: limits.processes x1" in render_text(data)


@pytest.mark.root
@needs_cgroups
async def test_the_counters_are_read_only_for_calls_that_did_not_pass(
    sandbox_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[CounterFiles] = []

    def counting(files: CounterFiles) -> LimitCounters:
        reads.append(files)
        return read_counters(files)

    monkeypatch.setattr(_limit_notes, "read_counters", counting)
    policy = _policy(
        sandbox_tmp,
        {"ok": "echo fine", "fails": "echo nope; exit 3"},
        toolboxes={"tools": {"limits": {"processes": 16}}},
    )
    async with Supervisor.open(policy) as sup:
        passed = [await sup.call("bash_ok", {}) for _ in range(5)]
        after_passing = len(reads)
        failed = await sup.call("bash_fails", {})
    assert [r.status for r in passed] == ["passed"] * 5 and failed.status == "failed"
    assert after_passing == 1  # the worker group's baseline, read at its first call; none for a call that passed
    assert len(reads) == 2 and reads[0].pids_events.endswith("/pids.events")  # the failed call read its group


@pytest.mark.root
@needs_cgroups
async def test_a_memory_hog_result_names_limits_memory_bytes(sandbox_tmp: Path) -> None:
    policy = _policy(sandbox_tmp, {"hog": HOG}, limits={"address_space_bytes": "2GiB", "memory_bytes": "128MiB"})
    async with Supervisor.open(policy) as sup:
        hog = await sup.call("bash_hog", {})
    assert hog.status == "failed" and "allocated 419430400" not in hog.data, hog.data
    assert hog.meta("limit_hit") == "limits.memory_bytes", hog.metadata
    assert "limits.memory_bytes" in hog.data and f"memory limit of {128 << 20} bytes" in hog.data, hog.data
    [record] = _limit_records(sandbox_tmp)
    assert (record["limit"], record["value"]) == ("limits.memory_bytes", 128 << 20)


@pytest.mark.root
@needs_cgroups
async def test_a_process_killed_by_sigxfsz_names_limits_file_size_bytes(sandbox_tmp: Path) -> None:
    policy = _policy(
        sandbox_tmp, {"big": "exec head -c 3000000 /dev/zero > /tmp/big"}, limits={"file_size_bytes": "1MiB"}
    )
    async with Supervisor.open(policy) as sup:
        big = await sup.call("bash_big", {})
    # execute-command reports the signal in its structured exitCode (-25)
    policy = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=[system_toolbox(capabilities=["execute-command"])])},
        landlock_min_abi=6,
        limits={"file_size_bytes": "1MiB"},
    )
    async with Supervisor.open(policy) as sup:
        command = await sup.call(
            "system_system_execute_command", {"command": "exec head -c 3000000 /dev/zero > /tmp/big"}
        )
    assert command.structured["exitCode"] == -25, command.data
    assert command.meta("limit_hit") == "limits.file_size_bytes", command.metadata
    assert "toolboxes.tester/system.limits.file_size_bytes" in command.data, command.data  # agent-qualified
    assert big.status == "failed" and "SIGXFSZ" in (big.summary or ""), big.data
    assert big.meta("limit_hit") == "limits.file_size_bytes", big.metadata
    assert "RLIMIT_FSIZE" in big.data and f"of {1 << 20} bytes" in big.data, big.data


@needs_cgroups
def test_check_lists_the_limits_a_result_will_explain(sandbox_tmp: Path) -> None:
    from tests.supervisor.frontends.test_frontends import _cli

    policy = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=[system_toolbox()])},
        limits={"cpu_seconds": 30, "file_size_bytes": None},
    )
    [tb] = json.loads(_cli("check", "--policy", str(policy), "--json").stdout)["toolboxes"]
    assert tb["limit_notes"] == [
        "limits.processes (pids.events)",
        "limits.memory_bytes (OOM kills in the group)",
        "limits.cpu_seconds (SIGXCPU)",
    ]
    human = _cli("check", "--detail", "--policy", str(policy)).stdout
    assert "a call stopped by a limit is explained for: limits.processes (pids.events)" in human
