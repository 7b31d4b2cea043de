"""Call-tree budgets end to end: a self-recursive agent, a Lua ``tools.call`` loop, and wall time across a tree.

Real parts: the supervisor, its confined workers (Lua, System, SQLite, bash), the portal, the session store, the
trace. Not real: the model endpoint, a scripted OpenAI-compatible server on loopback
(``tests/supervisor/_model_server.py``), because no real model can run here; it answers every request with another
call of the agent itself (the seed's kimi example asks its own ``io_prompt_agent_local_lrmlua``), which is the cost
the budget is there for: without it one root call of that agent makes 11,110 model requests (10 steps, depth 4),
about 70,000 under ``strict.yaml``'s steps.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from supervisor._supervisor import Supervisor
from tests._policies import agent, local_model, local_model_of, shipped_policy, system_toolbox, write_policy
from tests.supervisor._model_server import Reply, call, model_server
from tests.supervisor.calls.test_portal_depth import _lua
from tests.supervisor.config.test_seed_examples import SEED, _stand_ins

pytestmark = pytest.mark.root

STRICT = Path(__file__).resolve().parents[2] / "policies" / "strict.yaml"
KIMI = "io_prompt_agent_local_lrmlua"


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTS_TEST_KEY", "k")


def _trace(root: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (root / "state" / "trace.jsonl").read_text().splitlines()]


def _kimi_policy(root: Path, model_url: str) -> Path:
    """The seed's kimi agent (``local_lrmlua``, which names itself as its sub-agent), its model pointed at the
    scripted server, under ``strict.yaml``'s settings with its budget unchanged."""
    folder = root / "kimi"
    folder.mkdir()
    _stand_ins(folder)  # its bash tool, repro-cases, README.md, dev-memory.db, kimi-10.lrmlua.json
    seed = json.loads((SEED / "local_lrmlua.json").read_text())
    seed["contents"].update(modelUrl=model_url, apiKeyId="test")
    (folder / "kimi.json").write_text(json.dumps(seed))
    return shipped_policy(
        root, STRICT, [folder / "kimi.json"], model_keys={"test": "AGENTS_TEST_KEY"}, agent_loop=local_model_of(STRICT)
    )


def _every_loop_ended(sup: Supervisor, records: list[dict[str, Any]]) -> None:
    starts = [r["session"] for r in records if r["event"] == "agent_start"]
    ends = {r["session"]: r["status"] for r in records if r["event"] == "agent_end"}
    assert starts and set(starts) == set(ends) and set(ends.values()) == {"failed"}
    assert sup.sessions is not None
    assert all(row.status == "failed" for row in sup.sessions.rows(set(starts)))


async def test_the_seed_kimi_agent_stops_at_strict_yamls_model_request_budget(sandbox_tmp: Path) -> None:
    strict = yaml.safe_load(STRICT.read_text())
    budget = strict["budget"]["model_requests"]
    assert budget < strict["agent_loop"]["max_steps"] ** strict["max_call_depth"] / 100  # far below the tree's size
    with model_server(lambda req: call(KIMI, {"what": "think about it more deeply"})) as server:
        async with Supervisor.open(_kimi_policy(sandbox_tmp, server.url)) as sup:
            result = await sup.call(KIMI, {"what": "solve it"})
            records = _trace(sandbox_tmp)
            _every_loop_ended(sup, records)
    assert len(server.requests) == budget
    assert result.status == "error" and result.summary == "CallTreeBudget"
    assert ("budget", "model_requests") in result.metadata and ("portal_error", "CallTreeBudget") in result.metadata
    assert f"used up its budget of {budget} model requests (budget.model_requests in the policy)" in (result.data or "")
    assert (result.data or "").startswith("agent local_lrmlua was stopped before its model request")
    [hit] = [r for r in records if r["event"] == "limit_hit" and r["limit"].startswith("budget.")]
    assert any(r["limit"] == "agent_loop.max_steps" for r in records if r["event"] == "limit_hit")  # deepest loops
    assert hit["limit"] == "budget.model_requests" and hit["value"] == budget and hit["tenant"] == "local"
    assert hit["used"]["model_requests"] == budget
    [root] = [r for r in records if r["event"] == "call_start" and r["depth"] == 1]
    assert hit["root_call_id"] == root["call_id"]
    # the tree went as deep as max_call_depth lets it; once spent, every loop was refused its next request
    loops = [r for r in records if r["event"] == "agent_start"]
    assert max(r["depth"] for r in loops) == strict["max_call_depth"]


LOOP = """
for i = 1, 100000 do
  local r = tools.call("system_sys_date", {})
  if r.status ~= "ok" then return i, r.status, r.error, r.result_txt end
end
return 0
"""


def _lua_policy(root: Path, **policy: Any) -> Path:
    tester = agent("tester", builtinToolboxes=[system_toolbox("sys", ["date"]), _lua(["system_sys_date"])])
    return write_policy(
        root,
        {"tester": tester},
        limits={"wall_time_s": 60},
        toolboxes={"lua": {"limits": {"wall_time_s": 60}}},
        **policy,
    )


async def test_a_lua_tools_call_loop_stops_at_the_tool_call_budget(sandbox_tmp: Path) -> None:
    policy = _lua_policy(
        sandbox_tmp,
        budget={"tool_calls": 20, "model_requests": None, "wall_time_s": None},
        tenants={"acme": {"agents": ["tester"], "budget": {"tool_calls": 5}}},
    )
    async with Supervisor.open(policy) as sup:
        local = await sup.call("lua_lua_execute", {"script": LOOP})
        acme = await sup.call("lua_lua_execute", {"script": LOOP}, tenant="acme")
    assert local.status == "passed", local.data
    i, status, error, text = local.structured["values"]
    assert (i, status, error) == (20, "error", "CallTreeBudget")  # the root call and 19 dates: 20 tool calls
    assert text.startswith("Tool call 'system_sys_date' refused: the call tree of this request (root call c")
    assert "of 20 tool calls (budget.tool_calls in the policy); no more tools can be called in it." in text
    i, status, error, text = acme.structured["values"]
    assert (i, status, error) == (5, "error", "CallTreeBudget")  # the tenant's own budget
    assert "of 5 tool calls (tenants.acme.budget.tool_calls in the policy, tenant acme)" in text
    records = _trace(sandbox_tmp)
    dates = [r for r in records if r["event"] == "call_start" and r["tool"] == "system_sys_date"]
    assert len(dates) == 19 + 4
    refusals = [r for r in records if r["event"] == "portal_refusal"]
    assert [(r["kind"], r["caller"]) for r in refusals] == [("CallTreeBudget", "toolbox lua")] * 2
    hits = [(r["limit"], r["tenant"]) for r in records if r["event"] == "limit_hit"]
    assert hits == [("budget.tool_calls", "local"), ("tenants.acme.budget.tool_calls", "acme")]


async def test_wall_time_holds_across_a_tree_of_agents(sandbox_tmp: Path) -> None:
    """rec asks rec asks rec, whose model never answers: the tree ends at its wall time, long before the request's
    own timeout, and every loop in it ends."""

    def script(req: dict[str, Any]) -> Reply:
        prompt = next(m["content"] for m in req["messages"] if m["role"] == "user")  # this loop's own prompt
        if prompt == "level 2":
            return Reply("hang")  # held until the server closes
        level = int(prompt.split()[-1]) + 1 if prompt.startswith("level") else 1
        return call("io_prompt_agent_rec", {"what": f"level {level}"})

    with model_server(script) as server:
        rec = agent("rec", modelUrl=server.url, extraAgents=[{"slug": "rec", "path": "rec-self.json"}])
        (sandbox_tmp / "rec-self.json").write_text(json.dumps(rec))
        policy = write_policy(
            sandbox_tmp,
            {"rec": rec},
            model_keys={"test": "AGENTS_TEST_KEY"},
            agent_loop=local_model({"max_steps": 10, "retries": 0, "request_timeout_s": 60}),
            budget={"wall_time_s": 3},
        )
        async with Supervisor.open(policy) as sup:
            started = time.monotonic()
            result = await sup.call("io_prompt_agent_rec", {"what": "start"})
            took = time.monotonic() - started
            records = _trace(sandbox_tmp)
            _every_loop_ended(sup, records)
            ran = await sup.run_agent("rec", "start again")
            took_run = time.monotonic() - started - took
            _every_loop_ended(sup, _trace(sandbox_tmp))
    assert 3 <= took < 30, took
    assert result.status == "error" and result.summary == "CallTreeBudget", result.data
    assert "was stopped: the call tree of this request" in (result.data or "")
    assert "budget of 3 s of wall time (budget.wall_time_s in the policy)" in (result.data or "")
    assert [r["depth"] for r in records if r["event"] == "agent_start"] == [1, 2, 3]
    # agents-supervise run is a root call of its own: the same bound
    assert 3 <= took_run < 30, took_run
    assert ran.status == "error" and ran.summary == "CallTreeBudget"
    assert (ran.data or "").startswith("agent rec was stopped: the call tree of this request used up its budget")
    assert len(server.requests) == 6


async def test_a_reload_applies_new_budgets_to_the_root_calls_after_it(sandbox_tmp: Path) -> None:
    unbounded = {"model_requests": None, "wall_time_s": None}
    policy = _lua_policy(sandbox_tmp, budget={"tool_calls": 8, **unbounded})
    async with Supervisor.open(policy) as sup:
        before = await sup.call("lua_lua_execute", {"script": LOOP})
        data = yaml.safe_load(policy.read_text())
        data["budget"]["tool_calls"] = 3
        policy.write_text(yaml.safe_dump(data, sort_keys=False))
        await sup.reload()
        after = await sup.call("lua_lua_execute", {"script": LOOP})
    assert before.structured["values"][0] == 8 and after.structured["values"][0] == 3


async def test_wall_time_stops_a_lua_tools_call_loop_and_the_call_it_is_in(sandbox_tmp: Path) -> None:
    """The loop's own bounds (Lua's 10 s, the toolbox's 60 s wall time) are far off: the tree's 2 s end it."""
    policy = _lua_policy(sandbox_tmp, budget={"tool_calls": None, "model_requests": None, "wall_time_s": 2})
    async with Supervisor.open(policy) as sup:
        started = time.monotonic()
        result = await sup.call("lua_lua_execute", {"script": LOOP})
        took = time.monotonic() - started
        again = await sup.call("system_sys_date", {})  # a new root call: a budget of its own
    assert 2 <= took < 8, took
    assert result.status == "error" and result.summary == "CallTreeBudget", result.data
    assert (result.data or "").startswith("Tool 'lua_lua_execute' was stopped: the call tree of this request")
    assert again.status == "passed"
    records = _trace(sandbox_tmp)
    dates = [r for r in records if r["event"] == "call_start" and r["tool"] == "system_sys_date"]
    assert len(dates) > 1  # the loop ran until the end
    ended = {r["call_id"] for r in records if r["event"] == "call_end"}
    assert {r["call_id"] for r in records if r["event"] == "call_start"} <= ended  # nothing left running
    assert [r["limit"] for r in records if r["event"] == "limit_hit"] == ["budget.wall_time_s"]
