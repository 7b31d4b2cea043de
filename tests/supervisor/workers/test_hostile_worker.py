"""A compromised worker attacks the supervisor through its protocol pipe; each attack costs that worker only.

The frames are written into the real worker's end of its stdout pipe (found through ``/proc/<pid>/fd``), exactly as
code running in the worker could write them: workers load only ``toolboxes.<kind>`` for known kinds, so a hostile
toolbox cannot be loaded, but the bytes on the pipe are the same. A ``hello`` cannot be replayed this way (a second
hello is itself a violation); ``tools_changed`` goes through the same checks of the tool list.
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import TYPE_CHECKING, Any

import msgpack
import pytest
import trio

from supervisor._supervisor import Supervisor
from supervisor.frontends._mcp_content import result_to_mcp
from supervisor.frontends._mcp_wire import encode_message
from supervisor.tools._tool_lists import MAX_TOOLS
from supervisor.tools._validation import ArgumentValidator
from supervisor.workers._worker import MAX_REQUESTS_IN_FLIGHT, MAX_TOOLS_CHANGED, Worker
from tests._policies import agent, system_toolbox, write_policy
from tests._workers import pid_one
from toolboxes import ToolResult, encode

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.root


@pytest.fixture
def policy(sandbox_tmp: Path) -> Path:
    tools = [system_toolbox(capabilities=["date", "execute-command"]), system_toolbox("other", ["date"])]
    return write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=tools)},
        supervision={"restart_backoff_initial_s": 0.05, "crash_loop_max_restarts": 100},
    )


def _pipe_of(worker: Worker) -> str:
    """The path through which the worker process itself writes its protocol frames."""
    assert worker.pid is not None
    pid = pid_one(worker.pid)
    ours = os.fstat(worker._proc.stdout.fileno()).st_ino  # type: ignore[union-attr]
    for fd in os.listdir(f"/proc/{pid}/fd"):
        if os.readlink(f"/proc/{pid}/fd/{fd}") == f"pipe:[{ours}]":
            return f"/proc/{pid}/fd/{fd}"
    raise AssertionError("the worker's protocol pipe was not found")


async def _inject(worker: Worker, data: bytes) -> None:
    def write() -> None:
        try:
            with open(_pipe_of(worker), "wb") as pipe:
                pipe.write(data)
        except BrokenPipeError:
            pass  # the supervisor already killed the worker and closed its end, before the flood was written

    await trio.to_thread.run_sync(write)


async def _killed_for(sup: Supervisor, worker: Worker, data: bytes) -> str:
    """Inject ``data``; wait for the worker's death; check the others serve and the toolbox comes back."""
    await _inject(worker, data)
    with trio.fail_after(10):
        await worker.dead.wait()
    other = await sup.call("system_other_date", {})
    assert other.status == "passed", other.data
    with trio.fail_after(10):
        while sup.runner("system").worker is worker:  # noqa: ASYNC110
            await trio.sleep(0.01)  # the runner restarts on its own schedule (the tool list is the new worker's)
        again = await sup.call("system_system_date", {})
    assert again.status == "passed", again.data
    return worker.death_reason or ""


def _tools_changed(tools: list[dict[str, Any]], **extra: Any) -> bytes:
    return encode({"t": "tools_changed", "tools": tools, **extra})


def _tool(name: str = "evil", schema: Any = None, **extra: Any) -> dict[str, Any]:
    return {"name": name, "description": "x", "input_schema": schema or {"type": "object"}, **extra}


def _nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


BAD_TOOL_LISTS = {
    "100k tools": (_tools_changed([_tool(f"t{i}") for i in range(100_000)]), f"more than the limit of {MAX_TOOLS}"),
    "schema 200 deep": (_tools_changed([_tool(schema=_nested(200))]), "nested more than 64 deep"),
    "schema of 300k values": (
        _tools_changed([_tool(schema={"type": "object", "enum": [{}] * 300_000})]),
        "more than 250000 values",
    ),
    "1 MB name": (_tools_changed([_tool("n" * (1 << 20))]), "1 to 1024 characters"),
    "empty name": (_tools_changed([_tool("")]), "1 to 1024 characters"),
    "annotations not a map": (_tools_changed([_tool(annotations=5)]), "annotations must be a map"),
    "bytes in a schema": (
        _tools_changed([_tool(schema={"type": "object", "default": b"\x00"})]),
        "bytes, which is not a JSON value",
    ),
    "NaN in a schema": (
        _tools_changed([_tool(schema={"type": "object", "maximum": math.nan})]),
        "JSON cannot represent",
    ),
    "load_errors not maps": (_tools_changed([], load_errors=[5]), "load_errors must be a list"),
    "msgpack ext type": (msgpack.packb({"t": "event", "event": {"x": msgpack.ExtType(3, b"x")}}), "extension type 3"),
    "deeply nested map": (b"\x81\xa1x" * 2000 + b"\xc0", "undecodable frame"),
    "portal flood": (
        b"".join(
            encode({"t": "portal", "id": i, "call": 1, "tool": "system_other_date", "args": {}}) for i in range(5000)
        ),
        f"more than {MAX_REQUESTS_IN_FLIGHT} portal/host requests",
    ),
    "tools_changed flood": (_tools_changed([_tool()]) * (MAX_TOOLS_CHANGED + 1), "tools_changed messages within"),
    "result for a call never made": (
        encode({"t": "result", "id": 10**9, "result": {"status": "passed"}}),
        "unknown call id",
    ),
}


@pytest.mark.parametrize("attack", list(BAD_TOOL_LISTS), ids=list(BAD_TOOL_LISTS))
async def test_each_attack_kills_only_that_worker(policy: Path, attack: str) -> None:
    data, why = BAD_TOOL_LISTS[attack]
    async with Supervisor.open(policy) as sup:
        worker = sup.runner("system").worker
        assert worker is not None
        start = time.monotonic()
        reason = await _killed_for(sup, worker, data)
        assert "broke the protocol" in reason and why in reason, reason
        assert time.monotonic() - start < 10
        assert "evil" not in {t.local_name for t in sup.list_tools()}


async def test_in_flight_call_ends_with_error_when_its_result_is_hostile(policy: Path) -> None:
    hostile = {"status": "passed", "metadata": [["k", "v" * 64]] * 200_000}
    async with Supervisor.open(policy) as sup:
        worker = sup.runner("system").worker
        assert worker is not None
        async with trio.open_nursery() as nursery:
            results: list[ToolResult] = []

            async def slow_call() -> None:
                results.append(await sup.call("system_system_execute_command", {"command": "sleep 20"}))

            nursery.start_soon(slow_call)
            with trio.fail_after(10):
                while not worker._pending:  # noqa: ASYNC110
                    await trio.sleep(0.01)  # the call is registered once its frame was sent
            call_id = next(iter(worker._pending))
            await _inject(worker, encode({"t": "result", "id": call_id, "result": hostile}))
        assert results[0].status == "error"
        assert (
            "broke the protocol (malformed result: result metadata must be a list of at most 256 pairs)"
            in results[0].data
        )
        assert (await sup.call("system_other_date", {})).status == "passed"


async def test_late_result_for_a_finished_call_is_ignored_and_event_payloads_are_bounded(policy: Path) -> None:
    async with Supervisor.open(policy) as sup:
        worker = sup.runner("system").worker
        assert worker is not None
        assert (await sup.call("system_system_date", {})).status == "passed"
        finished = worker._next_id - 1
        await _inject(
            worker,
            encode({"t": "result", "id": finished, "result": {"status": "failed"}})
            + encode({"t": "event", "event": {f"k{i}": "v" * 100_000 for i in range(100)}}),
        )
        # The worker is not killed for a late result: the next call on the same worker still passes.
        assert (await sup.call("system_system_date", {})).status == "passed"
        assert sup.runner("system").worker is worker and not worker.dead.is_set()
    trace = (policy.parent / "state" / "trace.jsonl").read_text().splitlines()
    events = [line for line in trace if '"worker_event"' in line]
    assert len(events) == 1 and len(events[0]) < 32 * 2100


async def test_unicode_names_are_served_under_safe_public_names(policy: Path) -> None:
    async with Supervisor.open(policy) as sup:
        worker = sup.runner("system").worker
        assert worker is not None
        await _inject(worker, _tools_changed([_tool("💥 tool"), _tool("💥 tool")]))
        with trio.fail_after(10):
            while not any(t.local_name == "💥 tool" for t in sup.list_tools()):  # noqa: ASYNC110
                await trio.sleep(0.01)  # the frame is read by the supervisor's reader task
        names = sorted(t.name for t in sup.list_tools() if t.local_name == "💥 tool")
        assert names == ["__tool", "__tool_2"]
        assert not worker.dead.is_set()
        assert (await sup.call("system_other_date", {})).status == "passed"


async def test_redos_pattern_in_a_schema_costs_a_bounded_time(policy: Path) -> None:
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a|a)*$"}}}
    async with Supervisor.open(policy) as sup:
        worker = sup.runner("system").worker
        assert worker is not None
        await _inject(worker, _tools_changed([_tool("redos", schema)]))
        with trio.fail_after(10):
            while sup.registry.get("redos") is None:  # noqa: ASYNC110
                await trio.sleep(0.01)  # the frame is read by the supervisor's reader task
        start = time.monotonic()
        result = await sup.call("redos", {"s": "a" * 40 + "!"})
        assert time.monotonic() - start < 2
        assert result.status == "error" and "took too long" in (result.data or "")
        assert (await sup.call("system_other_date", {})).status == "passed"


def test_pattern_properties_are_bounded_too() -> None:
    validator = ArgumentValidator(
        {"type": "object", "patternProperties": {"^(a|a)*$": {"type": "integer"}}, "additionalProperties": False}
    )
    start = time.monotonic()
    errors = validator.errors({"a" * 40 + "!": 1})
    assert time.monotonic() - start < 2
    assert "took too long" in errors[0].message
    assert validator.errors({"aaa": 1}) == []
    assert [e.path for e in validator.errors({"aaa": "x", "b": 1})] == ["aaa", "b"]


def test_structured_values_that_json_cannot_spell_stay_out_of_mcp_replies() -> None:
    result = ToolResult.from_wire({"status": "passed", "data": "Infinity", "structured": math.inf})
    line = encode_message({"jsonrpc": "2.0", "id": 1, "result": result_to_mcp(result, lambda a: b"")})
    reply = json.loads(line)  # strict JSON: no bare Infinity
    assert "structuredContent" not in reply["result"]
    assert reply["result"]["content"][0]["text"] == "Infinity"
    for bad in (
        {"status": "passed", "structured": b"\x00"},
        {"status": "passed", "structured": {1: 2}},
        {"status": "passed", "attachments": [{"media_type": "image/png", "path": "a"}] * 65},
    ):
        with pytest.raises(ValueError, match=r"structured|attachments"):
            ToolResult.from_wire(bad)


async def test_an_event_flood_reaches_the_trace_only_up_to_the_rate_limit(
    policy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import supervisor.workers._connection as connection_module

    monkeypatch.setattr(connection_module, "MAX_EVENTS", 20)
    monkeypatch.setattr(connection_module, "EVENTS_WINDOW_S", 0.5)
    async with Supervisor.open(policy) as sup:
        worker = sup.runner("system").worker
        assert worker is not None
        await _inject(worker, b"".join(encode({"t": "event", "event": {"n": i}}) for i in range(150)))
        # Frames are handled in order: once a call made after the flood is answered, the flood was read.
        assert (await sup.call("system_system_date", {})).status == "passed"
        await trio.sleep(0.6)  # let the rate window pass (a duration the limit is about, not a synchronisation)
        await _inject(worker, encode({"t": "event", "event": {"n": "after"}}))
        assert (await sup.call("system_system_date", {})).status == "passed"
        assert sup.runner("system").worker is worker  # dropping events costs the worker nothing
    trace = [json.loads(line) for line in (policy.parent / "state" / "trace.jsonl").read_text().splitlines()]
    events = [r["data"]["n"] for r in trace if r["event"] == "worker_event" and r["toolbox"] == "system"]
    assert events == [*range(20), "after"]
    [limit] = [r for r in trace if r["event"] == "limit_hit" and r.get("limit") == "worker events"]
    assert (limit["dropped"], limit["value"]) == (130, 20)


async def test_a_failed_egress_bridge_costs_its_own_worker_only(
    sandbox_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If a worker's bridge (its proxy and DNS stub) fails for any reason, that worker is killed and restarted; the
    supervisor and the other workers serve on. The failure is planted in the DNS stub here."""
    import supervisor.workers._launch as launch_module  # serves every confined process's bridge

    trigger = trio.Event()

    async def broken_stub(*args: Any, task_status: Any = trio.TASK_STATUS_IGNORED, **kwargs: Any) -> None:
        task_status.started()
        await trigger.wait()  # fails while serving, as a bug reached by a worker's request would
        raise RuntimeError("planted bridge bug")

    monkeypatch.setattr(launch_module, "serve_dns_stub", broken_stub)
    tools = [system_toolbox("net", ["date"]), system_toolbox("calm", ["date"])]
    policy = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=tools)},
        toolboxes={"net": {"allowed_hosts": ["www.example.test"]}},
        supervision={"restart_backoff_initial_s": 0.05, "crash_loop_max_restarts": 100},
    )
    trace = sandbox_tmp / "state" / "trace.jsonl"
    async with Supervisor.open(policy) as sup:
        assert (await sup.call("system_net_date", {})).status == "passed"
        trigger.set()
        with trio.fail_after(30):
            # records another task writes: nothing to wait on but the file
            while '"egress bridge"' not in trace.read_text():  # noqa: ASYNC110
                await trio.sleep(0.02)
            assert (await sup.call("system_calm_date", {})).status == "passed"
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    failures = [r for r in records if r["event"] == "internal_error" and r.get("where") == "egress bridge"]
    assert failures and failures[0]["toolbox"] == "net" and "planted bridge bug" in failures[0]["error"]
    assert any(r["event"] == "worker_exit" and r.get("toolbox") == "net" for r in records)


async def test_a_result_past_the_output_limit_is_cut_by_the_supervisor(sandbox_tmp: Path) -> None:
    """The supervisor's backstop of ``limits.output_bytes`` (issue 24 item 6): a worker that ignores the limit sends
    56 MiB for a call in flight; what the caller gets is at most the limit in each part, marked truncated, with words
    saying what was cut."""
    cap = 64 * 1024
    policy = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=[system_toolbox(capabilities=["execute-command"])])},
        limits={"output_bytes": cap},
    )
    hostile = {
        "status": "passed",
        "summary": "s" * (2 * cap),
        "data": "x" * (48 << 20),
        "structured": {"blob": "y" * (8 << 20)},
    }
    async with Supervisor.open(policy) as sup:
        worker = sup.runner("system").worker
        assert worker is not None
        results: list[ToolResult] = []
        async with trio.open_nursery() as nursery:

            async def slow_call() -> None:
                results.append(await sup.call("system_system_execute_command", {"command": "sleep 20"}))

            nursery.start_soon(slow_call)
            with trio.fail_after(10):
                while not worker._pending:  # noqa: ASYNC110
                    await trio.sleep(0.01)
            await _inject(worker, encode({"t": "result", "id": next(iter(worker._pending)), "result": hostile}))
    (result,) = results
    assert result.status == "passed" and result.truncated
    assert result.data is not None and len(result.data.encode()) <= cap
    assert result.data.startswith("xxxx") and "by limits.output_bytes" in result.data
    assert result.summary == "s" * cap and result.structured is None
    cut = result.meta("output_truncated") or ""
    assert f"data was {48 << 20} bytes" in cut and "structured value was" in cut and f"limit {cap}" in cut
    mcp = result_to_mcp(result, lambda a: b"")
    assert "structuredContent" not in mcp and sum(len(c["text"]) for c in mcp["content"]) <= cap + 100
