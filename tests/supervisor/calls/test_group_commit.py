"""Group commit (``supervisor/calls/_group_commit.py``): calls that end together share one flush, none returns before
the flush that holds what it queued, and a real supervisor answers a frontend's call only once its records are
written and committed (many calls in flight on a real confined worker)."""

from __future__ import annotations

import json
import sqlite3
from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing

from supervisor._supervisor import Supervisor
from supervisor.calls import GroupCommit
from supervisor.sessions._journal import parse
from tests._policies import agent, system_toolbox, write_policy

if TYPE_CHECKING:
    from pathlib import Path


def _durable_calls(state: Path, session: str) -> int:
    """The call records of ``session`` a SIGKILL right now would leave: the rows the database committed and the lines
    of the store's journals it has not applied yet (``supervisor/sessions/_journal.py``; the next open applies them)."""
    db = sqlite3.connect(state / "sessions.sqlite3")
    try:
        [(rows,)] = db.execute("SELECT count(*) FROM tool_calls WHERE session_id = ?", (session,))
        applied = {name: (g, a) for name, g, a in db.execute("SELECT name, generation, applied FROM journal_applied")}
    finally:
        db.close()
    for journal in state.glob("sessions.sqlite3.pending-*"):
        tail = parse(journal.read_bytes(), *applied.get(journal.name, (None, 0)))
        rows += sum(1 for name, params in tail.entries if name == "call" and params[0] == session)
    return rows


async def test_callers_of_one_round_share_one_flush_that_holds_all_they_queued() -> None:
    queued: list[int] = []
    flushed: list[list[int]] = []
    returned: list[tuple[int, int]] = []  # (caller, flushes seen when it returned)
    group = GroupCommit(lambda: flushed.append(list(queued)))

    async def caller(i: int) -> None:
        queued.append(i)
        await group.commit()
        returned.append((i, len(flushed)))

    async with trio.open_nursery() as nursery:
        for i in range(5):
            nursery.start_soon(caller, i)
    assert [sorted(f) for f in flushed] == [[0, 1, 2, 3, 4]] and group.flushes == 1
    assert sorted(returned) == [(i, 1) for i in range(5)]  # nobody returned before the flush
    await caller(5)  # a lone caller gets a flush of its own
    assert sorted(flushed[-1]) == [0, 1, 2, 3, 4, 5] and group.flushes == 2


async def test_a_caller_alone_flushes_at_once_without_yielding() -> None:
    flushed: list[int] = []
    group = GroupCommit(lambda: flushed.append(1))
    with trio.testing.assert_no_checkpoints():
        await group.commit(alone=True)
    assert flushed == [1] and group.flushes == 1


async def test_a_cancelled_caller_still_gets_its_records_flushed() -> None:
    queued: list[str] = []
    flushed: list[list[str]] = []
    group = GroupCommit(lambda: flushed.append(list(queued)))

    async def caller(name: str, cancelled: bool) -> None:
        with trio.CancelScope() as scope:
            queued.append(name)
            if cancelled:
                scope.cancel()  # whether it leads the round or waits for it, the flush still happens
            await group.commit()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(caller, "kept", False)
        nursery.start_soon(caller, "cancelled", True)
    assert [sorted(f) for f in flushed] == [["cancelled", "kept"]]


async def test_a_flush_that_raises_leaves_nobody_waiting() -> None:
    def broken() -> None:
        raise OSError("disk full")

    group = GroupCommit(broken)
    done: list[str] = []

    async def caller() -> None:
        try:
            await group.commit()
        except OSError:
            done.append("raised")  # the caller that ran the flush gets its error
        else:
            done.append("returned")

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(caller)
    assert sorted(done) == ["raised", "returned", "returned"]


@pytest.mark.root
async def test_every_answer_of_many_in_flight_comes_after_its_records_are_durable(sandbox_tmp: Path) -> None:
    policy = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=[system_toolbox(capabilities=["date"])])},
        sessions={"max_concurrent_calls": 64},
    )
    trace = sandbox_tmp / "state" / "trace.jsonl"
    late: list[str] = []
    async with Supervisor.open(policy) as sup:

        async def caller(i: int) -> None:
            session = sup.services.calls.frontends.open(f"caller-{i}", "tester")[0]
            for _ in range(5):
                result = await sup.call("system_system_date", {}, session_id=f"caller-{i}")
                assert result.status == "passed", result.data
                # What a SIGKILL right now would leave: the trace file as written, the session store's records as
                # committed (the database's rows and its journals' lines not yet applied: the next open applies them).
                ends = sum(
                    1
                    for line in trace.read_text().splitlines()
                    if (r := json.loads(line))["event"] == "call_end" and r["session"] == session
                )
                rows = _durable_calls(sandbox_tmp / "state", session)
                if ends < 1 or rows < 1:
                    late.append(f"caller {i}: {ends} call_end records, {rows} rows")
                assert ends == rows  # each of this caller's calls so far is in both

        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:
                for i in range(16):
                    nursery.start_soon(caller, i)
    assert not late


@pytest.mark.root
async def test_sequential_calls_commit_alone_and_calls_in_flight_share(sandbox_tmp: Path) -> None:
    policy = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=[system_toolbox(capabilities=["date"])])},
        sessions={"max_concurrent_calls": 64},
    )
    async with Supervisor.open(policy) as sup:
        group = sup.services.calls.records.group
        commit = group.commit
        seen: list[bool] = []

        async def watched(*, alone: bool) -> None:
            seen.append(alone)
            await commit(alone=alone)

        group.commit = watched  # type: ignore[method-assign]
        for _ in range(3):
            assert (await sup.call("system_system_date", {})).status == "passed"
        assert seen == [True, True, True]  # nobody else running: each flushes at once
        seen.clear()
        async with trio.open_nursery() as nursery:
            for _ in range(8):
                nursery.start_soon(sup.call, "system_system_date", {})
        assert len(seen) == 8 and not all(seen)  # the first to end had others running: it yields and shares


@pytest.mark.root
async def test_the_session_stores_checkpoints_run_off_the_trio_thread(
    sandbox_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from supervisor.sessions import _queued_db

    monkeypatch.setattr(_queued_db, "CHECKPOINT_COMMITS", 2)
    policy = write_policy(sandbox_tmp, {"tester": agent(builtinToolboxes=[system_toolbox(capabilities=["date"])])})
    ran_on: list[int] = []
    checkpointed = trio.Event()
    async with Supervisor.open(policy) as sup:
        store = sup.sessions
        assert store is not None
        checkpoint = store.checkpoint

        def watched() -> None:
            ran_on.append(threading.get_ident())
            checkpoint()
            trio.from_thread.run_sync(checkpointed.set)  # a thread trio.to_thread started can do this

        monkeypatch.setattr(store, "checkpoint", watched)
        for _ in range(25):
            assert (await sup.call("system_system_date", {})).status == "passed"
        store.flush()  # every call applied (the calls' commits went to the journal): a checkpoint is due
        checkpointed = trio.Event()  # a checkpoint after that flush
        with trio.fail_after(30):
            await checkpointed.wait()  # the flusher's next round (every FLUSH_INTERVAL_S) runs it
        db = sqlite3.connect(f"file:{sandbox_tmp / 'state' / 'sessions.sqlite3'}?immutable=1", uri=True)
        try:
            [(in_file,)] = db.execute("SELECT count(*) FROM tool_calls")  # the file itself, the WAL ignored
        finally:
            db.close()
    assert ran_on and threading.get_ident() not in ran_on
    assert in_file >= 20
