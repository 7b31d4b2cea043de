"""The progress relay of one MCP call and the worker's progress events (no processes: pure code under trio)."""

from __future__ import annotations

from typing import Any

from supervisor.frontends._progress_relay import QUEUE, ProgressRelay, progress_token
from toolboxes import ProgressUpdate, parse_progress_event
from toolboxes._progress import progress_event


async def test_updates_are_written_in_order_and_only_while_they_increase() -> None:
    relay = ProgressRelay("tok")
    for value in (1, 2, 2, 1.5, 3):
        relay.report(ProgressUpdate(value, 3, f"at {value}"))
    relay.close()
    relay.report(ProgressUpdate(4))  # after close: dropped, never raises
    written: list[dict[str, Any]] = []

    async def write(message: dict[str, Any]) -> None:
        written.append(message)

    await relay.run(write)
    assert [m["params"]["progress"] for m in written] == [1, 2, 3]
    assert written[0] == {
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": {"progressToken": "tok", "progress": 1, "total": 3, "message": "at 1"},
    }
    assert relay.dropped == 3


async def test_a_slow_client_loses_updates_not_memory() -> None:
    relay = ProgressRelay(7)
    for value in range(QUEUE * 3):
        relay.report(ProgressUpdate(value + 1))
    assert relay.dropped == QUEUE * 2


def test_tokens_and_worker_events_are_checked() -> None:
    assert [
        progress_token(m)
        for m in (
            {"progressToken": "a"},
            {"progressToken": 5},
            {"progressToken": True},
            {"progressToken": ""},
            {"progressToken": 1.5},
            None,
            [],
        )
    ] == ["a", 5, None, None, None, None, None]
    ok = progress_event(3, ProgressUpdate(1.0, 2.0, "m" * 5000))
    call, update = parse_progress_event(ok)  # type: ignore[misc]
    assert call == 3 and update.total == 2.0 and len(update.message or "") == 1000
    for bad in (
        {"event": "progress", "call": "3", "progress": 1},
        {"event": "progress", "call": 3, "progress": True},
        {"event": "progress", "call": 3, "progress": float("nan")},
        {"event": "other", "call": 3},
        {"event": "progress", "call": 3, "progress": 10**20},
        "progress",
    ):
        assert parse_progress_event(bad) is None, bad
