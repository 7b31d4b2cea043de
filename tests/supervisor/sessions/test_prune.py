"""Retention in bounded steps (``supervisor/sessions/_prune.py``) and the WAL kept small by the supervisor's
upkeep (``supervisor/_services.Upkeep``): each step deletes at most its budget of rows, a session goes only after
its records, what is left at the end is what one transaction left before; pruning a large store leaves its WAL
file cut back to ``WAL_SIZE_LIMIT`` instead of at the size the writes made it. A real SQLite store in a file."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from supervisor._services import OtelSlot, Upkeep
from supervisor.sessions import SessionStore
from supervisor.sessions._store_schema import WAL_SIZE_LIMIT
from supervisor.traces import TraceRecorder

if TYPE_CHECKING:
    from pathlib import Path


def _call(store: SessionStore, session: str, n: int, started: float, output: str = "out") -> None:
    store.record_call(
        session,
        call_id=f"{session}-{n}",
        parent_call_id=None,
        tool="t",
        args={"n": n},
        status="passed",
        summary=None,
        output=output,
        started=started,
        duration_s=0.01,
    )


def _counts(store: SessionStore) -> tuple[int, int, int]:
    db = store._db
    return tuple(db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("sessions", "tool_calls", "turns"))  # type: ignore[return-value]


def test_each_step_deletes_at_most_its_budget_and_the_end_is_the_same(tmp_path: Path) -> None:
    store = SessionStore(str(tmp_path / "sessions.sqlite3"))
    for n in range(12):  # an old session: all of it goes
        _call(store, "old", n, 1000.0 + n)
        store.add_turn("old", "user", f"turn {n}")
    for n in range(10):  # a session still in use: its records before the cutoff go, the session stays
        _call(store, "kept", n, 1000.0 + n if n < 6 else time.time())
    for n in range(5):  # a running one: untouched
        _call(store, "busy", n, 1000.0)
    store.flush()
    store._db.execute("UPDATE sessions SET modified = 1500 WHERE id = 'old'")
    store._db.execute("UPDATE turns SET ts = 1000")
    store._db.execute("UPDATE sessions SET status = 'running', modified = 1500 WHERE id = 'busy'")
    before = _counts(store)
    steps = []
    while (step := store.prune_step(2000.0, limit=7)) is not None:
        after = _counts(store)
        deleted = sum(before) - sum(after)
        assert deleted <= 7, (before, after)
        before = after
        steps.append(step)
        if step.done:
            break
    assert len(steps) >= 4 and steps[-1].done and not any(s.done for s in steps[:-1])
    assert sum(s.sessions for s in steps) == 1 and sum(s.records for s in steps) == 6
    assert set(store.parents()) == {"kept", "busy"}
    assert store.turns("old") == [] and store.tool_calls("old") == []
    assert len(store.tool_calls("kept")) == 4 and len(store.tool_calls("busy")) == 5
    assert store.prune(2000.0) == 0  # nothing left to do
    store.close()


async def test_pruning_a_large_store_leaves_its_wal_small(tmp_path: Path) -> None:
    """About 24 MiB of call records written without a checkpoint (the WAL grows with them), all past the retention:
    the upkeep's prune checkpoints after each step, and the WAL file ends cut back to WAL_SIZE_LIMIT (without
    the limit SQLite keeps it at the largest size it reached)."""
    path = tmp_path / "sessions.sqlite3"
    store = SessionStore(str(path))
    for n in range(6000):
        _call(store, f"s{n % 50}", n, 1000.0, output="x" * 4000)
    store.flush()
    wal = f"{path}-wal"
    assert os.path.getsize(wal) > 2 * WAL_SIZE_LIMIT  # the writes made it large
    store._db.execute("UPDATE sessions SET modified = 1500")
    trace = TraceRecorder(None)
    records: list[dict[str, object]] = []
    trace.sink = lambda event, fields: records.append({"event": event, **fields})
    upkeep = Upkeep(trace, store, OtelSlot(trace, None))
    await upkeep.prune_sessions(1.0)  # a day: everything written at 1000 (Unix time) is past it
    assert _counts(store) == (0, 0, 0)
    assert [(r["sessions"], r["records"]) for r in records if r["event"] == "sessions_pruned"] == [(50, 0)]
    assert os.path.getsize(wal) <= WAL_SIZE_LIMIT
    store.close()
