"""The portal: the one path every tool call takes, from a frontend or from inside a worker, as a pipeline of stages.

:meth:`Portal.call_traced` runs them in this order, each in its own module:

1. **check** (:mod:`~supervisor.calls._checks`): the tool exists, the caller may call it, the arguments are valid,
   the depth holds; else a refusal;
2. **limits** (:mod:`~supervisor.calls._ledger`, :mod:`~supervisor.calls._budget`): the session's limits (total,
   concurrent) hold and the call tree's budget (tool calls, wall time) has room: a root call (an origin without a
   budget) opens its tree's budget from the policy, every nested call charges its root's; the call is counted;
3. **trace**: ``call_start`` (:mod:`~supervisor.calls._call_records`);
4. **watches**: each watch (limit notes, kernel denials: ``supervisor.workers``) begins before the call is sent;
5. **dispatch**: the tool's runner (a toolbox's worker, a sub-agent's loop), within the tree's wall time;
6. **output** (:mod:`~supervisor.calls._tool_output`): validation notes, the output cap, the output schema, the
   attachments stored; then each watch explains the result, in order;
7. **record**: ``call_end``, the session store's row, a skill action's effect on its session's tools;
8. **commit**: a frontend's call is answered once its records are durable (calls ending together share a flush).

Every refusal is an ``error`` result whose text says what was refused and why (``portal_refusal`` traced); nothing
here raises for a caller's mistake. A dispatched call that could not run (its worker died, restarted or was
disabled, it ran past its wall time, an unexpected exception behind the portal, answered rather than raised) carries
the seed's ``PortalExecutionError`` kind in metadata ``portal_error`` (:func:`~supervisor._errors.execution_error`);
a toolbox's own refusal is its result. A call still running when its tree's wall time ends is cancelled and ends
with the budget's ``CallTreeBudget`` result.

A :class:`Portal` is one policy generation's (its :class:`~supervisor.calls._checks.CallPolicy`); what outlives a
reload (the registry, the ledger, the records, the attachments, the watches) is its :class:`CallServices`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import trio

from supervisor._errors import execution_error
from supervisor.sessions import SessionStore, SessionToolViews
from toolboxes import ToolResult

from ._attachments import AttachmentStore
from ._budget import BUDGET_KIND, budget_result, trace_exhaustion
from ._call_records import CallRecords, args_json
from ._checks import CallPolicy, Refusal, check_call
from ._frontend_sessions import FrontendSessions
from ._ledger import CallLedger
from ._origin import StackEntry, nested_origin
from ._tool_output import finished_output

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence

    from supervisor.traces import TraceRecorder

    from ._budget import CallTreeBudget, Exhaustion
    from ._origin import CallOrigin
    from ._registry import RegisteredTool, ToolRegistry

__all__ = ["CallServices", "Portal", "Starter", "Watch"]


#: how much later than its bound a dispatch may end on a loaded loop before the tree's deadline needs a scope of its
#: own (both are deadlines on the same clock and loop: the dispatch's own come first)
_DEADLINE_SLACK_S = 5.0


class _NoDeadline:
    """The cancel scope of a dispatch its tree's deadline cannot reach: nothing to cancel."""

    cancelled_caught = False

    def __enter__(self) -> _NoDeadline:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


_NO_DEADLINE = _NoDeadline()


class Watch(Protocol):
    """Something that explains a call's result from outside the worker (its limits hit, the kernel's denials)."""

    #: the longest the function :meth:`begin` returns may wait before it answers (seconds)
    longest_wait_s: float

    def begin(self, tool: Any, call_id: str) -> Callable[[ToolResult], ToolResult | Awaitable[ToolResult]]:
        """Note the call ``call_id`` of ``tool`` before it is sent; the returned function explains its result."""
        ...


class Starter(Protocol):
    """Starts toolboxes as calls need them (a supervisor opened with ``start="on_demand"``)."""

    async def start_for(self, name: str, scope: str | None) -> None:
        """Start what could serve the tool ``name`` of agent ``scope`` (any agent's: ``None``); return once the
        registry knows their tools."""
        ...


@dataclass(frozen=True)
class CallServices:
    """What every generation's portal shares, made once per supervisor (:meth:`make`): the tool registry, the
    frontends' session names, the ledger of calls and sessions, the records, the attachment store, the session
    tool views and the watches."""

    registry: ToolRegistry
    trace: TraceRecorder
    frontends: FrontendSessions
    ledger: CallLedger
    records: CallRecords
    attachments: AttachmentStore
    session_tools: SessionToolViews
    watches: tuple[Watch, ...] = ()
    #: the longest the watches' explanations of one result may wait, together
    watches_wait_s: float = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "watches_wait_s", sum(w.longest_wait_s for w in self.watches))

    @classmethod
    def make(
        cls,
        registry: ToolRegistry,
        trace: TraceRecorder,
        *,
        state_dir: str,
        sessions: SessionStore | None = None,
        media_limits: Mapping[str, int] | None = None,
        watches: Sequence[Watch] = (),
    ) -> CallServices:
        """The call services over the session store ``sessions`` (``None``: nothing is kept on disk; the session
        tool views then live in memory) and the attachments of ``state_dir`` (``media_limits``: the default limits
        of the store; a portal passes its policy's)."""
        views = SessionToolViews(sessions if sessions is not None else SessionStore(":memory:"))
        frontends = FrontendSessions(sessions)
        return cls(
            registry=registry,
            trace=trace,
            frontends=frontends,
            ledger=CallLedger(sessions),
            records=CallRecords(trace, sessions, views, frontends),
            attachments=AttachmentStore(state_dir, dict(media_limits or {})),
            session_tools=views,
            watches=tuple(watches),
        )


class Portal:
    """Decides and dispatches tool calls under one generation's ``rules``; ``starter``: starts toolboxes on
    demand (``None``: every toolbox runs already)."""

    def __init__(self, services: CallServices, rules: CallPolicy | None = None, starter: Starter | None = None):
        self.services = services
        self.rules = rules if rules is not None else CallPolicy()
        self.starter = starter

    @property
    def budgets(self) -> Any:
        """The policy's call-tree budgets (what a root call outside the portal, ``agents-supervise run``, opens)."""
        return self.rules.budgets

    def forget_session(self, session_id: str) -> None:
        """The session ``session_id`` was closed (:meth:`~supervisor.calls._ledger.CallLedger.forget_session`)."""
        self.services.ledger.forget_session(session_id)

    async def call(self, name: str, args: Any, origin: CallOrigin) -> ToolResult:
        """Check and run one call; always returns a result."""
        return (await self.call_traced(name, args, origin))[0]

    async def call_traced(self, name: str, args: Any, origin: CallOrigin) -> tuple[ToolResult, str]:
        """:meth:`call`, also answering the call's trace id (its ``call_id`` in the trace; ``""`` when the call
        was refused before it was dispatched, which only a ``portal_refusal`` record shows). With a
        :attr:`starter`, a name the registry does not know first has the toolboxes that could serve it started."""
        services, rules = self.services, self.rules
        if self.starter is not None and services.registry.get(name, origin.agent_scope) is None:
            await self.starter.start_for(name, origin.agent_scope)
        # 1. check
        checked = check_call(services.registry, rules, name, args, origin)
        if isinstance(checked, Refusal):
            return self._refused(origin, name, checked), ""
        tool, args = checked.tool, checked.args
        # 2. limits: the session's, then the tree's budget; the call counted
        over = services.ledger.refusal(origin.session_id, rules.session_limits)
        if over is not None:
            return self._refused(origin, name, Refusal("SessionLimit", over)), ""
        now = trio.current_time()
        budget = origin.budget or rules.budgets.open(origin.tenant, now)  # none: a root call, its tree starts now
        spent = budget.charge_tool_call(now)
        if spent is not None:
            return self._over_budget(origin, name, budget, spent), ""
        call_id, usage = services.ledger.open(origin.session_id)
        if origin.budget is None:
            budget.root = call_id
        depth = origin.depth + 1
        inner = nested_origin(
            origin, StackEntry(tool.agent, name, call_id, depth), origin.agent_id or tool.agent, budget
        )
        # 3. trace
        text = args_json(args)
        services.records.start(call_id, name, tool, origin, depth, args, text)
        start, started = time.perf_counter(), time.time()
        result: ToolResult | None = None
        frontend = origin.depth == 0  # nested calls' records go with their caller's (their answers are not a client's)
        if frontend:
            services.ledger.uncommitted += 1
        try:
            # The tree's wall time bounds every call of it, also those a worker's portal request runs (they are
            # not inside the root call's task): each dispatch is cancelled at the tree's deadline. A dispatch
            # bound to end well before it (a worker's call: its wall time and the cancel's grace, then the
            # watches' waits) cannot be running then, and gets no cancel scope it would never use.
            if budget.deadline - now > tool.ends_within_s + services.watches_wait_s + _DEADLINE_SLACK_S:
                scope: trio.CancelScope | _NoDeadline = _NO_DEADLINE
            else:
                scope = trio.CancelScope(deadline=budget.deadline)
            with scope:
                try:
                    result = await self._run(tool, args, call_id, depth, checked.notes, origin, inner)
                except Exception as exc:  # a bug behind the portal: the caller gets an answer, the trace the error
                    result = execution_error(f"Tool '{name}' failed to execute: {type(exc).__name__}: {exc}"[:2000])
            if scope.cancelled_caught or result is None:
                late = budget.out_of_time()  # only the tree's deadline cancels this scope
                trace_exhaustion(
                    services.trace, budget, late, agent=inner.agent_id, session=origin.session_id, tool=name
                )
                result = budget_result(late, f"Tool '{name}' was stopped: {late.message()}.")
        finally:
            # 7. record
            services.records.end(
                call_id,
                name,
                tool,
                origin,
                result,
                args=args,
                text=text,
                started=started,
                duration_s=time.perf_counter() - start,
                buffered=frontend,
            )
            services.ledger.close(origin.session_id, usage, rules.session_limits)  # last: after its record
            if frontend:
                services.ledger.uncommitted -= 1
        # 8. commit
        if frontend:
            await services.records.group.commit(alone=not services.ledger.uncommitted)
        return result, call_id

    async def _run(
        self,
        tool: RegisteredTool,
        args: Any,
        call_id: str,
        depth: int,
        notes: tuple[str, ...],
        origin: CallOrigin,
        inner: CallOrigin,
    ) -> ToolResult:
        """Stages 4-6: the watches begin, the call is dispatched, its output finished, the watches explain it."""
        services, rules = self.services, self.rules
        finishers = [watch.begin(tool, call_id) for watch in services.watches]
        ctx: dict[str, Any] = {
            "session_id": origin.session_id,
            "conversation_id": origin.conversation_id,
            "turn_id": origin.turn_id,
            "agent_id": inner.agent_id,
            "depth": depth,
            "call_id": call_id,
            **services.session_tools.call_context(tool, origin.session_id),
        }
        if origin.progress is not None:
            ctx["progress"] = True  # the worker relays the tool's progress (toolboxes/_progress.py)
        result = await tool.runner.call(tool.local_name, args, ctx, origin=inner)
        result = finished_output(
            tool,
            result,
            notes,
            output_bytes=rules.output_bytes,
            attachments=services.attachments,
            media_limits=rules.media_limits,
        )
        for finish in finishers:
            explained = finish(result)
            result = explained if isinstance(explained, ToolResult) else await explained
        return result

    def _refused(self, origin: CallOrigin, name: str, refusal: Refusal) -> ToolResult:
        """The ``error`` result of ``refusal`` (traced: ``portal_refusal``)."""
        self.services.trace.record(
            "portal_refusal",
            tool=name,
            kind=refusal.kind,
            reason=refusal.message,
            caller=origin.caller,
            session=origin.session_id,
            depth=origin.depth + 1,
            parent_call_id=origin.parent_call_id,
            # the frontend call whose tree this is (none for a root call): its session hears a limit's refusal
            root_call_id=(origin.budget.root or None) if origin.budget is not None else None,
        )
        result = ToolResult("error", summary=refusal.kind, data=refusal.message).with_meta("portal_error", refusal.kind)
        for key, value in refusal.meta:
            result = result.with_meta(key, value)
        return result

    def _over_budget(self, origin: CallOrigin, name: str, budget: CallTreeBudget, spent: Exhaustion) -> ToolResult:
        """The refusal of a call its tree's budget has no room for (traced: ``portal_refusal``, and ``limit_hit``
        the first time that budget ran out in the tree)."""
        where = {"agent": origin.agent_id or None, "session": origin.session_id, "tool": name}
        trace_exhaustion(self.services.trace, budget, spent, **where)
        message = (
            f"Tool call '{name}' refused: {spent.message()}; no more tools can be called in it. "
            "Finish with what you have."
        )
        return self._refused(origin, name, Refusal(BUDGET_KIND, message, (("budget", spent.budget),)))
