"""Call-tree budgets: what one root call may cost, all of its tree together (pure, but for :func:`trace_exhaustion`).

A *root call* is a frontend's call (MCP, CLI, Python API: depth 0) or an ``agents-supervise run``. Everything it
leads to is its *tree*: sub-agent loops (``io_prompt_agent_<slug>``), calls those loops make, a toolbox's calls
through the portal (Lua ``tools.call``, any portal request of a worker), and theirs, at any depth, concurrent
branches included. Without a bound a tree's cost is steps to the power of depth (one call of the seed's
self-recursive kimi agent made 11,110 model requests), so the policy bounds each root call's whole tree
(``budget``; per tenant ``tenants.<name>.budget``):

- ``model_requests``: requests to model endpoints (every attempt, retries included);
- ``tool_calls``: calls dispatched by the portal (the root call itself included; a call refused before it is
  dispatched costs nothing);
- ``wall_time_s``: wall time from the root call's start; at its end every call still running in the tree is
  cancelled (each one's worker told to cancel) and ends with the budget's refusal.

One :class:`CallTreeBudget` is made for a root call (:meth:`BudgetPolicy.open`) and travels in its
:class:`~supervisor.calls._portal.CallOrigin` to every call of its tree, which all charge the same counters: no
branch can spend what another already spent. Nothing an agent file, a client or a tool sends can name, replace or
widen it: the origin of a nested call is made by the supervisor from its parent's, and only a call without one (a
root) gets a new budget, from the policy.

Charging is check-then-add with no await between, so concurrent branches on the trio loop cannot overshoot. The
exhaustion of each budget is traced once per tree (``limit_hit``, :func:`trace_exhaustion`); each refused tool call
is also a ``portal_refusal`` of kind ``CallTreeBudget``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from toolboxes import ToolResult

if TYPE_CHECKING:
    from collections.abc import Mapping

    from supervisor.traces import TraceRecorder

__all__ = [
    "BUDGET_KEYS",
    "BUDGET_KIND",
    "BudgetExhausted",
    "BudgetLimits",
    "BudgetPolicy",
    "CallTreeBudget",
    "Exhaustion",
    "budget_result",
    "trace_exhaustion",
]

#: The ``portal_error`` kind (and summary) of a call refused or stopped by its tree's budget.
BUDGET_KIND = "CallTreeBudget"

_UNITS = {"model_requests": "model requests", "tool_calls": "tool calls", "wall_time_s": "s of wall time"}
#: The budgets of a tree, as the policy names them.
BUDGET_KEYS: tuple[str, ...] = tuple(_UNITS)


@dataclass(frozen=True)
class BudgetLimits:
    """The bounds of one root call's tree (``None``: no bound of that kind) and where the policy sets them
    (``source``: ``budget``, or ``tenants.<name>.budget``), for the refusal's words."""

    model_requests: int | None = None
    tool_calls: int | None = None
    wall_time_s: float | None = None
    source: str = "budget"
    #: the keys ``source`` writes itself (a tenant's; the others are the policy's ``budget``)
    own: frozenset[str] = field(default=frozenset(BUDGET_KEYS), compare=False)


@dataclass(frozen=True)
class Exhaustion:
    """Which budget of a tree ran out: ``budget`` is ``model_requests``, ``tool_calls`` or ``wall_time_s``."""

    budget: str
    limit: float
    source: str
    tenant: str
    root: str

    @property
    def key(self) -> str:
        """The policy key that sets the budget that ran out (``budget.tool_calls``)."""
        return f"{self.source}.{self.budget}"

    def message(self) -> str:
        """Why, in words an agent or operator can act on (no trailing full stop: callers add what was stopped)."""
        amount = f"{self.limit:g}" if self.budget == "wall_time_s" else str(int(self.limit))
        tenant = f", tenant {self.tenant}" if self.source != "budget" else ""
        root = f" (root call {self.root})" if self.root else ""
        return (
            f"the call tree of this request{root} used up its budget of {amount} {_UNITS[self.budget]} "
            f"({self.key} in the policy{tenant})"
        )


class BudgetExhausted(Exception):
    """Raised where a budget refuses work that has no result of its own to refuse with (a model request about to
    be sent); carries the :class:`Exhaustion`. Tool calls are refused with a result instead."""

    def __init__(self, exhaustion: Exhaustion) -> None:
        super().__init__(exhaustion.message())
        self.exhaustion = exhaustion


@dataclass
class CallTreeBudget:
    """What one root call's tree has used, shared by every call of it (made by :meth:`BudgetPolicy.open`).

    ``started`` is the root's start on the clock the callers pass as ``now`` (``trio.current_time()``).
    """

    limits: BudgetLimits
    tenant: str
    started: float
    #: the root call's id (``c12``) once the portal gave it one; ``""`` for an ``agents-supervise run``
    root: str = ""
    model_requests: int = 0
    tool_calls: int = 0
    #: the budgets whose exhaustion was traced already (each once per tree)
    reported: set[str] = field(default_factory=set)
    #: when the tree's wall time ends (``inf``: no wall-time budget); set once, as ``started`` and the limits are
    deadline: float = field(init=False)

    def __post_init__(self) -> None:
        limit = self.limits.wall_time_s
        self.deadline = self.started + limit if limit is not None else math.inf

    def _exhausted(self, budget: str, limit: float) -> Exhaustion:
        return Exhaustion(budget, limit, self.limits.source, self.tenant, self.root)

    def out_of_time(self) -> Exhaustion:
        """The wall-time exhaustion (of a tree whose deadline passed)."""
        return self._exhausted("wall_time_s", self.limits.wall_time_s or 0.0)

    def expired(self, now: float) -> Exhaustion | None:
        """The wall-time exhaustion if ``now`` is past the deadline, else ``None``."""
        return self.out_of_time() if now >= self.deadline else None

    def _charge(self, budget: str, now: float) -> Exhaustion | None:
        if now >= self.deadline:
            return self.out_of_time()
        limit: int | None = getattr(self.limits, budget)
        used: int = getattr(self, budget)
        if limit is not None and used >= limit:
            return self._exhausted(budget, limit)
        setattr(self, budget, used + 1)
        return None

    def charge_tool_call(self, now: float) -> Exhaustion | None:
        """Count one tool call about to be dispatched, or say which budget refuses it (then nothing is counted)."""
        return self._charge("tool_calls", now)

    def charge_model_request(self, now: float) -> Exhaustion | None:
        """Count one model request about to be sent, or say which budget refuses it (then nothing is counted)."""
        return self._charge("model_requests", now)

    def first_report(self, exhaustion: Exhaustion) -> bool:
        """Whether ``exhaustion`` is the first of its budget in this tree (then it is traced; later ones are not)."""
        if exhaustion.budget in self.reported:
            return False
        self.reported.add(exhaustion.budget)
        return True

    def used(self) -> dict[str, Any]:
        """What the tree used so far (for the trace)."""
        return {"model_requests": self.model_requests, "tool_calls": self.tool_calls}


@dataclass(frozen=True)
class BudgetPolicy:
    """The policy's budgets: ``default`` for every root call, ``tenants`` for the root calls of a tenant that has
    its own (``tenants.<name>.budget`` in the policy: the keys it writes replace the default's)."""

    default: BudgetLimits = BudgetLimits()
    tenants: Mapping[str, BudgetLimits] = field(default_factory=dict)

    @classmethod
    def from_policy(cls, policy: Any) -> BudgetPolicy:
        """The budgets of a loaded :class:`~supervisor.config.Policy` (its ``budget`` and each tenant's)."""
        base = policy.budget
        default = BudgetLimits(base.model_requests, base.tool_calls, base.wall_time_s, "budget")
        tenants: dict[str, BudgetLimits] = {}
        for name, tenant in policy.tenants.items():
            if tenant.budget.model_fields_set:
                own = tenant.budget.applied_to(base)
                tenants[name] = BudgetLimits(
                    own.model_requests,
                    own.tool_calls,
                    own.wall_time_s,
                    source=f"tenants.{name}.budget",
                    own=frozenset(tenant.budget.model_fields_set),
                )
        return cls(default, tenants)

    def report(self) -> list[dict[str, Any]]:
        """Every budget as plain data (``check --json``'s ``budgets``): the policy's, then each tenant's own, with
        the keys it writes itself (``own``); ``None``: no bound."""
        out = []
        for limits in (self.default, *self.tenants.values()):
            values = {key: getattr(limits, key) for key in BUDGET_KEYS}
            own = [k for k in BUDGET_KEYS if k in limits.own]
            words = []
            for key, value in values.items():
                number = f"{value:g}" if isinstance(value, float) else str(value)
                said = (
                    f"{number} {_UNITS[key]}"
                    if value is not None
                    else f"no bound on {_UNITS[key].removeprefix('s of ')}"
                )
                words.append(said + (" (its own)" if limits.source != "budget" and key in own else ""))
            out.append({"key": limits.source, **values, "own": own, "text": ", ".join(words)})
        return out

    def limits(self, tenant: str) -> BudgetLimits:
        """The budgets of a root call of ``tenant``."""
        return self.tenants.get(tenant, self.default)

    def open(self, tenant: str, now: float, root: str = "") -> CallTreeBudget:
        """A new budget for a root call of ``tenant`` starting at ``now``."""
        return CallTreeBudget(self.tenants.get(tenant, self.default), tenant, now, root)  # as limits() says


def budget_result(exhaustion: Exhaustion, text: str) -> ToolResult:
    """The ``error`` result of work ``exhaustion`` refused or stopped, saying ``text``; metadata ``portal_error``
    (:data:`BUDGET_KIND`) and ``budget`` (which one ran out)."""
    result = ToolResult("error", summary=BUDGET_KIND, data=text)
    return result.with_meta("portal_error", BUDGET_KIND).with_meta("budget", exhaustion.budget)


def trace_exhaustion(trace: TraceRecorder, budget: CallTreeBudget, exhaustion: Exhaustion, **where: Any) -> None:
    """Record ``limit_hit`` for ``exhaustion`` the first time its budget ran out in ``budget``'s tree (``where``:
    the agent, toolbox, session at which it did)."""
    if budget.first_report(exhaustion):
        trace.record(
            "limit_hit",
            limit=exhaustion.key,
            value=exhaustion.limit,
            tenant=budget.tenant,
            root_call_id=budget.root or None,
            used=budget.used(),
            **where,
        )
