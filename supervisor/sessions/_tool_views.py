"""Which session-scoped tools each session sees (skills' script tools), and per-session change events.

A skills toolbox lists a script tool with annotations ``{"session_scoped": true, "skill": s}``: it belongs in the
tool list of a session only while ``s`` is enabled there. Which skills a session enabled is kept in one place, the
session store (:meth:`SessionStore.enabled_skills <supervisor.sessions._store.SessionStore.enabled_skills>`); this
module reads and changes it there, and the supervisor hands the session's list to the skills worker with every call
(``ctx["enabled_skills"]``), which enforces it. So neither a worker restart nor a supervisor restart loses it, and
the list a session is shown is the list its calls are judged by.

- a session that never changed its skills has the toolbox's ``autoEnableSkills`` (from its worker config);
- a **passed** result of a tool annotated ``{"skill": s, "skill_action": "enable"|"disable"}`` whose structured
  value is ``{"skill": s, "enabled": bool, ...}`` updates that session in the store; when it changed the session's
  list the caller wakes the session's waiters (MCP: ``notifications/tools/list_changed`` to that session only);
- a skill that leaves the toolbox's tool list (the worker watches its skill folders) is disabled in every session
  that has a list of its own (:meth:`SessionToolViews.forget`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ._store import SessionStore

__all__ = ["SessionToolViews"]


class SessionToolViews:
    """Enabled skills per (session, toolbox) (a session is one agent's, so its toolbox names are that agent's),
    read from and written to the session store, and per-session change events (keyed by whatever the caller waits
    on: a frontend's session name)."""

    def __init__(self, store: SessionStore) -> None:
        self._store = store
        self._auto: dict[tuple[str, str], frozenset[str]] = {}  # (agent, toolbox) -> its autoEnableSkills
        self._listed: dict[tuple[str, str], set[str]] = {}  # (agent, toolbox) -> the skills its worker last listed
        self._events: dict[str, trio.Event] = {}
        self._waiters: dict[str, int] = {}
        #: sessions in which every loaded skill counts as enabled (stateless-revision requests)
        self._every: set[str] = set()

    def set_auto_enabled(self, agent: str, toolbox: str, skills: Iterable[str]) -> None:
        """The skills a new session of ``agent``'s ``toolbox`` starts with (its ``autoEnableSkills``)."""
        self._auto[(agent, toolbox)] = frozenset(skills)

    def enable_every_skill(self, session_id: str) -> None:
        """Every skill its toolboxes list counts as enabled in ``session_id`` until :meth:`drop_session` (a request
        of MCP's stateless revision is a session of its own: nothing it enabled could last into the next)."""
        self._every.add(session_id)

    def drop_session(self, session_id: str) -> None:
        """``session_id`` was closed: forget what is kept of it in memory here."""
        self._every.discard(session_id)

    def enabled(self, session_id: str, agent: str, toolbox: str) -> frozenset[str]:
        """The skills enabled in ``session_id`` (a session of ``agent``) for ``agent``'s ``toolbox``."""
        if session_id in self._every:
            return frozenset(self._listed.get((agent, toolbox), ()))
        kept = self._store.enabled_skills(session_id, toolbox)
        return kept if kept is not None else self._auto.get((agent, toolbox), frozenset())

    def call_context(self, tool: Any, session_id: str) -> dict[str, Any]:
        """What a call of the registered ``tool`` gets in its context from here: for a skills toolbox, the skills
        ``session_id`` enabled (``enabled_skills``, the list the worker judges the call by)."""
        if getattr(tool.runner.spec, "kind", None) != "skills":
            return {}
        return {"enabled_skills": sorted(self.enabled(session_id, tool.agent, tool.toolbox))}

    def tools_listed(self, agent: str, toolbox: str, tools: list[dict[str, Any]]) -> None:
        """The skills worker of ``agent``'s ``toolbox`` listed ``tools``: skills that left the list since its last
        one (a restarted worker's first list included) are forgotten by every session of ``agent``."""
        present = {
            str((t.get("annotations") or {}).get("skill"))
            for t in tools
            if (t.get("annotations") or {}).get("skill_action") == "describe"
        }
        before = self._listed.get((agent, toolbox))
        if before is not None:
            self.forget(agent, toolbox, before - present)
        self._listed[(agent, toolbox)] = present

    def visible(self, session_id: str | None, agent: str, toolbox: str, annotations: dict[str, Any]) -> bool:
        """Whether a tool with ``annotations`` of ``agent``'s ``toolbox`` is listed for ``session_id`` (a session of
        ``agent``; ``None``: every tool)."""
        if session_id is None or not annotations.get("session_scoped"):
            return True
        return annotations.get("skill") in self.enabled(session_id, agent, toolbox)

    def observe(
        self, session_id: str, agent: str, toolbox: str, annotations: dict[str, Any], status: str, structured: Any
    ) -> bool:
        """Learn from a finished call; returns whether ``session_id``'s list changed (the caller wakes its
        waiters)."""
        action = annotations.get("skill_action")
        if status != "passed" or action not in ("enable", "disable") or not isinstance(structured, dict):
            return False
        skill = annotations.get("skill")
        if not isinstance(skill, str) or structured.get("skill") != skill:
            return False
        on = action == "enable"
        if structured.get("enabled") is not on:
            return False
        enabled = set(self.enabled(session_id, agent, toolbox))
        if (skill in enabled) == on:
            return False
        if on:
            enabled.add(skill)
        else:
            enabled.discard(skill)
        self._store.set_enabled_skills(session_id, toolbox, enabled)
        return True

    def forget(self, agent: str, toolbox: str, skills: Iterable[str]) -> None:
        """``skills`` of ``agent``'s ``toolbox`` were removed: disable them in every session of ``agent`` (the tool
        list change that removed them wakes everyone already)."""
        self._store.forget_skills(toolbox, set(skills), agent=agent)

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
