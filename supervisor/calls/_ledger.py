"""What the supervisor keeps of calls whatever policy runs: call ids, each session's call counts, its closing.

The portal of each policy generation (:mod:`supervisor.calls._portal`) is made anew by a reload; the ledger is not:
a session's count under ``sessions.max_calls`` and its calls in flight go on across a reload (the new limits apply
to the next call), and call ids stay unique in the trace (``c1``, ``c2``...). A session is charged here after the
portal's checks passed: :meth:`CallLedger.refusal` says whether its limits hold, :meth:`CallLedger.open` counts the
call, :meth:`CallLedger.close` ends it.

Idle sessions' counts only matter under ``max_calls``: they are kept until the session is closed
(:meth:`CallLedger.forget_session`), at most for the most recent
:data:`~supervisor.sessions.MAX_REMEMBERED_SESSIONS` (one forgotten starts at 0, as a new session does: no caller
gains what opening a session would not give it). A session closed while a call of it runs is forgotten once its
last call ended and was recorded; then the session store forgets it too.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from supervisor.sessions import remember

if TYPE_CHECKING:
    from supervisor.sessions import SessionStore

__all__ = ["CallLedger", "SessionLimits", "SessionUsage"]


@dataclass(frozen=True)
class SessionLimits:
    """Per-session bounds: ``max_calls`` in total and ``max_concurrent`` at once (``None``: unbounded)."""

    max_calls: int | None = None
    max_concurrent: int | None = None


@dataclass
class SessionUsage:
    """One session's calls: ``calls`` made (counted under ``max_calls``), ``in_flight`` now."""

    calls: int = 0
    in_flight: int = 0
    closed: bool = False  # the session was closed while a call ran: forgotten when its last call ends


_NONE = SessionUsage()  # (never changed) the usage of a session with no call counted


class CallLedger:
    """Call ids and session counts of one supervisor (``sessions``: the store that forgets a closed session)."""

    def __init__(self, sessions: SessionStore | None = None) -> None:
        self._ids = itertools.count(1)
        self._sessions = sessions
        #: sessions with a call running, and the idle ones whose count is kept (only under ``max_calls``)
        self._busy: dict[str, SessionUsage] = {}
        self._idle: dict[str, SessionUsage] = {}
        #: frontends' (depth 0) calls dispatched whose records are not committed yet
        self.uncommitted = 0

    def refusal(self, session_id: str, limits: SessionLimits) -> str | None:
        """Why the session ``session_id`` may not start another call under ``limits`` (``None``: it may)."""
        usage = self._busy.get(session_id) or self._idle.get(session_id) or _NONE
        if limits.max_calls is not None and usage.calls >= limits.max_calls:
            return f"Session {session_id} reached its limit of {limits.max_calls} tool calls."
        if limits.max_concurrent is not None and usage.in_flight >= limits.max_concurrent:
            return (
                f"Session {session_id} already has {usage.in_flight} calls running "
                f"(limit {limits.max_concurrent}); wait for one to finish."
            )
        return None

    def open(self, session_id: str) -> tuple[str, SessionUsage]:
        """Count a call of ``session_id`` as made and running; its call id (``c<n>``) and the usage to close."""
        usage = self._busy.get(session_id) or self._idle.pop(session_id, None) or SessionUsage()
        self._busy[session_id] = usage
        usage.calls += 1
        usage.in_flight += 1
        return f"c{next(self._ids)}", usage

    def close(self, session_id: str, usage: SessionUsage, limits: SessionLimits) -> None:
        """A call of ``session_id`` ended (and was recorded): a session closed meanwhile is forgotten now, an idle
        one's count kept when ``limits`` count calls."""
        usage.in_flight -= 1
        if usage.in_flight:
            return
        del self._busy[session_id]
        if usage.closed:
            self._forgotten(session_id)
        elif limits.max_calls is not None:
            remember(self._idle, session_id, usage)

    def forget_session(self, session_id: str) -> None:
        """The session ``session_id`` was closed: drop its counts and have the store forget it, now or, when calls
        of it are running, once the last of them ended (and was recorded). A session of that id used again starts
        at 0, as a new one does."""
        self._idle.pop(session_id, None)
        busy = self._busy.get(session_id)
        if busy is not None:
            busy.closed = True
        else:
            self._forgotten(session_id)

    def _forgotten(self, session_id: str) -> None:
        if self._sessions is not None:
            self._sessions.forget([session_id])

    @property
    def busy(self) -> int:
        """Sessions with a call running."""
        return len(self._busy)

    @property
    def idle(self) -> int:
        """Idle sessions whose call count is kept."""
        return len(self._idle)

    def calls_of(self, session_id: str) -> int:
        """The calls ``session_id`` made so far (0 for a session this ledger does not keep)."""
        usage = self._busy.get(session_id) or self._idle.get(session_id)
        return usage.calls if usage is not None else 0
