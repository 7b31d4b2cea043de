"""Which session-scoped tools each session sees (skills' script tools), and per-session change events.

A skills toolbox lists a script tool with annotations ``{"session_scoped": true, "skill": s}``: it belongs in the
tool list of a session only while ``s`` is enabled there. The skills worker keeps the authoritative state and
refuses a script call from a session where its skill is off; this module keeps the supervisor's view of it, only
to decide what ``tools/list`` shows and whom to notify:

- a new session starts with the toolbox's ``autoEnableSkills`` (from its worker config);
- a **passed** result of a tool annotated ``{"skill": s, "skill_action": "enable"|"disable"}`` whose structured
  value is ``{"skill": s, "enabled": bool, "changed": bool, ...}`` updates that session; when it changed the
  session's list, the session's waiters are woken (MCP: ``notifications/tools/list_changed`` to that session only);
- a skill that leaves the toolbox's tool list (the worker watches its skill folders) is forgotten by every session,
  as the worker forgets it (:meth:`SessionToolViews.forget`).

The view can only be wrong in the safe direction for enforcement: a tool shown but refused by the worker (after a
worker restart, which forgets sessions) or hidden until the next enable. At most ``max_sessions`` sessions are
kept, least recently used first out (a forgotten session comes back with the auto-enabled skills, as in the
worker).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

import trio

__all__ = ["SessionToolViews"]


class SessionToolViews:
    """Enabled skills per (session, toolbox) as the supervisor last saw them, and per-session change events."""

    def __init__(self, max_sessions: int = 4096) -> None:
        self._max = max_sessions
        self._auto: dict[str, frozenset[str]] = {}
        self._enabled: OrderedDict[str, dict[str, set[str]]] = OrderedDict()
        self._events: dict[str, trio.Event] = {}
        self._waiters: dict[str, int] = {}

    def set_auto_enabled(self, toolbox: str, skills: Iterable[str]) -> None:
        """The skills a new session of ``toolbox`` starts with (its ``autoEnableSkills``)."""
        self._auto[toolbox] = frozenset(skills)

    def _session(self, session_id: str) -> dict[str, set[str]]:
        state = self._enabled.get(session_id)
        if state is None:
            state = {tb: set(auto) for tb, auto in self._auto.items()}
            self._enabled[session_id] = state
            while len(self._enabled) > self._max:
                self._enabled.popitem(last=False)
        else:
            self._enabled.move_to_end(session_id)
        return state

    def visible(self, session_id: str | None, toolbox: str, annotations: dict[str, Any]) -> bool:
        """Whether a tool with ``annotations`` of ``toolbox`` is listed for ``session_id`` (``None``: every tool)."""
        if session_id is None or not annotations.get("session_scoped"):
            return True
        enabled = self._session(session_id).get(toolbox)
        if enabled is None:
            enabled = set(self._auto.get(toolbox, ()))
        return annotations.get("skill") in enabled

    def observe(self, session_id: str, toolbox: str, annotations: dict[str, Any], status: str,
                structured: Any) -> bool:
        """Learn from a finished call; returns whether ``session_id``'s list changed (its waiters are woken)."""
        action = annotations.get("skill_action")
        if status != "passed" or action not in ("enable", "disable") or not isinstance(structured, dict):
            return False
        skill = annotations.get("skill")
        if not isinstance(skill, str) or structured.get("skill") != skill:
            return False
        on = action == "enable"
        if structured.get("enabled") is not on:
            return False
        enabled = self._session(session_id).setdefault(toolbox, set(self._auto.get(toolbox, ())))
        if (skill in enabled) == on:
            return False
        if on:
            enabled.add(skill)
        else:
            enabled.discard(skill)
        self.wake(session_id)
        return True

    def forget(self, toolbox: str, skills: Iterable[str]) -> None:
        """``skills`` of ``toolbox`` were removed: disable them in every session (the tool list change that removed
        them wakes everyone already)."""
        gone = set(skills)
        if not gone:
            return
        for state in self._enabled.values():
            enabled = state.get(toolbox)
            if enabled is not None:
                enabled.difference_update(gone)

    def wake(self, session_id: str | None = None) -> None:
        """Wake the waiters of ``session_id`` (``None``: of every session)."""
        ids = list(self._events) if session_id is None else [session_id]
        for sid in ids:
            event = self._events.pop(sid, None)
            if event is not None:
                event.set()

    async def wait(self, session_id: str) -> None:
        """Return the next time ``session_id``'s tool list may have changed (a checkpoint; cancellable)."""
        event = self._events.get(session_id)
        if event is None:
            event = self._events[session_id] = trio.Event()
        self._waiters[session_id] = self._waiters.get(session_id, 0) + 1
        try:
            await event.wait()
        finally:
            left = self._waiters[session_id] - 1
            if left:
                self._waiters[session_id] = left
            else:
                del self._waiters[session_id]
                if self._events.get(session_id) is event:
                    del self._events[session_id]  # nobody waits any more: forget the event
