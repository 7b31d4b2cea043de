"""The supervisor's per-session memory stays bounded however many sessions come and go (issue 19: flat under
steady load). Real System toolbox workers through ``Supervisor.open``; the cap is lowered to 8 so that a few dozen
sessions pass it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

import supervisor.sessions._bounded as bounded
from supervisor._supervisor import Supervisor
from supervisor.sessions._bounded import remember
from tests._policies import agent, system_toolbox, write_policy

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.root

CAP = 8
DATE = "system_system_date"


def test_remember_keeps_the_newest_entries() -> None:
    seen: dict[str, int] = {}
    for i in range(10):
        remember(seen, f"s{i}", i, limit=3)
    remember(seen, "s7", 70, limit=3)  # set again: it becomes the newest
    assert list(seen.items()) == [("s8", 8), ("s9", 9), ("s7", 70)]


@pytest.fixture(autouse=True)
def small_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bounded, "MAX_REMEMBERED_SESSIONS", CAP)


def _policy(root: Path, **sessions: object) -> Path:
    return write_policy(
        root, {"tester": agent(builtinToolboxes=[system_toolbox(capabilities=["date"])])}, sessions=sessions
    )


def _sizes(sup: Supervisor) -> dict[str, int]:
    assert sup.sessions is not None
    return {
        "busy": sup.services.calls.ledger.busy,
        "idle": sup.services.calls.ledger.idle,
        "roots": len(sup.sessions._roots),
        "known": len(sup.sessions._known),
    }


async def test_many_sessions_leave_bounded_state_and_each_keeps_its_conversation(sandbox_tmp: Path) -> None:
    async with Supervisor.open(_policy(sandbox_tmp)) as sup:
        assert (await sup.call(DATE, {}, session_id="first")).status == "passed"
        for i in range(5 * CAP):
            assert (await sup.call(DATE, {}, session_id=f"client-{i}")).status == "passed"
        sizes = _sizes(sup)
        # no call cap: an idle session's count is no state at all; the caches hold the newest CAP sessions
        assert sizes == {"busy": 0, "idle": 0, "roots": CAP, "known": CAP}
        # "first" was forgotten by every cache: it is read back, same session, same conversation
        assert (await sup.call(DATE, {}, session_id="first")).status == "passed"
        assert sup.sessions is not None
        root = next(r for r in sup.sessions.rows(set(sup.sessions.parents())) if r.name == "first")
        calls = sup.sessions.tool_calls(root.id)
        assert len(calls) == 2 and calls[0]["conversation_id"] == calls[1]["conversation_id"] == root.conversation_id


async def test_call_counts_are_kept_for_the_newest_idle_sessions_only(sandbox_tmp: Path) -> None:
    async with Supervisor.open(_policy(sandbox_tmp, max_calls=2)) as sup:
        for _ in range(2):
            assert (await sup.call(DATE, {}, session_id="capped")).status == "passed"
        for i in range(CAP - 1):  # fewer sessions than the cap since: "capped" is still counted
            assert (await sup.call(DATE, {}, session_id=f"other-{i}")).status == "passed"
        refused = await sup.call(DATE, {}, session_id="capped")
        assert refused.status == "error" and "reached its limit of 2 tool calls" in (refused.data or "")
        for i in range(5 * CAP):
            assert (await sup.call(DATE, {}, session_id=f"more-{i}")).status == "passed"
        assert _sizes(sup)["idle"] == CAP and _sizes(sup)["busy"] == 0
        # forgotten after CAP newer sessions: it starts again at 0, as a new session would
        assert (await sup.call(DATE, {}, session_id="capped")).status == "passed"


async def test_a_short_retention_is_applied_while_the_supervisor_runs(sandbox_tmp: Path) -> None:
    """``keep_days`` under an hour is applied every quarter of it, not only hourly: the store of a soak (or of a
    deployment that keeps minutes) stays bounded while the service runs."""
    import trio

    keep_days = 3 / 86400  # 3 s: pruned every 0.75 s
    async with Supervisor.open(_policy(sandbox_tmp, keep_days=keep_days)) as sup:
        assert sup.sessions is not None
        assert (await sup.call(DATE, {}, session_id="short-lived")).status == "passed"
        assert any(r.name == "short-lived" for r in sup.sessions.rows(set(sup.sessions.parents())))
        with trio.fail_after(30):
            # polling what the prune leaves: it runs on the supervisor's own timer, no event to wait for
            while any(r.name == "short-lived" for r in sup.sessions.rows(set(sup.sessions.parents()))):  # noqa: ASYNC110
                await trio.sleep(0.1)
    pruned = [
        line for line in (sandbox_tmp / "state" / "trace.jsonl").read_text().splitlines() if '"sessions_pruned"' in line
    ]
    assert pruned, "the prune that removed the session left no trace record"
