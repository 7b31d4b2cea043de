"""Retention in bounded steps: what is older than the policy's ``sessions.keep_days`` deleted at most
:data:`PRUNE_STEP_ROWS` rows to a transaction.

A transaction's pages all go to the WAL before a checkpoint can copy them, and SQLite keeps the WAL file at the
largest size it ever reached; one transaction that deleted everything due at once (an hour of traffic, at the
default retention) made the WAL as large as that hour's records and held the trio thread, which commits, for as
long. In steps, the WAL holds one step between two checkpoints and the calls are served between steps
(``supervisor/_services.Upkeep``).

Each step deletes, in this order and within one budget of rows: the turns and tool calls of the sessions due to go
(not modified since the cutoff, not running), then the turns and tool calls from before the cutoff of the other
sessions that are not running (a session in use for longer than the retention keeps only its recent records);
once all of those are gone, the sessions due to go and their enabled skills.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

__all__ = ["PRUNE_STEP_ROWS", "PruneStep", "prune_step"]

#: Rows one step deletes at most (a few MB of WAL with the records' text).
PRUNE_STEP_ROWS = 2000

_OLD = "SELECT id FROM sessions WHERE modified < ? AND status != 'running'"
_RUNNING = "SELECT id FROM sessions WHERE status = 'running'"
#: (statement, whether what it deletes counts as records of sessions kept): each gets the cutoff and the rows left
_STATEMENTS = (
    (f"DELETE FROM tool_calls WHERE id IN (SELECT id FROM tool_calls WHERE session_id IN ({_OLD}) LIMIT ?)", False),
    (f"DELETE FROM turns WHERE rowid IN (SELECT rowid FROM turns WHERE session_id IN ({_OLD}) LIMIT ?)", False),
    (
        "DELETE FROM tool_calls WHERE id IN (SELECT id FROM tool_calls WHERE started < ? "
        f"AND session_id NOT IN ({_RUNNING}) LIMIT ?)",
        True,
    ),
    (
        f"DELETE FROM turns WHERE rowid IN (SELECT rowid FROM turns WHERE ts < ? AND session_id NOT IN ({_RUNNING}) "
        "LIMIT ?)",
        True,
    ),
)
_SKILLS = f"DELETE FROM session_skills WHERE session_id IN ({_OLD})"
_SESSIONS = (
    "DELETE FROM sessions WHERE rowid IN "
    "(SELECT rowid FROM sessions WHERE modified < ? AND status != 'running' LIMIT ?)"
)


@dataclass(frozen=True)
class PruneStep:
    """What one step deleted: ``sessions``, ``records`` (turns and tool calls) of sessions kept, and whether
    nothing due is left (``done``)."""

    sessions: int
    records: int
    done: bool


def prune_step(db: sqlite3.Connection, older_than: float, limit: int = PRUNE_STEP_ROWS) -> PruneStep:
    """Delete at most ``limit`` rows due to go before ``older_than`` (Unix time) in one transaction on ``db``
    (which has none open). Raises ``sqlite3.Error`` (the transaction rolled back)."""
    left = limit
    records = sessions = 0
    db.execute("BEGIN")
    try:
        for statement, kept in _STATEMENTS:
            deleted = db.execute(statement, (older_than, left)).rowcount if left else 0
            records += deleted if kept else 0
            left -= deleted
        if left:  # every record due is gone: the sessions due can go
            db.execute(_SKILLS, (older_than,))
            sessions = db.execute(_SESSIONS, (older_than, left)).rowcount
            left -= sessions
        db.execute("COMMIT")
    except sqlite3.Error:
        try:
            db.execute("ROLLBACK")
        except sqlite3.Error:
            pass
        raise
    return PruneStep(sessions, records, done=left > 0)
