"""``agents-supervise call`` starts only what the call needs (issue 25): on a policy of many toolboxes, the tool's
own toolbox, and what it calls through the portal as it calls it. Counted from the trace's ``worker_spawn``
records (not from time): real confined workers, the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from supervisor._supervisor import Supervisor
from tests._policies import agent, system_toolbox, write_policy

pytestmark = pytest.mark.root

REPO = str(Path(__file__).resolve().parents[2])
MANY = 20


def _lua(allowed: list[str]) -> dict[str, Any]:
    return {
        "tag": "LuaToolbox",
        "contents": {
            "Name": "lua",
            "Description": "scripts",
            "MaxMemoryMB": 32,
            "MaxExecutionTimeSeconds": 5,
            "AllowedTools": allowed,
            "AllowedHosts": [],
        },
    }


def _policy(root: Path) -> Path:
    boxes = [system_toolbox(f"t{i}", capabilities=["date"]) for i in range(MANY)]
    return write_policy(
        root,
        {
            "coder": agent("coder", builtinToolboxes=[*boxes, _lua(["system_t3_date"])]),
            "other": agent("other", builtinToolboxes=[system_toolbox("t7", capabilities=["date"])]),
        },
    )


def _spawned(root: Path) -> list[str]:
    records = [json.loads(line) for line in (root / "state" / "trace.jsonl").read_text().splitlines()]
    return sorted(f"{r['agent']}/{r['toolbox']}" for r in records if r["event"] == "worker_spawn")


def _call(policy: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "supervisor", "call", "--policy", str(policy), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": REPO},
        cwd=REPO,
        timeout=120,
    )


def test_call_spawns_only_the_toolbox_of_the_tool(sandbox_tmp: Path) -> None:
    policy = _policy(sandbox_tmp)
    out = _call(policy, "--agent", "coder", "system_t7_date", "{}")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["status"] == "passed"
    assert _spawned(sandbox_tmp) == ["coder/t7"]  # not other/t7, not the 20 others


def test_what_a_call_calls_through_the_portal_starts_when_it_is_called(sandbox_tmp: Path) -> None:
    policy = _policy(sandbox_tmp)
    script = 'local r = tools.call("system_t3_date", {}); return r.status'
    out = _call(policy, "--agent", "coder", "lua_lua_execute", json.dumps({"script": script}))
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["structured"]["values"] == ["ok"], result
    assert _spawned(sandbox_tmp) == ["coder/lua", "coder/t3"]


def test_an_unknown_name_starts_the_agents_toolboxes_to_say_what_exists(sandbox_tmp: Path) -> None:
    policy = write_policy(
        sandbox_tmp, {"coder": agent("coder", builtinToolboxes=[system_toolbox("a"), system_toolbox("b")])}
    )
    out = _call(policy, "--agent", "coder", "no_such_tool", "{}")
    assert out.returncode == 2
    assert "Available tools: system_a_date" in json.loads(out.stdout)["data"]
    assert _spawned(sandbox_tmp) == ["coder/a", "coder/b"]


async def test_concurrent_calls_of_one_toolbox_start_it_once(sandbox_tmp: Path) -> None:
    import trio

    policy = _policy(sandbox_tmp)
    results: list[str] = []
    async with Supervisor.open(str(policy), start="on_demand") as sup:
        assert sup.list_tools() == []  # nothing started yet

        async def one() -> None:
            results.append((await sup.call("system_t5_date", {}, agent_scope="coder")).status)

        async with trio.open_nursery() as nursery:
            for _ in range(4):
                nursery.start_soon(one)
    assert results == ["passed"] * 4
    assert _spawned(sandbox_tmp) == ["coder/t5"]
