"""The policy's call-tree budgets (``budget``, and ``tenants.<name>.budget``): what one root call's whole tree may
use. Enforced by :mod:`supervisor.calls._budget`; docs/AGENTS.md "Call-tree budgets"."""

from __future__ import annotations

from pydantic import Field

from ._model import Override, StrictModel, overrides

__all__ = ["Budget", "BudgetOverride"]

#: The largest count a budget may name (more is no bound at all: write null).
MAX_COUNT = 1 << 40


class Budget(StrictModel):
    """What one root call (a frontend's call, an ``agents-supervise run``) may use, its whole call tree together:
    sub-agent loops, Lua ``tools.call``, every portal request of a worker, at any depth. ``null``: no bound."""

    model_requests: int | None = Field(
        default=64,
        ge=1,
        le=MAX_COUNT,
        description="requests to model endpoints (every attempt, retries included) in one root call's tree",
    )
    tool_calls: int | None = Field(
        default=256,
        ge=1,
        le=MAX_COUNT,
        description="tool calls dispatched in one root call's tree, the root call included",
    )
    wall_time_s: float | None = Field(
        default=600.0,
        gt=0,
        description="wall time of one root call's tree, from its start; then every call still running in it is "
        "cancelled",
    )


@overrides(Budget)
class BudgetOverride(Override):
    """A tenant's own budgets: only the keys written replace the policy's ``budget`` (``null``: no bound)."""
