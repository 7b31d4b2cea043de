"""Which skills are enabled in which session.

A session is created on first sight with the ``autoEnableSkills`` enabled; after that only
``enable``/``disable``
change it (disabling an auto-enabled skill sticks for that session). Sessions are kept in least-recently-used order
and the oldest are forgotten past ``max_sessions`` (a forgotten session that comes back starts afresh, with the
auto-enabled skills).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable

__all__ = ["SessionSkills"]


class SessionSkills:
    """Thread-safe map of session id to enabled skill names."""

    def __init__(self, auto_enable: Iterable[str], max_sessions: int = 4096) -> None:
        self._auto = frozenset(auto_enable)
        self._max = max_sessions
        self._lock = threading.Lock()
        self._sessions: OrderedDict[str, set[str]] = OrderedDict()

    def _get(self, session: str) -> set[str]:
        enabled = self._sessions.get(session)
        if enabled is None:
            enabled = set(self._auto)
            self._sessions[session] = enabled
            while len(self._sessions) > self._max:
                self._sessions.popitem(last=False)
        else:
            self._sessions.move_to_end(session)
        return enabled

    def enabled(self, session: str) -> frozenset[str]:
        """The skills enabled in ``session``."""
        with self._lock:
            return frozenset(self._get(session))

    def is_enabled(self, session: str, skill: str) -> bool:
        with self._lock:
            return skill in self._get(session)

    def set(self, session: str, skill: str, enabled: bool) -> bool:
        """Enable or disable ``skill`` in ``session``; returns whether that changed anything."""
        with self._lock:
            skills = self._get(session)
            before = skill in skills
            if enabled:
                skills.add(skill)
            else:
                skills.discard(skill)
            return before != enabled
