"""The portal: the one path every tool call takes, from a frontend or from inside a worker.

Checks, in order (DESIGN.md "Call context and the portal"):

1. the tool exists (``PortalToolNotFound``);
2. the caller may call it: a worker may call only the tools its toolbox's ``AllowedTools`` lists, a frontend caller
   only the tools of its agent set (``PortalToolNotAllowed``, with the allowed list);
3. the arguments validate against the tool's JSON schema (``PortalInvalidArguments``, the seed's text);
4. the depth stays within ``max_call_depth`` (a depth error that shows the call stack);
5. the session's limits (total calls, concurrent calls) hold;
6. the call tree's budget (:mod:`supervisor.calls._budget`: tool calls, wall time) has room: a root call (an origin
   without a budget) opens its tree's budget from the policy, every nested call charges its root's;

then it dispatches to the toolbox's runner and records ``call_start``/``call_end``. Every refusal is an ``error``
result whose text says what was refused and why; nothing here raises for a caller's mistake.

A dispatched call that could not run (its worker died, restarted or was disabled, the call ran past its wall time,
or an unexpected exception behind the portal, which is answered rather than raised) carries the seed's
``PortalExecutionError`` kind in its metadata ``portal_error`` (:func:`~supervisor._errors.execution_error`), as the
refusals above carry theirs. A toolbox's own refusal of a call is its result, not an execution error. A dispatched
call still running when its tree's wall time ends is cancelled and ends with the budget's ``CallTreeBudget`` result.
"""

from __future__ import annotations

import itertools
import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

from supervisor._errors import execution_error
from supervisor.sessions import LOCAL_TENANT, remember
from supervisor.tools import ValidationConfig, format_validation_errors, relax
from toolboxes import ToolResult, encode, json_problem

from ._budget import BUDGET_KIND, BudgetPolicy, budget_result, trace_exhaustion
from ._unloaded import unloaded_note

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from supervisor.traces import TraceRecorder
    from toolboxes import ProgressUpdate

    from ._budget import CallTreeBudget, Exhaustion
    from ._registry import RegisteredTool, ToolRegistry

__all__ = ["CallOrigin", "Portal", "SessionLimits", "StackEntry", "nested_origin"]


#: Bounds on a call's arguments: they must be plain JSON (no bytes, sets or NaN from the Python API), nested at
#: most this deep, with at most this many values and this many bytes once encoded for the worker.
MAX_ARGS_DEPTH = 100
MAX_ARGS_VALUES = 1_000_000
MAX_ARGS_BYTES = 16 * 1024 * 1024


def _arguments_problem(args: Any) -> str | None:
    """Why ``args`` cannot be sent to a worker, or ``None``."""
    problem, _ = json_problem(args, max_depth=MAX_ARGS_DEPTH, max_nodes=MAX_ARGS_VALUES)
    if problem:
        return problem
    try:
        size = len(encode(args))
    except (ValueError, TypeError, OverflowError) as exc:
        return f"cannot be encoded ({exc})"
    if size > MAX_ARGS_BYTES:
        return f"take {size} bytes, more than the limit of {MAX_ARGS_BYTES}"
    return None


@dataclass(frozen=True)
class StackEntry:
    """One frame of the call stack: which agent's call of which tool, at which depth."""

    agent: str
    tool: str
    call_id: str
    depth: int


@dataclass(frozen=True)
class CallOrigin:
    """Who is calling: the session ids, the depth and stack so far, and what the caller may call.

    ``allowed`` ``None`` means "every tool of the agent's name space" (a frontend caller).
    ``agent_scope``: the agent whose name space the call's tool name is found in (a frontend session bound to one
    agent, a worker's portal request: its toolbox's agent, a sub-agent's loop: that agent); another agent's tools
    do not exist for it (refused as not found, never as not allowed, so their names are not revealed). ``None``:
    the first agent (load order) that has a tool of that name (the Python API without an agent).
    ``session_id`` is a session of the store (a frontend's is resolved per agent by the supervisor, see
    :mod:`supervisor.sessions._ids`), ``tenant`` its owner's tenant; ``conversation_id`` and ``turn_id`` are the
    call's (the client's when it sent them, else made by the frontend).
    """

    session_id: str = "default"
    conversation_id: str = ""
    turn_id: str = ""
    agent_id: str = ""
    tenant: str = LOCAL_TENANT
    depth: int = 0
    stack: tuple[StackEntry, ...] = ()
    allowed: frozenset[str] | None = None
    parent_call_id: str | None = None
    caller: str = "frontend"
    agent_scope: str | None = None
    #: where this call's progress goes (a frontend whose client asked for it); ``None``: nowhere. Nested calls
    #: (a sub-agent's tool calls, a toolbox's portal calls) do not inherit it: the sub-agent reports its steps.
    progress: Callable[[ProgressUpdate], None] | None = field(default=None, compare=False)
    #: the budget of the call tree this call is part of, shared by all its calls; ``None``: a root call (the
    #: portal opens its tree's budget from the policy). Only the supervisor sets it (never a client or a worker).
    budget: CallTreeBudget | None = field(default=None, compare=False)


def nested_origin(
    origin: CallOrigin, entry: StackEntry, agent_id: str, budget: CallTreeBudget | None = None
) -> CallOrigin:
    """The origin of what the call ``entry`` (made from ``origin``) does in turn: one level deeper, ``entry`` on
    the stack, the call its parent, ``agent_id`` acting, ``budget`` its tree's (default: ``origin``'s); everything
    else as ``origin`` has it. Each field is named (``dataclasses.replace`` costs several times as much on the call
    path); a test checks that none is missed."""
    return CallOrigin(
        session_id=origin.session_id,
        conversation_id=origin.conversation_id,
        turn_id=origin.turn_id,
        agent_id=agent_id,
        tenant=origin.tenant,
        depth=entry.depth,
        stack=(*origin.stack, entry),
        allowed=origin.allowed,
        parent_call_id=entry.call_id,
        caller=origin.caller,
        agent_scope=origin.agent_scope,
        progress=origin.progress,
        budget=budget or origin.budget,
    )


#: Arguments larger than this (as JSON) are not copied into the trace; their size is recorded instead.
MAX_TRACED_ARGS_CHARS = 16 * 1024


def _args_json(args: Any) -> str | None:
    """Checked arguments as compact JSON text, encoded once for the trace and the session store; ``None`` when
    they are not JSON or not valid Unicode (the trace's own cleaning handles those)."""
    try:
        text = _ARGS_ENCODER.encode(args)
        if not text.isascii():  # O(1) for str; only text beyond ASCII can hold a lone surrogate
            text.encode("utf-8")
    except (TypeError, ValueError, RecursionError, UnicodeEncodeError):
        return None
    return text


_ARGS_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _traced_args(args: Any) -> Any:
    """``args`` for a ``call_start`` record: as given when small, else a note of their size.

    Path-like fields of small inputs stay available to the trace report's redundant-read detection.
    """
    try:
        size = len(json.dumps(args, default=repr))
    except (TypeError, ValueError, RecursionError):
        return {"_omitted": "arguments that are not JSON"}
    if size <= MAX_TRACED_ARGS_CHARS:
        return args
    return {"_omitted": f"{size} characters of arguments (more than {MAX_TRACED_ARGS_CHARS} are not traced)"}


@dataclass
class SessionLimits:
    """Per-session bounds: ``max_calls`` in total and ``max_concurrent`` at once (``None``: unbounded)."""

    max_calls: int | None = None
    max_concurrent: int | None = None


@dataclass
class _SessionUsage:
    calls: int = 0
    in_flight: int = 0
    closed: bool = False  # the session was closed while a call ran: forgotten when its last call ends


@dataclass
class Portal:
    """Decides and dispatches tool calls."""

    registry: ToolRegistry
    trace: TraceRecorder
    max_call_depth: int = 4
    session_limits: SessionLimits = field(default_factory=SessionLimits)
    #: what a root call's tree may use (the policy's ``budget``, per tenant); the default bounds nothing
    budgets: BudgetPolicy = field(default_factory=BudgetPolicy)
    #: called with (tool, result) after each call, to store attachments etc.
    postprocess: Callable[[RegisteredTool, ToolResult], ToolResult] | None = None
    #: called right before a call is dispatched, with the tool and the call id; the function it returns is
    #: applied to the result after ``postprocess`` (the supervisor's limit notes, ``supervisor.workers._limit_notes``,
    #: and kernel denials, ``supervisor.workers._kernel_audit``); it may return an awaitable of the result
    watch: Callable[[RegisteredTool, str], Callable[[ToolResult], Any]] | None = None
    #: told of every dispatched call once it ended (keywords: call_id, tool, args, args_json (the arguments as JSON
    #: text, or None), origin, result or None when cancelled, started (Unix time), duration_s), to record it in the
    #: session store; must not raise
    on_call_end: Callable[..., None] | None = None
    #: awaited once a frontend's (depth 0) call is recorded, before its result is handed back: when it returns, the
    #: call's records (the trace's ``call_end``, the session store's row) are durable (``calls._group_commit``:
    #: calls ending together share one flush). ``None``: ``call_end`` is written at once and nothing is awaited.
    #: ``alone=True`` when no other frontend call is running (nobody to share the flush with: it may flush at once).
    commit: Callable[..., Awaitable[None]] | None = None
    #: told of a session closed with :meth:`forget_session` once no call of it runs (to drop what others keep of it)
    on_session_closed: Callable[[str], None] | None = None
    #: entries added to the context a call's toolbox gets (the skills a session enabled, for a skills toolbox)
    call_context: Callable[[RegisteredTool, CallOrigin], dict[str, Any]] | None = None
    #: the seed's ``ValidationConfig`` of a tool (the policy's ``validation``), asked only for arguments that
    #: failed the strict check; ``None``: strict for every tool
    validation: Callable[[RegisteredTool], ValidationConfig] | None = None
    #: awaited with (tool name, the caller's agent scope) before a call of a name the registry does not know: a
    #: supervisor that starts toolboxes only as calls need them (``Supervisor.open(start="on_demand")``) starts
    #: those that could serve it; ``None``: every toolbox runs already
    starter: Callable[[str, str | None], Awaitable[None]] | None = None
    _ids: Any = field(default_factory=lambda: itertools.count(1))
    #: sessions with a call running; the call counts of idle ones only matter under ``max_calls`` and are kept
    #: until the session is closed (:meth:`forget_session`), at most for the most recent
    #: :data:`~supervisor.sessions.MAX_REMEMBERED_SESSIONS` (one forgotten starts at 0, as a new session does: no
    #: caller gains what opening a session would not give it)
    _busy: dict[str, _SessionUsage] = field(default_factory=dict)
    _idle: dict[str, _SessionUsage] = field(default_factory=dict)
    #: frontends' (depth 0) calls dispatched whose records are not yet committed
    _uncommitted: int = 0

    def _usage(self, session_id: str) -> _SessionUsage:
        usage = self._busy.get(session_id) or self._idle.pop(session_id, None) or _SessionUsage()
        self._busy[session_id] = usage
        return usage

    def _release(self, session_id: str, usage: _SessionUsage) -> None:
        usage.in_flight -= 1
        if usage.in_flight:
            return
        del self._busy[session_id]
        if usage.closed:
            if self.on_session_closed is not None:
                self.on_session_closed(session_id)
        elif self.session_limits.max_calls is not None:
            remember(self._idle, session_id, usage)

    def forget_session(self, session_id: str) -> None:
        """The session ``session_id`` was closed: drop its call counts and tell :attr:`on_session_closed`, now or,
        when calls of it are running, once the last of them ended (and was recorded). A session of that id used
        again starts at 0, as a new one does."""
        self._idle.pop(session_id, None)
        busy = self._busy.get(session_id)
        if busy is not None:
            busy.closed = True
        elif self.on_session_closed is not None:
            self.on_session_closed(session_id)

    def _refuse(self, origin: CallOrigin, name: str, kind: str, message: str) -> ToolResult:
        self.trace.record(
            "portal_refusal",
            tool=name,
            kind=kind,
            reason=message,
            caller=origin.caller,
            session=origin.session_id,
            depth=origin.depth + 1,
            parent_call_id=origin.parent_call_id,
            # the frontend call whose tree this is (none for a root call): its session hears a limit's refusal
            root_call_id=(origin.budget.root or None) if origin.budget is not None else None,
        )
        return ToolResult("error", summary=kind, data=message).with_meta("portal_error", kind)

    def _over_budget(self, origin: CallOrigin, name: str, budget: CallTreeBudget, spent: Exhaustion) -> ToolResult:
        """The refusal of a call its tree's budget has no room for (traced: ``portal_refusal``, and ``limit_hit``
        the first time that budget ran out in the tree)."""
        where = {"agent": origin.agent_id or None, "session": origin.session_id, "tool": name}
        trace_exhaustion(self.trace, budget, spent, **where)
        message = (
            f"Tool call '{name}' refused: {spent.message()}; no more tools can be called in it. "
            "Finish with what you have."
        )
        return self._refuse(origin, name, BUDGET_KIND, message).with_meta("budget", spent.budget)

    def check(self, name: str, args: Any, origin: CallOrigin) -> tuple[RegisteredTool, Any, list[str]] | ToolResult:
        """Run checks 1-4; return the tool to call with the arguments to send it and the notes of what the tool's
        ``ValidationConfig`` changed in them (``supervisor.tools._relax``), or the refusal result."""
        scope = origin.agent_scope
        tool = self.registry.get(name, scope)
        if tool is None and origin.allowed is not None and self.registry.get(name) is not None:
            # Another agent's tool, asked for by a worker or an agent loop (which name what they may call): not
            # allowed, as the seed says for a tool outside the caller's set. A frontend is told "not found".
            allowed = ", ".join(sorted(origin.allowed)) or "none"
            return self._refuse(
                origin,
                name,
                "PortalToolNotAllowed",
                f"Tool '{name}' is not allowed for {origin.caller}. Allowed tools: {allowed}.",
            )
        if tool is None:
            known = sorted(self.registry.names(scope) if origin.allowed is None else origin.allowed)
            shown = ", ".join(known[:40]) + (", ..." if len(known) > 40 else "")
            note = unloaded_note(name, self.registry.runners, scope, self.registry.unloaded)
            return self._refuse(
                origin,
                name,
                "PortalToolNotFound",
                f"Tool not found: '{name}'. {note + ' ' if note else ''}Available tools: {shown or 'none'}.",
            )
        if origin.allowed is not None and name not in origin.allowed:
            allowed = ", ".join(sorted(origin.allowed)) or "none"
            return self._refuse(
                origin,
                name,
                "PortalToolNotAllowed",
                f"Tool '{name}' is not allowed for {origin.caller}. Allowed tools: {allowed}.",
            )
        problem = _arguments_problem(args)
        if problem:
            return self._refuse(
                origin,
                name,
                "PortalInvalidArguments",
                f"Tool call validation failed for '{name}': the arguments {problem}. Send a smaller JSON object.",
            )
        errors = tool.validator.errors(args)
        notes: list[str] = []
        if errors:
            config = self.validation(tool) if self.validation is not None else None
            if config is not None and config.relaxed:
                relaxed = relax(tool.validator, args, config)
                errors, args, notes = relaxed.errors, relaxed.args, relaxed.notes
            if errors:
                return self._refuse(origin, name, "PortalInvalidArguments", format_validation_errors(name, errors))
        depth = origin.depth + 1
        if depth > self.max_call_depth:
            frames = " -> ".join(f"{e.tool} (agent {e.agent or '-'}, depth {e.depth})" for e in origin.stack)
            return self._refuse(
                origin,
                name,
                "PortalDepthExceeded",
                f"Call depth limit of {self.max_call_depth} reached: calling '{name}' would be "
                f"depth {depth}. Call stack: {frames or '(empty)'} -> {name}.",
            )
        return tool, args, notes

    async def call(self, name: str, args: Any, origin: CallOrigin) -> ToolResult:
        """Check and run one call; always returns a result."""
        return (await self.call_traced(name, args, origin))[0]

    async def call_traced(self, name: str, args: Any, origin: CallOrigin) -> tuple[ToolResult, str]:
        """:meth:`call`, also answering the call's trace id (its ``call_id`` in the trace; ``""`` when the call
        was refused before it was dispatched, which only a ``portal_refusal`` record shows). With a
        :attr:`starter`, a name the registry does not know first has the toolboxes that could serve it started."""
        if self.starter is not None and self.registry.get(name, origin.agent_scope) is None:
            await self.starter(name, origin.agent_scope)
        checked = self.check(name, args, origin)
        if isinstance(checked, ToolResult):
            return checked, ""
        tool, args, notes = checked
        usage = self._busy.get(origin.session_id) or self._idle.get(origin.session_id) or _SessionUsage()
        limits = self.session_limits
        if limits.max_calls is not None and usage.calls >= limits.max_calls:
            return self._refuse(
                origin,
                name,
                "SessionLimit",
                f"Session {origin.session_id} reached its limit of {limits.max_calls} tool calls.",
            ), ""
        if limits.max_concurrent is not None and usage.in_flight >= limits.max_concurrent:
            return self._refuse(
                origin,
                name,
                "SessionLimit",
                f"Session {origin.session_id} already has {usage.in_flight} calls running "
                f"(limit {limits.max_concurrent}); wait for one to finish.",
            ), ""
        now = trio.current_time()
        budget = origin.budget or self.budgets.open(origin.tenant, now)  # none: a root call, its tree starts now
        spent = budget.charge_tool_call(now)
        if spent is not None:
            return self._over_budget(origin, name, budget, spent), ""
        usage = self._usage(origin.session_id)
        usage.calls += 1
        usage.in_flight += 1
        call_id = f"c{next(self._ids)}"
        if origin.budget is None:
            budget.root = call_id
        depth = origin.depth + 1
        entry = StackEntry(tool.agent, name, call_id, depth)
        inner = nested_origin(origin, entry, origin.agent_id or tool.agent, budget)
        args_json = _args_json(args)
        start_fields = {
            "call_id": call_id,
            "parent_call_id": origin.parent_call_id,
            "tool": name,
            "toolbox": tool.toolbox,
            "agent": tool.agent,
            "namespace": tool.namespace,
            "session": origin.session_id,
            "conversation": origin.conversation_id,
            "turn": origin.turn_id,
            "depth": depth,
            "caller": origin.caller,
        }
        if args_json is not None and len(args_json) <= MAX_TRACED_ARGS_CHARS:
            self.trace.record_raw("call_start", {"args": args_json}, **start_fields)
        else:
            self.trace.record("call_start", **start_fields, args=_traced_args(args))
        start = time.perf_counter()
        started = time.time()
        result: ToolResult | None = None
        committed = self.commit if origin.depth == 0 else None  # nested calls' records go with their caller's
        if committed:
            self._uncommitted += 1
        try:
            ctx = {
                "session_id": origin.session_id,
                "conversation_id": origin.conversation_id,
                "turn_id": origin.turn_id,
                "agent_id": inner.agent_id,
                "depth": depth,
                "call_id": call_id,
            }
            if self.call_context is not None:
                ctx.update(self.call_context(tool, origin))
            if origin.progress is not None:
                ctx["progress"] = True  # the worker relays the tool's progress (toolboxes/_progress.py)
            # The tree's wall time bounds every call of it, also those a worker's portal request runs (they are
            # not inside the root call's task): each dispatch is cancelled at the tree's deadline.
            with trio.CancelScope(deadline=budget.deadline) as scope:
                try:
                    finish = self.watch(tool, call_id) if self.watch is not None else None
                    result = await tool.runner.call(tool.local_name, args, ctx, origin=inner)
                    for note in notes:
                        result = result.with_meta("validation_warning", note)
                    if self.postprocess is not None:
                        result = self.postprocess(tool, result)
                    if finish is not None:
                        finished = finish(result)
                        result = finished if isinstance(finished, ToolResult) else await finished
                except Exception as exc:  # a bug behind the portal: the caller gets an answer, the trace the error
                    result = execution_error(f"Tool '{name}' failed to execute: {type(exc).__name__}: {exc}"[:2000])
            if scope.cancelled_caught or result is None:
                late = budget.out_of_time()  # only the tree's deadline cancels this scope
                trace_exhaustion(self.trace, budget, late, agent=inner.agent_id, session=origin.session_id, tool=name)
                result = budget_result(late, f"Tool '{name}' was stopped: {late.message()}.")
        finally:
            record = self.trace.record_buffered if committed else self.trace.record
            record(
                "call_end",
                call_id=call_id,
                tool=name,
                toolbox=tool.toolbox,
                agent=tool.agent,
                status=result.status if result else "error",
                summary=result.summary if result else "cancelled",
                duration_s=round(time.perf_counter() - start, 6),
                session=origin.session_id,
                metadata=[list(p) for p in result.metadata] if result else [],
            )
            if self.on_call_end is not None:
                self.on_call_end(
                    call_id=call_id,
                    tool=tool,
                    args=args,
                    args_json=args_json,
                    origin=origin,
                    result=result,
                    started=started,
                    duration_s=time.perf_counter() - start,
                )
            self._release(origin.session_id, usage)  # last: a session closed meanwhile is forgotten after its record
            if committed:
                self._uncommitted -= 1
        if committed:
            await committed(alone=not self._uncommitted)
        return result, call_id
