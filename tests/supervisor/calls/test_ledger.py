"""The call ledger (no worker, no I/O but a real in-memory session store): session limits, counts across calls,
a session closed while a call of it runs, and what a reload cannot reset."""

from __future__ import annotations

from supervisor.calls import CallLedger, SessionLimits
from supervisor.sessions import Owner, SessionStore


def test_a_session_is_refused_past_its_limits_and_counted_from_zero_when_closed() -> None:
    ledger = CallLedger()
    limits = SessionLimits(max_calls=2, max_concurrent=1)
    assert ledger.refusal("s", limits) is None
    first, usage = ledger.open("s")
    assert ledger.refusal("s", limits) == "Session s already has 1 calls running (limit 1); wait for one to finish."
    ledger.close("s", usage, limits)
    second, usage = ledger.open("s")
    ledger.close("s", usage, limits)
    assert (first, second) == ("c1", "c2") and ledger.calls_of("s") == 2 and ledger.idle == 1
    assert ledger.refusal("s", limits) == "Session s reached its limit of 2 tool calls."
    ledger.forget_session("s")
    assert ledger.refusal("s", limits) is None and ledger.calls_of("s") == 0


def test_no_call_at_all_is_a_limit_of_zero() -> None:
    assert CallLedger().refusal("s", SessionLimits(max_calls=0)) == "Session s reached its limit of 0 tool calls."


def test_idle_counts_are_kept_only_when_the_policy_counts_calls() -> None:
    ledger = CallLedger()
    _, usage = ledger.open("s")
    ledger.close("s", usage, SessionLimits())
    assert ledger.idle == 0 and ledger.busy == 0


def test_a_session_closed_during_a_call_is_forgotten_by_the_store_once_the_call_ended() -> None:
    store = SessionStore(":memory:")
    session, _ = store.open_root(Owner("tester"), "name")
    assert session in store.open_roots
    ledger = CallLedger(store)
    _, usage = ledger.open(session)
    ledger.forget_session(session)
    assert session in store.open_roots and ledger.busy == 1  # its call still runs: nothing is dropped under it
    ledger.close(session, usage, SessionLimits(max_calls=5))
    assert session not in store.open_roots and ledger.busy == 0 and ledger.idle == 0  # not kept as idle either
    store.close()


def test_call_ids_go_on_whatever_limits_a_reload_brings() -> None:
    ledger = CallLedger()
    ids = []
    for limits in (SessionLimits(max_calls=10), SessionLimits(), SessionLimits(max_concurrent=3)):
        call_id, usage = ledger.open("s")
        ledger.close("s", usage, limits)
        ids.append(call_id)
    assert ids == ["c1", "c2", "c3"]
