"""Call-tree budgets: the accounting (pure), the policy's sections, and the portal sharing one budget between every
branch of a root call, concurrent ones included.

The portal tests run the real portal, registry and trace recorder on trio's virtual clock; the toolbox behind the
portal is a stand-in runner that makes nested portal calls as a worker's portal requests would (several at once),
because what is tested is the portal's accounting, which never reaches a worker. Real workers, a real Lua
``tools.call`` loop and real sub-agent loops against a model server: ``test_budget_e2e.py``.
"""

from __future__ import annotations

import math
import types
from typing import Any

import pytest
import trio
import trio.testing

from supervisor.calls import CallOrigin, CallPolicy, CallServices, Portal, ToolRegistry
from supervisor.calls._budget import BudgetLimits, BudgetPolicy, CallTreeBudget
from supervisor.config import Policy
from supervisor.traces import TraceRecorder
from toolboxes import ToolResult


# -- pure ------------------------------------------------------------------------------------------------------------
def test_a_tool_call_is_counted_until_the_budget_refuses_it_and_then_nothing_is_counted() -> None:
    budget = CallTreeBudget(BudgetLimits(tool_calls=3), "local", started=0.0, root="c1")
    assert [budget.charge_tool_call(1.0) for _ in range(3)] == [None, None, None]
    spent = budget.charge_tool_call(1.0)
    assert spent is not None and spent.budget == "tool_calls" and budget.tool_calls == 3
    assert spent.key == "budget.tool_calls"
    assert spent.message() == (
        "the call tree of this request (root call c1) used up its budget of 3 tool calls (budget.tool_calls in the "
        "policy)"
    )
    assert budget.charge_model_request(1.0) is None  # another budget: unbounded here


def test_model_requests_are_their_own_budget() -> None:
    budget = CallTreeBudget(BudgetLimits(model_requests=2, tool_calls=1), "acme", started=0.0)
    assert budget.charge_model_request(0.0) is None and budget.charge_model_request(0.0) is None
    spent = budget.charge_model_request(0.0)
    assert spent is not None and spent.budget == "model_requests" and "2 model requests" in spent.message()
    assert budget.charge_tool_call(0.0) is None and budget.used() == {"model_requests": 2, "tool_calls": 1}


def test_wall_time_refuses_everything_once_the_deadline_passed() -> None:
    budget = CallTreeBudget(BudgetLimits(wall_time_s=2.5), "local", started=10.0)
    assert budget.deadline == 12.5 and budget.expired(12.4) is None
    assert budget.charge_tool_call(12.4) is None
    for spent in (budget.expired(12.5), budget.charge_tool_call(13.0), budget.charge_model_request(13.0)):
        assert spent is not None and spent.budget == "wall_time_s" and "2.5 s of wall time" in spent.message()
    assert budget.tool_calls == 1 and budget.model_requests == 0
    assert CallTreeBudget(BudgetLimits(), "local", started=0.0).deadline == math.inf


def test_each_exhaustion_is_reported_once_per_tree() -> None:
    budget = CallTreeBudget(BudgetLimits(tool_calls=1, model_requests=1), "local", started=0.0)
    budget.charge_tool_call(0.0)
    budget.charge_model_request(0.0)
    first, again, other = budget.charge_tool_call(0.0), budget.charge_tool_call(0.0), budget.charge_model_request(0.0)
    assert first is not None and again is not None and other is not None
    assert budget.first_report(first) and not budget.first_report(again) and budget.first_report(other)


def test_the_policy_budget_and_a_tenants_own_keys() -> None:
    policy = Policy.model_validate(
        {
            "budget": {"model_requests": 10, "tool_calls": 20, "wall_time_s": 30},
            "tenants": {
                "acme": {"agents": ["a"], "budget": {"tool_calls": 5, "wall_time_s": None}},
                "plain": {"agents": ["a"]},
            },
        }
    )
    budgets = BudgetPolicy.from_policy(policy)
    assert budgets.limits("local") == BudgetLimits(10, 20, 30.0, "budget")
    assert budgets.limits("plain") == BudgetLimits(10, 20, 30.0, "budget")
    assert budgets.limits("acme") == BudgetLimits(10, 5, None, "tenants.acme.budget")
    spent = budgets.open("acme", 0.0).charge_tool_call(0.0)
    assert spent is None
    tree = budgets.open("acme", 0.0, root="c9")
    for _ in range(5):
        tree.charge_tool_call(0.0)
    late = tree.charge_tool_call(0.0)
    assert late is not None and "(tenants.acme.budget.tool_calls in the policy, tenant acme)" in late.message()


def test_a_policy_that_says_nothing_is_bounded_and_null_means_no_bound() -> None:
    default = Policy().budget
    assert (default.model_requests, default.tool_calls, default.wall_time_s) == (64, 256, 600.0)
    open_ended = Policy.model_validate({"budget": {"model_requests": None, "tool_calls": None, "wall_time_s": None}})
    assert BudgetPolicy.from_policy(open_ended).limits("local") == BudgetLimits(None, None, None)


@pytest.mark.parametrize(
    "section",
    [{"tool_calls": 0}, {"model_requests": -1}, {"wall_time_s": 0}, {"tool_call": 3}, {"tool_calls": "many"}],
)
def test_bad_budget_sections_are_refused(section: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="budget"):
        Policy.model_validate({"budget": section})


# -- the portal ------------------------------------------------------------------------------------------------------
class _FanOut:
    """A toolbox runner standing in for a worker: ``fan {n}`` makes ``n`` nested calls of ``leaf`` through the portal
    at once and waits for their answers, as a worker's concurrent portal requests are (answered in the tasks of the
    worker's connection, :attr:`requests`, not in the calling task); ``leaf`` answers at once or, with
    ``{"hang": true}``, never."""

    def __init__(self) -> None:
        self.name = "fan"
        self.spec = types.SimpleNamespace(agent="a", toolbox="fan")
        self.tools = [
            {"name": "fan", "input_schema": {"type": "object"}},
            {"name": "leaf", "input_schema": {"type": "object"}},
        ]
        self.portal: Portal | None = None
        self.requests: trio.Nursery | None = None
        self.nested: list[ToolResult] = []

    async def call(self, tool: str, args: dict[str, Any], ctx: dict[str, Any], origin: Any = None) -> ToolResult:
        if tool == "leaf":
            if args.get("hang"):
                await trio.sleep_forever()
            return ToolResult.passed("leaf")
        assert self.portal is not None and self.requests is not None and isinstance(origin, CallOrigin)
        portal, n = self.portal, int(args["n"])
        done = trio.Event()

        async def one() -> None:
            self.nested.append(await portal.call("leaf", {"hang": bool(args.get("hang"))}, origin))
            if len(self.nested) % n == 0:
                done.set()

        for _ in range(n):
            self.requests.start_soon(one)
        await done.wait()
        return ToolResult.passed(f"{n} nested calls answered")


def _portal(limits: BudgetLimits) -> tuple[Portal, _FanOut, list[tuple[str, dict[str, Any]]]]:
    registry = ToolRegistry()
    runner = _FanOut()
    registry.rebuild([runner])  # type: ignore[list-item]
    trace = TraceRecorder(None)
    records: list[tuple[str, dict[str, Any]]] = []
    trace.listeners.add(lambda event, fields: records.append((event, fields)))
    services = CallServices.make(registry, trace, state_dir="/nonexistent-attachments")  # nothing is attached
    portal = Portal(services, CallPolicy(budgets=BudgetPolicy(limits)))
    runner.portal = portal
    return portal, runner, records


async def test_concurrent_branches_share_one_budget() -> None:
    portal, runner, records = _portal(BudgetLimits(tool_calls=5))
    async with trio.open_nursery() as runner.requests:
        result = await portal.call("fan", {"n": 10}, CallOrigin(session_id="s"))
    assert result.status == "passed"
    statuses = sorted(r.status for r in runner.nested)
    assert statuses == ["error"] * 6 + ["passed"] * 4  # the root call and 4 nested ones: 5
    refused = [r for r in runner.nested if r.status == "error"]
    assert all(r.summary == "CallTreeBudget" and ("budget", "tool_calls") in r.metadata for r in refused)
    assert "used up its budget of 5 tool calls (budget.tool_calls in the policy)" in (refused[0].data or "")
    hits = [f for e, f in records if e == "limit_hit"]
    assert len(hits) == 1 and hits[0]["limit"] == "budget.tool_calls" and hits[0]["used"]["tool_calls"] == 5
    assert hits[0]["root_call_id"] == "c1"  # the root call, the portal's first
    assert len([f for e, f in records if e == "portal_refusal" and f["kind"] == "CallTreeBudget"]) == 6
    # a new root call has a budget of its own
    async with trio.open_nursery() as runner.requests:
        assert (await portal.call("fan", {"n": 4}, CallOrigin(session_id="s"))).status == "passed"
    assert [r.status for r in runner.nested[10:]] == ["passed"] * 4


async def test_a_call_whose_tree_is_spent_is_refused_and_never_given_a_fresh_budget() -> None:
    """Only an origin without a budget (a root call) gets a new one: a nested call made with its tree's spent
    budget is refused, whoever makes it."""
    portal, _, _ = _portal(BudgetLimits(tool_calls=1))
    spent = CallTreeBudget(BudgetLimits(tool_calls=1), "local", started=trio.current_time(), root="c0")
    assert spent.charge_tool_call(trio.current_time()) is None
    refused = await portal.call("leaf", {}, CallOrigin(session_id="s", depth=1, budget=spent))
    assert refused.status == "error" and refused.summary == "CallTreeBudget"


async def test_wall_time_stops_every_branch_at_the_trees_deadline(autojump_clock: trio.testing.MockClock) -> None:
    portal, runner, records = _portal(BudgetLimits(wall_time_s=30))
    start = trio.current_time()
    async with trio.open_nursery() as runner.requests:
        result = await portal.call("fan", {"n": 3, "hang": True}, CallOrigin(session_id="s"))
    assert trio.current_time() - start == pytest.approx(30)
    assert result.status == "error" and result.summary == "CallTreeBudget"
    assert "was stopped: the call tree of this request" in (result.data or "")
    assert "budget of 30 s of wall time (budget.wall_time_s in the policy)" in (result.data or "")
    assert len(runner.nested) == 3 and all(r.summary == "CallTreeBudget" for r in runner.nested)
    ends = [f for e, f in records if e == "call_end"]
    assert len(ends) == 4 and all(f["summary"] == "CallTreeBudget" for f in ends)
    assert [f["limit"] for e, f in records if e == "limit_hit"] == ["budget.wall_time_s"]
