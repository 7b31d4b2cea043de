"""The session store's database: its schema (made or brought up to date at open), the statements of the writes the
store queues (by the names its journal lines give them), and, at open, what the journals of processes that are gone
hold and was not applied yet (``supervisor/sessions/_journal.py``)."""

from __future__ import annotations

import os
import sqlite3
import time

from ._ids import LOCAL_TENANT
from ._journal import dead_journals, parse, read_all

__all__ = ["BACKSTOP_CHECKPOINT_PAGES", "STATEMENTS", "WAL_SIZE_LIMIT", "apply_dead_journals", "open_database"]

#: SQLite's automatic checkpoint (on the committing thread) only past this many WAL pages: when nobody checkpoints.
BACKSTOP_CHECKPOINT_PAGES = 16_384
#: The WAL file is cut back to this size (bytes) when it is reset after a checkpoint (``journal_size_limit``).
WAL_SIZE_LIMIT = 8 * 1024 * 1024

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY, conversation_id TEXT NOT NULL, parent_id TEXT, agent TEXT NOT NULL DEFAULT '',
    parent_call_id TEXT, created REAL NOT NULL, modified REAL NOT NULL, status TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS sessions_parent ON sessions(parent_id);
CREATE TABLE IF NOT EXISTS turns (
    session_id TEXT NOT NULL, n INTEGER NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL,
    tool TEXT, ts REAL NOT NULL, PRIMARY KEY (session_id, n));
CREATE TABLE IF NOT EXISTS tool_calls (
    id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL, call_id TEXT, parent_call_id TEXT,
    tool TEXT NOT NULL, args TEXT NOT NULL, status TEXT NOT NULL, summary TEXT, output TEXT,
    started REAL NOT NULL, duration_s REAL NOT NULL);
CREATE INDEX IF NOT EXISTS tool_calls_session ON tool_calls(session_id);
CREATE TABLE IF NOT EXISTS session_skills (
    session_id TEXT NOT NULL, toolbox TEXT NOT NULL, skills TEXT NOT NULL, PRIMARY KEY (session_id, toolbox));
CREATE TABLE IF NOT EXISTS journal_applied (
    name TEXT PRIMARY KEY, generation TEXT NOT NULL, applied INTEGER NOT NULL, ts REAL NOT NULL);
"""
#: The writes the store queues, by the name its journal lines give them (``supervisor/sessions/_journal.py``).
STATEMENTS = {
    "session": "INSERT OR IGNORE INTO sessions (id, conversation_id, parent_id, agent, tenant, name, created, "
    "modified, status) VALUES (?, ?, NULL, ?, ?, ?, ?, ?, 'idle')",
    "child": "INSERT INTO sessions (id, conversation_id, parent_id, agent, tenant, parent_call_id, created, "
    "modified, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'running')",
    "turn": "INSERT INTO turns (session_id, n, role, content, tool, ts) VALUES (?, (SELECT COALESCE(MAX(n), 0) + 1 "
    "FROM turns WHERE session_id = ?), ?, ?, ?, ?)",
    "modified": "UPDATE sessions SET modified = ? WHERE id = ?",
    "status": "UPDATE sessions SET status = ?, modified = ? WHERE id = ?",
    "call": "INSERT INTO tool_calls (session_id, call_id, parent_call_id, tool, args, status, summary, output, "
    "started, duration_s, conversation_id, turn_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    "skills": "INSERT INTO session_skills (session_id, toolbox, skills) VALUES (?, ?, ?) "
    "ON CONFLICT (session_id, toolbox) DO UPDATE SET skills = excluded.skills",
}
#: ``journal_applied`` rows older than this are dropped when a store opens (their journals are long gone).
APPLIED_ROWS_KEPT_S = 7 * 86400
#: Columns added since the first version of the store: (table, column, declaration).
_ADDED_COLUMNS = (
    ("sessions", "tenant", f"TEXT NOT NULL DEFAULT '{LOCAL_TENANT}'"),
    ("sessions", "name", "TEXT"),
    ("tool_calls", "conversation_id", "TEXT"),
    ("tool_calls", "turn_id", "TEXT"),
)


def open_database(path: str) -> sqlite3.Connection:
    """The store's connection, its schema made or brought up to date, sessions a dead supervisor left ``running``
    marked ``interrupted``; closed again when any of it fails."""
    if path != ":memory:":
        os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o700, exist_ok=True)
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        if path != ":memory:":
            os.chmod(path, 0o600)
            db.execute("PRAGMA journal_mode=WAL")
            # SQLite's own checkpoint runs on the committing thread (the trio thread) and fsyncs twice: only a
            # backstop now; :meth:`SessionStore.checkpoint` does it, off that thread, when it is due.
            db.execute(f"PRAGMA wal_autocheckpoint={BACKSTOP_CHECKPOINT_PAGES}")
            # SQLite keeps the WAL file at the largest size it ever reached; cut it back when a checkpoint resets it
            db.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
        db.execute("PRAGMA synchronous=NORMAL")
        db.executescript(_SCHEMA)
        for table, column, declaration in _ADDED_COLUMNS:
            present = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
            if column not in present:
                db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
        db.execute("UPDATE sessions SET status='interrupted' WHERE status='running'")
    except BaseException:
        db.close()
        raise
    return db


def apply_dead_journals(db: sqlite3.Connection, path: str) -> list[str]:
    """Apply what the journals of the database at ``path`` whose process is gone hold and was not applied yet, each
    in one transaction with its new applied offset, then remove them; the errors met (a bad line, a write that
    failed, a journal left for the next open), as messages."""
    errors: list[str] = []
    db.execute("DELETE FROM journal_applied WHERE ts < ?", (time.time() - APPLIED_ROWS_KEPT_S,))
    for name, fd in dead_journals(path):
        try:
            row = db.execute("SELECT generation, applied FROM journal_applied WHERE name = ?", (name,)).fetchone()
            tail = parse(read_all(fd), *(row if row else (None, 0)))
            errors += [f"journal {name}: a line that is not an entry"] * tail.bad_lines
            db.execute("BEGIN")
            for statement, params in tail.entries:
                try:
                    db.execute(STATEMENTS[statement], params)
                except (sqlite3.Error, KeyError, UnicodeEncodeError) as exc:
                    errors.append(f"journal {name}: {type(exc).__name__}: {exc}")
            if tail.generation is not None:
                db.execute(
                    "INSERT OR REPLACE INTO journal_applied (name, generation, applied, ts) VALUES (?, ?, ?, ?)",
                    (name, tail.generation, tail.end, time.time()),
                )
            db.execute("COMMIT")
            os.unlink(os.path.join(os.path.dirname(os.path.abspath(path)), name))
        except (sqlite3.Error, OSError) as exc:  # left for the next open
            errors.append(f"journal {name}: {type(exc).__name__}: {exc}")
            if db.in_transaction:
                db.execute("ROLLBACK")
        finally:
            os.close(fd)
    return errors
