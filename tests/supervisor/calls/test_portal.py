"""Portal details that need no worker."""

from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any

import pytest
import trio

from supervisor.calls import CallOrigin, CallServices, Portal, ToolRegistry
from supervisor.traces import TraceRecorder
from toolboxes import ToolResult

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable


def test_large_arguments_are_not_copied_into_the_trace() -> None:
    from supervisor.calls._call_records import MAX_TRACED_ARGS_CHARS, traced_args

    small = {"path": "/tmp/x", "n": 1}
    assert traced_args(small) == small
    big = {"content": "x" * (MAX_TRACED_ARGS_CHARS + 1)}
    assert "_omitted" in traced_args(big) and "more than" in traced_args(big)["_omitted"]


def test_a_nested_origin_keeps_every_field_but_the_ones_a_call_changes() -> None:
    import dataclasses

    from supervisor.calls._budget import BudgetLimits, CallTreeBudget
    from supervisor.calls._origin import CallOrigin, StackEntry, nested_origin

    def report(update: object) -> None:
        pass

    origin = CallOrigin(
        session_id="s",
        conversation_id="c",
        turn_id="t",
        agent_id="a",
        tenant="ten",
        depth=1,
        stack=(StackEntry("a", "first", "c1", 1),),
        allowed=frozenset({"x"}),
        parent_call_id="c1",
        caller="worker",
        agent_scope="scope",
        progress=report,
        budget=CallTreeBudget(BudgetLimits(tool_calls=3), "ten", 0.0),
    )
    # every field differs from its default, so a field the function forgot would show as the default
    for f in dataclasses.fields(CallOrigin):
        default = f.default if f.default is not dataclasses.MISSING else None
        assert getattr(origin, f.name) != default, f.name
    entry = StackEntry("b", "second", "c2", 2)
    inner = nested_origin(origin, entry, "b")
    changed = {"depth": 2, "stack": (*origin.stack, entry), "parent_call_id": "c2", "agent_id": "b"}
    assert inner == dataclasses.replace(origin, **changed)
    assert inner.progress is report  # compare=False: checked on its own
    assert inner.budget is origin.budget  # the tree's one budget, not a copy
    other = CallTreeBudget(BudgetLimits(), "ten", 0.0)
    assert nested_origin(origin, entry, "b", other).budget is other  # a root call's own, opened by the portal


class _Answers:
    """A toolbox runner standing in for a worker (what is tested is the portal's stages, which never reach one):
    ``say {status}`` answers with that status."""

    def __init__(self) -> None:
        self.name = "box"
        self.spec = types.SimpleNamespace(agent="a", toolbox="box", kind="system", plan=None)
        self.tools = [{"name": "say", "input_schema": {"type": "object"}}]
        self.load_errors: list[dict[str, str]] = []
        self.failed_reason = None

    async def call(self, tool: str, args: dict[str, Any], ctx: dict[str, Any], origin: object = None) -> ToolResult:
        return ToolResult(status=args["status"], data=tool)


async def test_the_watches_explain_a_result_in_order_waiting_only_where_one_must() -> None:
    order: list[str] = []

    class Sync:
        longest_wait_s = 0.0

        def begin(self, tool: object, call_id: str) -> Callable[[ToolResult], ToolResult]:
            def finish(result: ToolResult) -> ToolResult:
                order.append(f"sync {result.status}")
                return result.with_meta("sync", call_id)

            return finish

    class Waiting:
        longest_wait_s = 1.0

        def begin(self, tool: object, call_id: str) -> Callable[[ToolResult], ToolResult | Awaitable[ToolResult]]:
            def finish(result: ToolResult) -> ToolResult | Awaitable[ToolResult]:
                if result.status == "passed":
                    order.append("at once")
                    return result

                async def later() -> ToolResult:
                    await trio.lowlevel.checkpoint()
                    order.append("waited")
                    return result.with_meta("waited", call_id)

                return later()

            return finish

    registry = ToolRegistry()
    registry.rebuild([_Answers()])  # type: ignore[list-item]
    services = CallServices.make(
        registry, TraceRecorder(None), state_dir="/nonexistent", watches=(Sync(), Waiting(), Sync())
    )
    portal = Portal(services)
    passed = await portal.call("say", {"status": "passed"}, CallOrigin(session_id="s"))
    assert order == ["sync passed", "at once", "sync passed"] and [k for k, _ in passed.metadata] == ["sync", "sync"]
    order.clear()
    failed = await portal.call("say", {"status": "failed"}, CallOrigin(session_id="s"))
    assert order == ["sync failed", "waited", "sync failed"]
    assert [k for k, _ in failed.metadata] == ["sync", "waited", "sync"]


class _Sleeps(_Answers):
    """A runner whose calls sleep ``args["s"]`` seconds, claiming to end within ``ends_within_s``."""

    def __init__(self, ends_within_s: float) -> None:
        super().__init__()
        self.ends_within_s = ends_within_s

    async def call(self, tool: str, args: dict[str, Any], ctx: dict[str, Any], origin: object = None) -> ToolResult:
        await trio.sleep(args["s"])
        return ToolResult("passed", data="slept")


@pytest.mark.parametrize("ends_within_s", [0.01, 3.0, 30.0, float("inf")])
async def test_the_trees_deadline_stops_a_dispatch_it_can_reach(ends_within_s: float, autojump_clock: Any) -> None:
    """A dispatch gets no cancel scope only when its runner's bound ends it well before the tree's deadline; a
    runner whose bound reaches the deadline (or has none) is stopped there with the budget's result. (The 0.01 s
    runner breaks its promise here, as a test double can: it is then not stopped, which is what skipping means.)"""
    from supervisor.calls._budget import BudgetLimits, BudgetPolicy
    from supervisor.calls._checks import CallPolicy

    registry = ToolRegistry()
    registry.rebuild([_Sleeps(ends_within_s)])  # type: ignore[list-item]
    assert registry.get("say") is not None and registry.get("say").ends_within_s == ends_within_s  # type: ignore[union-attr]
    rules = CallPolicy(budgets=BudgetPolicy(default=BudgetLimits(wall_time_s=6.0)))
    portal = Portal(CallServices.make(registry, TraceRecorder(None), state_dir="/nonexistent"), rules)
    clock_start = trio.current_time()
    result = await portal.call("say", {"s": 0.0}, CallOrigin(session_id="s"))
    assert result.status == "passed"
    # the tree's deadline (6 s) within the runner's bound and the slack: stopped at it (autojump clock: no wait)
    if ends_within_s + 5.0 >= 6.0:
        result = await portal.call("say", {"s": 600.0}, CallOrigin(session_id="s"))
        assert result.status == "error" and result.meta("portal_error") == "CallTreeBudget", result
        assert 6.0 <= trio.current_time() - clock_start < 7.0
    else:
        result = await portal.call("say", {"s": 0.5}, CallOrigin(session_id="s"))
        assert result.status == "passed"
