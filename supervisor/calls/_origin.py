"""Who is calling: a call's origin (its session ids, depth, stack, what it may call, its tree's budget).

Every call carries one :class:`CallOrigin` through the portal (DESIGN.md "Call context and the portal"); what a call
does in turn (a toolbox's portal request, a sub-agent's tool calls) gets :func:`nested_origin`'s, one level deeper.
Only the supervisor makes origins: a client's ids are checked first (:func:`~supervisor.sessions.client_id`), a
worker's request gets its origin from the call it is part of, never from the message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from supervisor.sessions import LOCAL_TENANT
from supervisor.workers import ToolboxRunner, Worker

if TYPE_CHECKING:
    from collections.abc import Callable

    from toolboxes import ProgressUpdate

    from ._budget import CallTreeBudget

__all__ = ["CallOrigin", "CallRunner", "CallWorker", "StackEntry", "nested_origin"]


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


#: a toolbox's runner and worker as the supervisor holds them: each call they run carries its :class:`CallOrigin`,
#: which a request or a progress event of the call finds again (typed end to end, never ``Any``)
CallRunner = ToolboxRunner[CallOrigin]
CallWorker = Worker[CallOrigin]
