"""The session store's commits (``supervisor/sessions/_store.py``): a session's ``modified`` is set once per flush
however many of its calls the flush holds (a frontend call's commit goes to the journal and leaves it to the next
flush), and the WAL is
checkpointed by :meth:`SessionStore.checkpoint` (meant for a thread of its own) once
:meth:`SessionStore.checkpoint_due`, SQLite's own checkpoint on the committing thread only a backstop far past
that."""

from __future__ import annotations

import sqlite3
import threading
import time
from typing import TYPE_CHECKING

from supervisor.sessions._queued_db import CHECKPOINT_COMMITS
from supervisor.sessions._store import SessionStore
from supervisor.sessions._store_schema import BACKSTOP_CHECKPOINT_PAGES

if TYPE_CHECKING:
    from pathlib import Path


def _call(store: SessionStore, session: str, n: int) -> None:
    store.record_call(
        session,
        call_id=f"c{n}",
        parent_call_id=None,
        tool="t",
        args={},
        status="passed",
        summary="ok",
        output="out",
        started=time.time(),
        duration_s=0.001,
    )


def _main_file_calls(path: Path) -> int:
    """Calls in the database file itself, the WAL ignored (``immutable``: no WAL, no locks)."""
    db = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
    try:
        [(n,)] = db.execute("SELECT count(*) FROM tool_calls")
    finally:
        db.close()
    return n


def test_a_flush_sets_each_sessions_modified_time_once(tmp_path: Path) -> None:
    store = SessionStore(str(tmp_path / "s.sqlite3"))
    for session in ("a", "b"):
        store.ensure_session(session)
    store.flush()
    statements: list[str] = []
    store._db.set_trace_callback(statements.append)
    before = time.time()
    for n in range(5):
        _call(store, "a", n)
    _call(store, "b", 5)
    store.flush()
    store._db.set_trace_callback(None)
    updates = [s for s in statements if s.startswith("UPDATE sessions SET modified")]
    assert len(updates) == 2  # one per session touched, not one per call
    assert len([s for s in statements if s.startswith("INSERT INTO tool_calls")]) == 6
    modified = {r.id: r.modified for r in store.rows({"a", "b"})}
    assert modified["a"] >= before and modified["b"] >= before
    assert len(store.tool_calls("a")) == 5
    store.close()


def test_a_commit_goes_to_the_journal_and_the_next_flush_applies_it_and_sets_modified(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    store = SessionStore(str(path))
    store.ensure_session("a")
    store.flush()
    [created] = store.rows({"a"})
    _call(store, "a", 1)
    statements: list[str] = []
    store._db.set_trace_callback(statements.append)
    store.flush(touch=False)  # a frontend call's commit, before its answer: durable in the journal
    assert store.commit is not None and statements == []  # nothing asked of SQLite
    [journal] = tmp_path.glob("s.sqlite3.pending-*")
    assert b'"call",["a","c1"' in journal.read_bytes()
    other = sqlite3.connect(path)  # another reader sees it once applied
    try:
        [(calls,)] = other.execute("SELECT count(*) FROM tool_calls WHERE session_id = 'a'")
        assert calls == 0
        store.flush()  # the flusher's next round (or any read) applies it and sets modified
        [(calls,)] = other.execute("SELECT count(*) FROM tool_calls WHERE session_id = 'a'")
        [(modified,)] = other.execute("SELECT modified FROM sessions WHERE id = 'a'")
    finally:
        other.close()
    assert calls == 1 and modified > created.modified
    store.close()
    assert not list(tmp_path.glob("s.sqlite3.pending-*"))  # all applied: a clean close leaves no journal


def test_the_wal_is_checkpointed_by_checkpoint_not_by_the_commits(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    store = SessionStore(str(path))
    [(pages,)] = store._db.execute("PRAGMA wal_autocheckpoint")
    assert pages == BACKSTOP_CHECKPOINT_PAGES
    store.checkpoint()  # the schema into the file
    for n in range(CHECKPOINT_COMMITS):
        assert not store.checkpoint_due()
        _call(store, "a", n)
        store.flush()  # one commit each, as a frontend's calls one after another
    assert _main_file_calls(path) == 0  # all of it still in the WAL: the commits did not checkpoint
    assert store.checkpoint_due()
    assert not store.checkpoint_due()  # the count starts again
    thread = threading.Thread(target=store.checkpoint)
    thread.start()
    thread.join()
    assert _main_file_calls(path) == CHECKPOINT_COMMITS  # copied into the file
    assert store.write_errors == 0
    _call(store, "a", -1)
    store.flush()  # the writer goes on after a checkpoint from another thread
    assert len(store.tool_calls("a")) == CHECKPOINT_COMMITS + 1
    store.close()


def test_a_memory_store_is_never_due(tmp_path: Path) -> None:
    store = SessionStore(":memory:")
    for n in range(CHECKPOINT_COMMITS + 1):
        _call(store, "a", n)
        store.flush()
    assert not store.checkpoint_due()
    store.checkpoint()  # nothing to do, and no error
    assert store.write_errors == 0
    store.close()


def test_a_failed_checkpoint_is_counted_as_a_write_error(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    store = SessionStore(str(path))
    store.flush()
    store.path = str(tmp_path / "missing" / "s.sqlite3")  # its own connection cannot open that
    store.checkpoint()
    assert store.write_errors == 0  # counted on the writer's thread, by the next checkpoint_due
    store.checkpoint_due()
    assert store.write_errors == 1 and "checkpoint" in (store.last_write_error or "")
    store.path = str(path)
    store.close()
