"""The flusher applies the session store's queued writes on a worker thread (``QueuedDatabase.flush_off_thread``)
while the trio thread goes on queueing, committing and reading: batches are applied in the order they were taken
(a read applies the flusher's batch itself when its thread has not claimed it yet, or waits for that thread, then
applies what was queued since), and the journal never starts again over lines the flusher's batch did not hold.
The batch is held in its thread (or the thread kept from starting) by wrappers, so what happens meanwhile is not
left to timing."""

from __future__ import annotations

import faulthandler
import sqlite3
import threading
from typing import TYPE_CHECKING, Any

import trio
import trio.testing

from supervisor.sessions import _journal, _queued_db
from supervisor.sessions._store import SessionStore
from tests.supervisor.sessions.test_store_journal import _call, _rows

if TYPE_CHECKING:
    from pathlib import Path

    import pytest


class _Held:
    """Wraps the store's batch apply: the flusher's batch (the first one applied off the trio thread) waits until
    :attr:`go` is set; the thread says when it holds it (:attr:`entered`)."""

    def __init__(self, store: SessionStore) -> None:
        self.entered = threading.Event()
        self.go = threading.Event()
        self.real = store._apply_batch
        self.trio_thread = threading.get_ident()

    def __call__(self, batch: Any) -> None:
        if threading.get_ident() != self.trio_thread and not self.entered.is_set():
            self.entered.set()
            self.go.wait(30)
        self.real(batch)


def _held_store(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[SessionStore, _Held]:
    """A store at ``path`` whose flusher's first batch is held in its thread (:class:`_Held`)."""
    store = SessionStore(str(path))
    held = _Held(store)
    monkeypatch.setattr(store, "_apply_batch", held)
    return store, held


async def test_a_read_while_the_flusher_applies_waits_for_its_batch_and_then_applies_what_came_since(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "sessions.sqlite3"
    store, held = _held_store(path, monkeypatch)
    for n in range(3):
        _call(store, "s", n, output=f"first {n}")
    store.commit()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(store.flush_off_thread)
        await trio.to_thread.run_sync(held.entered.wait, 30)  # the flusher's thread holds the first batch
        for n in range(3, 6):  # the trio thread goes on: queued and made durable while the batch is held
            _call(store, "s", n, output=f"then {n}")
        store.commit()
        reader = trio.Event()
        reading = threading.Event()  # the reader is flushing (and waits there for the flusher's batch)
        finish = store._finish_handed

        def finishing() -> None:
            if threading.get_ident() != held.trio_thread:
                reading.set()
            finish()

        monkeypatch.setattr(store, "_finish_handed", finishing)
        seen: list[dict[str, Any]] = []

        async def read() -> None:  # a read, in a thread of its own so that this test can let the batch go after it
            seen.extend(await trio.to_thread.run_sync(store.tool_calls, "s"))
            reader.set()

        nursery.start_soon(read)
        await trio.to_thread.run_sync(reading.wait, 30)
        held.go.set()
        await reader.wait()
    assert [c["call_id"] for c in seen] == [f"c{n}" for n in range(6)]
    assert [call_id for call_id, _ in _rows(path)] == [f"c{n}" for n in range(6)]  # applied in the order queued
    assert store.write_errors == 0, store.last_write_error
    store.close()
    assert not list(tmp_path.glob("sessions.sqlite3.pending-*"))  # every line applied: the journal went


async def test_the_journal_does_not_start_again_over_lines_the_flushers_batch_did_not_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "sessions.sqlite3"
    store, held = _held_store(path, monkeypatch)
    _call(store, "s", 0)
    store.commit()
    journal = store._journal
    assert journal is not None
    # due to start again as soon as more is written (the flusher's batch is taken just below the bound)
    monkeypatch.setattr(_journal, "ROLL_BYTES", journal.offset)
    monkeypatch.setattr(_queued_db, "ROLL_BYTES", journal.offset)
    generation = journal.generation
    async with trio.open_nursery() as nursery:
        nursery.start_soon(store.flush_off_thread)
        await trio.to_thread.run_sync(held.entered.wait, 30)
        _call(store, "s", 1, output="written while the batch was applied")
        store.commit()  # past the bound now, and not in the flusher's batch
        held.go.set()
    assert journal.generation == generation  # not started again: c1's line is not applied yet
    # a crash now: the next open applies c1 from the journal (a copy of the files, the store still open here)
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in tmp_path.glob("sessions.sqlite3.pending-*"):  # the journal, as a dead process leaves it
        (copy / f.name).write_bytes(f.read_bytes())
    src = sqlite3.connect(path)
    try:
        dst = sqlite3.connect(copy / "sessions.sqlite3")
        src.backup(dst)  # the database as committed (its WAL included)
        dst.close()
    finally:
        src.close()
    reopened = SessionStore(str(copy / "sessions.sqlite3"))
    assert [c["call_id"] for c in reopened.tool_calls("s")] == ["c0", "c1"]
    reopened.close()
    # the next flush applies it, on the trio thread (a journal due to start again), and the journal starts again
    await store.flush_off_thread()
    assert journal.generation != generation
    assert [call_id for call_id, _ in _rows(path)] == ["c0", "c1"]
    store.close()


async def test_a_read_on_the_trio_thread_before_the_flushers_thread_started_applies_its_batch_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flusher has taken its batch but its thread has not started (it waits for a thread, a checkpoint of the
    trio loop): a read on the trio thread then may not wait for that thread (it would wait for itself) nor read
    without the batch; it applies the batch itself, once, and the thread later finds nothing to do."""
    faulthandler.dump_traceback_later(60, exit=True)  # a hang here would be the deadlock this test is about
    try:
        path = tmp_path / "sessions.sqlite3"
        store = SessionStore(str(path))
        for n in range(3):
            _call(store, "s", n)
        store.commit()
        gate = trio.Event()
        run_sync = trio.to_thread.run_sync

        async def gated(fn: Any, *args: Any, **kwargs: Any) -> Any:
            await gate.wait()
            return await run_sync(fn, *args, **kwargs)

        monkeypatch.setattr(trio.to_thread, "run_sync", gated)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(store.flush_off_thread)
            await trio.testing.wait_all_tasks_blocked()
            assert store._handed is not None  # taken and handed over, no thread has it
            _call(store, "s", 3)
            seen = [c["call_id"] for c in store.tool_calls("s")]  # on the trio thread
            gate.set()
        assert seen == ["c0", "c1", "c2", "c3"]
        assert [call_id for call_id, _ in _rows(path)] == ["c0", "c1", "c2", "c3"]  # each applied once
        assert store.write_errors == 0, store.last_write_error
        store.close()
    finally:
        faulthandler.cancel_dump_traceback_later()
