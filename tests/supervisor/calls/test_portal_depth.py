"""Portal calls from inside a real confined Lua worker: AllowedTools, and depth counted across the nesting."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from supervisor._supervisor import Supervisor
from tests._policies import agent, system_toolbox, write_policy

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.root

SCRIPT = """
local ok = tools.call("system_sys_hostname", {})
local refused = tools.call("system_sys_date", {})
return ok.status, ok.result_txt, refused.status, refused.error
"""


def _lua(allowed: list[str]) -> dict[str, Any]:
    return {
        "tag": "LuaToolbox",
        "contents": {
            "Name": "lua",
            "Description": "scripts",
            "MaxMemoryMB": 64,
            "MaxExecutionTimeSeconds": 10,
            "AllowedTools": allowed,
            "AllowedHosts": [],
        },
    }


def _policy(root: Path, **policy: Any) -> Path:
    tester = agent(builtinToolboxes=[system_toolbox("sys", ["date", "hostname"]), _lua(["system_sys_hostname"])])
    return write_policy(root, {"tester": tester}, **policy)


def _trace(root: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (root / "state" / "trace.jsonl").read_text().splitlines()]


async def test_lua_may_call_its_allowed_tool_and_no_other(sandbox_tmp: Path) -> None:
    async with Supervisor.open(_policy(sandbox_tmp)) as sup:
        result = await sup.call("lua_lua_execute", {"script": SCRIPT})
    assert result.status == "passed", result.data
    ok_status, ok_text, refused_status, refused_error = result.structured["values"]
    assert ok_status == "ok" and json.loads(ok_text)["capability"] == "hostname"
    assert refused_status == "not-allowed" and "system_sys_date" in refused_error
    starts = {r["tool"]: r for r in _trace(sandbox_tmp) if r["event"] == "call_start"}
    assert "system_sys_date" not in starts
    inner, outer = starts["system_sys_hostname"], starts["lua_lua_execute"]
    assert inner["parent_call_id"] == outer["call_id"] and inner["depth"] == 2 and inner["caller"] == "toolbox lua"


async def test_a_portal_call_from_lua_counts_toward_the_depth_limit(sandbox_tmp: Path) -> None:
    async with Supervisor.open(_policy(sandbox_tmp, max_call_depth=1)) as sup:
        result = await sup.call("lua_lua_execute", {"script": SCRIPT})
    assert result.status == "passed", result.data
    ok_status, ok_text, _, _ = result.structured["values"]
    assert ok_status == "error"
    assert (
        "Call depth limit of 1 reached: calling 'system_sys_hostname' would be depth 2. Call stack: "
        "lua_lua_execute (agent tester, depth 1) -> system_sys_hostname."
    ) in ok_text
    refusals = [r for r in _trace(sandbox_tmp) if r["event"] == "portal_refusal"]
    assert [(r["kind"], r["caller"]) for r in refusals] == [("PortalDepthExceeded", "toolbox lua")]
