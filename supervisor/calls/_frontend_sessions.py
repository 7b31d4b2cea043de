"""The sessions of frontends (MCP connections, the CLI, the Python API): from a frontend's session name and the
agent it acts as to a root session of the store, and the call's conversation and turn ids.

A frontend acts as the agent whose tool it calls (the agent whose name space the tool's name is found in: a
session bound to one agent always acts as that agent; a sub-agent's ``io_prompt_agent_<slug>`` is the tool of the
agent that names the sub-agent, see :mod:`supervisor.calls._registry`); its session name with that agent (and the
tenant) is one root session (:mod:`supervisor.sessions._ids`). A call's conversation id is the client's when it
sent one, else its session's (made when the session was created, so stable for the session's life, across
supervisor runs for a named session); its turn id is the client's, else a new one per call.
"""

from __future__ import annotations

import itertools
import uuid
from typing import TYPE_CHECKING

from supervisor.sessions import LOCAL_TENANT, Owner, SessionStore, client_id, new_id, root_session_id

from ._origin import CallOrigin

if TYPE_CHECKING:
    from collections.abc import Callable

    from toolboxes import ProgressUpdate

__all__ = ["FrontendSessions"]

#: Frontend sessions remembered at most (their root sessions, conversations and names) when none is closed.
MAX_FRONTEND_NAMES = 4096


class TurnIds:
    """Fresh turn ids, UUID-shaped: a random prefix drawn once (70 random bits) and a counter, so that a call does
    not pay for a random UUID of its own. Ids of two supervisors differ by their prefixes; one supervisor never
    repeats one (the counter would need 2**48 calls to wrap)."""

    def __init__(self) -> None:
        self._prefix = str(uuid.uuid4())[:24]
        self._counter = itertools.count(1)

    def next(self) -> str:
        return f"{self._prefix}{next(self._counter) & 0xFFFFFFFFFFFF:012x}"


class FrontendSessions:
    """Resolves frontends' session names for one supervisor (``store`` ``None``: nothing is kept on disk).

    What it keeps per frontend session (the root sessions it has with each agent, their conversations, the name
    of each) goes when the frontend closes the session (:meth:`close`); a frontend that never closes its sessions
    leaves at most :data:`MAX_FRONTEND_NAMES` of them here, the oldest forgotten first (a forgotten one is
    resolved again from the store, with the same session and conversation ids)."""

    def __init__(self, store: SessionStore | None) -> None:
        self.store = store
        #: the session name of calls that name none (Python API): unique to this supervisor
        self.default_name = f"api-{new_id()}"
        self._names: dict[str, str] = {}  # root session id -> the frontend's name for it
        #: (tenant, name) -> agent -> open()'s answer for that agent
        self._opened: dict[tuple[str, str], dict[str, tuple[str, str]]] = {}
        self._turns = TurnIds()

    def open(self, name: str | None, agent: str, *, tenant: str = LOCAL_TENANT) -> tuple[str, str]:
        """The root session the frontend session ``name`` (``None``: :attr:`default_name`) has with ``agent``, as
        ``(session id, conversation id)``, created unless it exists. Raises ``ValueError`` for a name
        :func:`~supervisor.sessions._ids.client_id` refuses."""
        key = (tenant, self.default_name if name is None else name)
        by_agent = self._opened.get(key)
        known = by_agent.get(agent) if by_agent is not None else None
        if known is not None and (self.store is None or known[0] in self.store.open_roots):
            return known
        name = self.default_name if name is None else client_id(name, "the session name")
        owner = Owner(agent, tenant)
        if self.store is not None:
            session_id, conversation = self.store.open_root(owner, name)
        else:
            session_id, conversation = root_session_id(owner, name), new_id()
        if by_agent is None:
            while len(self._opened) >= MAX_FRONTEND_NAMES:
                self._drop(next(iter(self._opened)))
            by_agent = self._opened[key] = {}
        by_agent[agent] = (session_id, conversation)
        self._names[session_id] = name
        return session_id, conversation

    def close(self, name: str | None, *, tenant: str = LOCAL_TENANT) -> list[str]:
        """The frontend session ``name`` ended: forget it; return the root session ids it had (one per agent it
        called) for the caller to drop their state too. A name never opened (or already forgotten) gives ``[]``."""
        return self._drop((tenant, self.default_name if name is None else name))

    def _drop(self, key: tuple[str, str]) -> list[str]:
        ids = [session_id for session_id, _ in self._opened.pop(key, {}).values()]
        for session_id in ids:
            self._names.pop(session_id, None)
        return ids

    def name_of(self, session_id: str) -> str:
        """The frontend's name for a root session this supervisor opened (else the id itself)."""
        return self._names.get(session_id, session_id)

    def origin(
        self,
        name: str | None,
        agent: str,
        *,
        conversation_id: str = "",
        turn_id: str = "",
        tenant: str = LOCAL_TENANT,
        agent_id: str = "",
        agent_scope: str | None = None,
        caller: str = "frontend",
        progress: Callable[[ProgressUpdate], None] | None = None,
    ) -> CallOrigin:
        """The origin of a frontend's call as ``agent`` (depth 0; ``agent_id``, ``agent_scope``, ``caller`` and
        ``progress`` as :class:`~supervisor.calls.CallOrigin` has them); raises ``ValueError`` for an id a client
        may not send."""
        conversation = client_id(conversation_id, "the conversation id") if conversation_id else ""
        turn = client_id(turn_id, "the turn id") if turn_id else self._turns.next()
        session_id, stored = self.open(name, agent, tenant=tenant)
        return CallOrigin(
            session_id=session_id,
            conversation_id=conversation or stored,
            turn_id=turn,
            tenant=tenant,
            agent_id=agent_id,
            agent_scope=agent_scope,
            caller=caller,
            progress=progress,
        )
