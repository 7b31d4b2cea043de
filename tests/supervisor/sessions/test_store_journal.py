"""The session store's journal (``supervisor/sessions/_journal.py``): a frontend call's commit is one line in this
process's journal, applied to the database by the next flush, or, after a crash, by the next open of the store, each
line exactly once whatever instant the crash came at; journals of live stores are left alone."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from supervisor.sessions import _journal
from supervisor.sessions._journal import encode_lines, parse
from supervisor.sessions._store import SessionStore

if TYPE_CHECKING:
    import pytest

REPO = Path(__file__).resolve().parents[3]


def _call(store: SessionStore, session: str, n: int, output: str = "out", started: float | None = None) -> None:
    """Record call ``n`` of ``session`` (started now unless ``started``)."""
    store.record_call(
        session,
        call_id=f"c{n}",
        parent_call_id=None,
        tool="t",
        args={"n": n},
        status="passed",
        summary="ok",
        output=output,
        started=time.time() if started is None else started,
        duration_s=0.001,
    )


def _rows(path: Path) -> list[tuple[str, str]]:
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT call_id, output FROM tool_calls ORDER BY id").fetchall()
    finally:
        db.close()


def _killed_after(path: Path, script: str) -> None:
    """Run ``script`` (with ``store``, ``_call`` and ``time`` at hand) in a process of its own that then dies by
    SIGKILL, as a supervisor killed right after an answer."""
    prelude = (
        "import os, signal, sys, time\n"
        f"sys.path.insert(0, {str(REPO)!r})\n"
        "from supervisor.sessions._store import SessionStore\n"
        f"from tests.supervisor.sessions.test_store_journal import _call\n"
        f"store = SessionStore({str(path)!r})\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", prelude + script + "\nos.kill(os.getpid(), signal.SIGKILL)\n"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == -9, done.stderr.decode()[-2000:]


def test_a_committed_call_survives_a_kill_and_the_next_open_applies_it_once(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    _killed_after(path, "_call(store, 'a', 1, 'zürich ✓ \\u2028')\nstore.commit()\n_call(store, 'a', 2)")
    [journal] = tmp_path.glob("s.sqlite3.pending-*")  # its process is gone: its lock is free
    assert _rows(path) == []  # committed to the journal only
    store = SessionStore(str(path))
    assert store.write_errors == 0
    assert [r["call_id"] for r in store.tool_calls("a")] == ["c1"]  # c2 was never committed: no answer went
    assert store.tool_calls("a")[0]["output"] == "zürich ✓ \u2028"  # text comes back as it was
    assert not journal.exists()
    store.close()
    assert [c for c, _ in _rows(path)] == ["c1"]  # and once only, however often the store opens
    SessionStore(str(path)).close()
    assert [c for c, _ in _rows(path)] == ["c1"]


def test_after_a_kill_between_apply_and_more_commits_only_the_new_lines_are_applied(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    _killed_after(
        path,
        "for n in range(3):\n    _call(store, 'a', n)\n    store.commit()\nstore.flush()\n"
        "_call(store, 'a', 3)\nstore.commit()",
    )
    store = SessionStore(str(path))
    assert [r["call_id"] for r in store.tool_calls("a")] == ["c0", "c1", "c2", "c3"]
    store.close()


def test_a_journal_that_rolled_after_its_last_apply_is_applied_from_its_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.sqlite3"
    _killed_after(
        path,
        "from supervisor.sessions import _journal\n_journal.ROLL_BYTES = 1\n"
        "_call(store, 'a', 0)\nstore.commit()\nstore.flush()\n"  # applied, then the journal starts again
        "_call(store, 'a', 1)\nstore.commit()",
    )
    [journal] = tmp_path.glob("s.sqlite3.pending-*")
    assert b'"c0"' not in journal.read_bytes() and b'"c1"' in journal.read_bytes()  # quoted: the journal id is hex
    store = SessionStore(str(path))
    assert [r["call_id"] for r in store.tool_calls("a")] == ["c0", "c1"]
    store.close()


def test_a_live_stores_journal_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    first = SessionStore(str(path))
    _call(first, "a", 1)
    first.commit()
    second = SessionStore(str(path))  # a second supervisor on the same state folder: the first's journal is locked
    assert second.tool_calls("a") == []
    assert len(list(tmp_path.glob("s.sqlite3.pending-*"))) == 2
    first.flush()
    assert [r["call_id"] for r in second.tool_calls("a")] == ["c1"]
    first.close()
    second.close()
    assert not list(tmp_path.glob("s.sqlite3.pending-*"))
    assert [c for c, _ in _rows(path)] == ["c1"]


def test_without_a_journal_a_commit_goes_to_the_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_journal.Journal, "append", refuse)
    path = tmp_path / "s.sqlite3"
    store = SessionStore(str(path))
    _call(store, "a", 1)
    store.commit()  # the journal cannot take it: committed to SQLite, counted, never raised
    assert [c for c, _ in _rows(path)] == ["c1"]
    assert store.write_errors == 1 and "No space left" in (store.last_write_error or "")
    _call(store, "a", 2)
    store.commit()  # no journal any more
    assert [c for c, _ in _rows(path)] == ["c1", "c2"]
    store.close()


def test_parse_applies_what_the_database_did_not_record_as_applied() -> None:
    header = b'{"journal":"g1"}\n'
    lines = encode_lines([("call", ["a", 1]), ("call", ["a", 2]), ("turn", ["b", "\ud800"])])
    data = header + lines
    everything = parse(data, None, 0)
    assert everything.generation == "g1" and everything.end == len(data) and everything.bad_lines == 0
    assert everything.entries == [("call", ["a", 1]), ("call", ["a", 2]), ("turn", ["b", "\ud800"])]
    first_line_applied = len(header) + lines.index(b"\n") + 1
    assert parse(data, "g1", first_line_applied).entries == everything.entries[1:]
    assert parse(data, "g1", len(data)).entries == []
    assert parse(data, "g0", len(data)).entries == everything.entries  # rolled since: all of it is new
    cut = parse(data[:-3], None, 0)  # the last line cut short: left out
    assert cut.entries == everything.entries[:2] and cut.end == data.index(b"\n", first_line_applied) + 1
    bad = parse(header + b"not json\n" + b'["call"]\n' + lines, None, 0)
    assert bad.bad_lines == 2 and bad.entries == everything.entries
    assert parse(b'{"journal":', None, 0).generation is None  # no whole header: nothing
    assert json.loads(header) == {"journal": "g1"}
