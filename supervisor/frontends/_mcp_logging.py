"""MCP logging for one session: ``logging/setLevel``, then ``notifications/message`` for what concerns it.

What a session is told (a view of the trace records, :func:`log_entry`, pure):

- ``error``: a load error of a toolbox of the session's agent (also every one present when the level is first set,
  so a client that connects after the start learns them), a worker that could not start, a crash loop;
- ``warning``: a worker of the agent's toolboxes restarted; a limit hit by one of this session's own calls or
  anywhere in their call trees (``limit_hit``: a resource limit, a call-tree budget spent, a sub-agent's step
  limit), a call refused by a limit (:data:`LIMIT_REFUSALS`: the session's call limits, the call depth, the call
  tree's budget) in this session or in the tree of one of its calls (a sub-agent's loop, a Lua ``tools.call``);
  the HTTP tenant's rate or in-flight limit refusing one of its requests;
- ``notice``: a toolbox back after its crash-loop cool-down.

On the stateless revision (2026-07-28) a request opts in with ``_meta["io.modelcontextprotocol/logLevel"]`` and
hears, on its SSE response, what happens while it runs.

Never another session's calls nor another agent's toolboxes: a record is matched by the session it names (through
the frontend's name for its store session) or by the agent it names (a toolbox's name alone says nothing: two agents
may each have a toolbox of that name, and their load errors carry host paths). Nothing is sent until the client sets
a level (the 2026-07-28 revision's opt-in, kept for every revision). Messages wait in a queue of :data:`QUEUE` for
the transport to send them (:meth:`SessionLog.pump`); past it they are dropped, never queued without bound.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from supervisor._face import BUDGET_KIND

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from supervisor._face import ToolService

__all__ = ["LEVELS", "LIMIT_REFUSALS", "QUEUE", "SessionLog", "log_entry"]

LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
QUEUE = 64
_LOGGER = "agents-supervise"
_WORKER = {
    "worker_restart": "warning",
    "worker_start_failed": "error",
    "crash_loop": "error",
    "crash_loop_recovered": "notice",
}
#: The portal's refusals that are limits (the others, an unknown tool or bad arguments, are answered and not
#: logged): the session's call limits, the call depth, the call tree's budget.
LIMIT_REFUSALS = frozenset({"SessionLimit", "PortalDepthExceeded", BUDGET_KIND})
_TOLD = frozenset({"load_error", "limit_hit", "portal_refusal", *_WORKER})
_KEEP = (
    "toolbox",
    "source",
    "message",
    "restarts",
    "reason",
    "deaths",
    "cooldown_s",
    "limit",
    "value",
    "tool",
    "kind",
    "error",
    "budget",
    "used",
)


def log_entry(
    event: str, fields: dict[str, Any], *, agent: str | None, own_session: bool, own_call: bool
) -> tuple[str, dict[str, Any]] | None:
    """The level and data a session is told for one trace record, or ``None``. Pure.

    ``agent``: the session's agent (``None``: a session bound to none hears every agent's); a toolbox's record is
    matched by the agent it names, never by the toolbox's name alone (two agents may each have a ``system``), and a
    record that names no agent is told to no bound session. ``own_session``: the record names this session;
    ``own_call``: it names a call of this session, or the root call of the tree it happened in is one."""
    level = None
    if event == "load_error" or event in _WORKER:
        if agent is None or fields.get("agent") == agent:
            level = _WORKER.get(event, "error")
    elif (event == "limit_hit" and own_call) or (
        event == "portal_refusal" and (own_session or own_call) and fields.get("kind") in LIMIT_REFUSALS
    ):
        level = "warning"
    if level is None:
        return None
    data = {"event": event, **{k: fields[k] for k in _KEEP if k in fields}}
    return level, data


class SessionLog:
    """The log of one MCP session: its level, its queue, its view of the trace."""

    def __init__(self, sup: ToolService, session_name: str, agent: str | None) -> None:
        self.sup = sup
        self.session_name = session_name
        self.agent = agent
        self.level: str | None = None
        self._send, self._receive = trio.open_memory_channel[dict[str, Any]](QUEUE)
        self._calls: set[Any] = set()

    def _own(self, fields: dict[str, Any]) -> bool:
        session = fields.get("session")
        return isinstance(session, str) and self.sup.session_name(session) == self.session_name

    def set_level(self, level: str, *, announce: bool = True) -> None:
        """Send messages of ``level`` and above from now on (a level in :data:`LEVELS`). The first time, the
        present load errors of the agent's toolboxes are told (unless not ``announce``: a stateless request's
        session hears only what happens while it runs)."""
        first = self.level is None
        self.level = level
        if first:
            self.sup.trace.listeners.add(self._on_record)
            if not announce:
                return
            for error in self.sup.load_errors():
                if log_entry("load_error", error, agent=self.agent, own_session=False, own_call=False) is not None:
                    self.tell("error", {"event": "load_error", **{k: str(v) for k, v in error.items()}})

    def close(self) -> None:
        """Stop listening (the session ended)."""
        self.sup.trace.listeners.discard(self._on_record)
        self._send.close()

    def tell(self, level: str, data: dict[str, Any]) -> None:
        """Queue a message of ``level`` when the client asked for that level or a lower one; never blocks."""
        if self.level is None or LEVELS.index(level) < LEVELS.index(self.level):
            return
        message = {
            "jsonrpc": "2.0",
            "method": "notifications/message",
            "params": {"level": level, "logger": _LOGGER, "data": data},
        }
        try:
            self._send.send_nowait(message)
        except (trio.WouldBlock, trio.ClosedResourceError):
            pass  # nobody reads fast enough (or the session ended): dropped

    def _on_record(self, event: str, fields: dict[str, Any]) -> None:
        if event == "call_start":
            if self._own(fields):
                self._calls.add(fields.get("call_id"))
            return
        if event == "call_end":
            self._calls.discard(fields.get("call_id"))
            return
        if event not in _TOLD:
            return
        entry = log_entry(
            event,
            fields,
            agent=self.agent,
            own_session=self._own(fields),
            own_call=fields.get("call_id") in self._calls or fields.get("root_call_id") in self._calls,
        )
        if entry is not None:
            self.tell(*entry)

    def take_queued(self) -> list[dict[str, Any]]:
        """The messages queued now, taken (a transport sends them before a request's answer, in order)."""
        out = []
        while True:
            try:
                out.append(self._receive.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                return out

    async def pump(self, send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        """Send queued messages with ``send`` until the session's log is closed (or the caller is cancelled)."""
        async for message in self._receive:
            await send(message)
