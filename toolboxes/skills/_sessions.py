"""Which skills are enabled in which session.

A session is created on first sight with the ``autoEnableSkills`` enabled; after that only ``enable``/``disable``
change it (disabling an auto-enabled skill sticks for that session). Sessions are kept in least-recently-used order
and the oldest are forgotten past ``max_sessions`` (a forgotten session that comes back starts afresh, with the
auto-enabled skills).

With a ``path`` (a file in the toolbox's state folder), every change is saved there atomically and loaded at start,
so a worker that crashed and was restarted keeps each session's skills: the supervisor, which lists a session's
tools from the enable/disable results it saw, and the worker, which enforces, stay in agreement.

A skill that is no longer loaded (its folder removed, its ``SKILL.md`` broken) is :meth:`forget`-ed by every session:
if it comes back it is off again, except in sessions that start after that with it auto-enabled.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Iterable

from .._atomic import atomic_write

__all__ = ["SessionSkills"]


class SessionSkills:
    """Thread-safe map of session id to enabled skill names."""

    def __init__(self, auto_enable: Iterable[str], max_sessions: int = 4096, path: str | None = None) -> None:
        self._auto = frozenset(auto_enable)
        self._max = max_sessions
        self._lock = threading.Lock()
        self._sessions: OrderedDict[str, set[str]] = OrderedDict()
        self._path = path
        if path is not None:
            self._load(path)

    def _load(self, path: str) -> None:
        """Load saved sessions; a missing or unreadable file starts empty (never fails the toolbox)."""
        try:
            with open(path, encoding="utf-8") as f:
                saved = json.load(f)
        except (OSError, ValueError):
            return
        if isinstance(saved, dict):
            for session, skills in list(saved.items())[-self._max:]:
                if isinstance(session, str) and isinstance(skills, list):
                    self._sessions[session] = {s for s in skills if isinstance(s, str)}

    def _save(self) -> None:
        """Write every session atomically (temp file, rename); called with the lock held."""
        if self._path is None:
            return
        try:
            data = json.dumps({s: sorted(k) for s, k in self._sessions.items()}).encode()
            atomic_write(self._path, data, 0o600)
        except OSError:
            pass  # the in-memory state still holds; a restart would fall back to the auto-enabled skills

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

    def mentioned(self) -> frozenset[str]:
        """Every skill enabled in some session."""
        with self._lock:
            return frozenset().union(*self._sessions.values())

    def forget(self, skills: Iterable[str]) -> bool:
        """Disable ``skills`` in every session (they were removed); returns whether that changed anything."""
        gone = frozenset(skills)
        with self._lock:
            changed = False
            for enabled in self._sessions.values():
                if enabled & gone:
                    enabled.difference_update(gone)
                    changed = True
            if changed:
                self._save()
            return changed

    def set(self, session: str, skill: str, enabled: bool) -> bool:
        """Enable or disable ``skill`` in ``session``; returns whether that changed anything."""
        with self._lock:
            skills = self._get(session)
            before = skill in skills
            if enabled:
                skills.add(skill)
            else:
                skills.discard(skill)
            if before != enabled:
                self._save()
            return before != enabled
