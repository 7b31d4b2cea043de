"""Portal details that need no worker."""

from __future__ import annotations


def test_large_arguments_are_not_copied_into_the_trace() -> None:
    from supervisor.calls._portal import MAX_TRACED_ARGS_CHARS, _traced_args

    small = {"path": "/tmp/x", "n": 1}
    assert _traced_args(small) == small
    big = {"content": "x" * (MAX_TRACED_ARGS_CHARS + 1)}
    assert "_omitted" in _traced_args(big) and "more than" in _traced_args(big)["_omitted"]


def test_a_nested_origin_keeps_every_field_but_the_ones_a_call_changes() -> None:
    import dataclasses

    from supervisor.calls._budget import BudgetLimits, CallTreeBudget
    from supervisor.calls._portal import CallOrigin, StackEntry, nested_origin

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
