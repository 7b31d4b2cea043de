"""The supervisor's end of the worker protocol against a fake worker, without root (the hostile-worker matrix).

A :class:`WorkerConnection` runs over trio's in-memory streams; the fake worker at the other end is this test, which
writes whatever frames or bytes a compromised worker could and reads (or stops reading) what the supervisor sends.
``terminate`` closes the fake worker's streams, as killing the process closes its pipes. Every case checks the same
outcome: the worker is ended (or, for the tolerated cases, kept), every call in flight is answered ``error`` naming
the cause, and nothing raises out of the connection. The root end-to-end versions (a real confined worker, frames
injected into its real pipe) are in ``test_hostile_worker.py``; ``test_runs_without_root`` re-runs this module as
uid 65534 to prove it needs no privilege.
"""

from __future__ import annotations

import gc
import math
import os
import shutil
import subprocess
import sys
from collections import deque
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgpack
import pytest
import trio
import trio.testing

from supervisor.tools._tool_lists import MAX_TOOLS
from supervisor.workers._connection import (
    CANCEL_GRACE_S,
    MAX_REQUESTS_IN_FLIGHT,
    MAX_TOOLS_CHANGED,
    ConnectionState,
    WorkerConnection,
)
from toolboxes import PROTOCOL_VERSION, FrameDecoder, encode

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable


async def inline(fn: Callable[..., Any], *args: Any) -> Any:
    """Prepare tool lists on the trio thread (a MockClock would jump while a thread works)."""
    return fn(*args)


def tool(name: str = "t", schema: Any = None, **extra: Any) -> dict[str, Any]:
    return {"name": name, "description": "d", "input_schema": schema or {"type": "object"}, **extra}


class FakeWorker:
    """The worker's end: frames it sends, frames it reads; ``blocking_stdin``: its stdin takes nothing it does not
    read (a lockstep stream), so a worker that stops reading blocks the supervisor's writes, as a full pipe does."""

    def __init__(
        self,
        *,
        wall_time_s: float = 5.0,
        blocking_stdin: bool = False,
        max_frame_bytes: int = 1 << 20,
        run_sync: Any = inline,
        on_request: Any = None,
        pipe_stdin: bool = False,
    ) -> None:
        self.out, from_worker = trio.testing.memory_stream_one_way_pair()
        to_worker: trio.abc.SendStream
        self.inp: trio.abc.ReceiveStream
        if blocking_stdin:
            to_worker, self.inp = trio.testing.lockstep_stream_one_way_pair()
        elif pipe_stdin:  # a real pipe, as a worker's stdin is: small calls take the write-at-once path
            read_end, write_end = os.pipe()
            to_worker, self.inp = trio.lowlevel.FdStream(write_end), trio.lowlevel.FdStream(read_end)
        else:
            to_worker, self.inp = trio.testing.memory_stream_one_way_pair()
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.requests: list[dict[str, Any]] = []
        self.terminations = 0
        self.exit_reason = "exited with status 0"
        self._decoder = FrameDecoder("to_worker")
        self._frames: deque[dict[str, Any]] = deque()

        async def answer(message: dict[str, Any]) -> dict[str, Any]:
            self.requests.append(message)
            return {"result": {"status": "passed", "data": "answered"}}

        self.conn = WorkerConnection(
            "fake",
            to_worker,
            from_worker,
            wall_time_s=wall_time_s,
            on_request=on_request or answer,
            on_event=lambda kind, data: self.events.append((kind, data)),
            terminate=self.terminate,
            exit_reason=self._exit,
            max_frame_bytes=max_frame_bytes,
            run_sync=run_sync,
        )

    async def terminate(self) -> None:
        self.terminations += 1
        await self.out.aclose()
        await self.inp.aclose()

    async def _exit(self) -> str:
        return self.exit_reason

    async def send(self, message: dict[str, Any]) -> None:
        await self.raw(encode(message))

    async def raw(self, data: bytes) -> None:
        try:
            await self.out.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the supervisor ended us while we wrote

    async def hello(self, tools: list[dict[str, Any]] | None = None, **extra: Any) -> None:
        await self.send({"t": "hello", "protocol": PROTOCOL_VERSION, "tools": tools or [tool()], **extra})

    async def frame(self) -> dict[str, Any]:
        """The next frame the supervisor sent."""
        while not self._frames:
            data = await self.inp.receive_some(1 << 16)
            assert data, "the supervisor closed the worker's stdin"
            self._frames.extend(self._decoder.feed(data))
        return self._frames.popleft()

    def kinds(self) -> list[str]:
        return [k for k, _ in self.events]


@asynccontextmanager
async def running(worker: FakeWorker, *, hello: bool = True) -> AsyncIterator[FakeWorker]:
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.conn.serve)
        if hello:
            await worker.hello()
            await worker.conn.wait_started()
            assert worker.conn.state is ConnectionState.READY
        yield worker
        nursery.cancel_scope.cancel()


async def call_in_background(
    nursery: trio.Nursery, worker: FakeWorker, results: list[Any], tool_name: str = "t", **kwargs: Any
) -> dict[str, Any]:
    """Start a call; return the call frame the worker received."""

    async def one() -> None:
        results.append(await worker.conn.call(tool_name, kwargs.pop("args", {}), {}, **kwargs))

    nursery.start_soon(one)
    return await worker.frame()


# -- the matrix: what a worker sends, and what it must cost ---------------------------------------------------------
def _nested_map(depth: int) -> bytes:
    return b"\x81\xa1x" * depth + b"\xc0"


def _schema_nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def _tools_changed(tools: Any, **extra: Any) -> bytes:
    return encode({"t": "tools_changed", "tools": tools, **extra})


#: name -> (bytes the worker writes once it said hello, text the death reason must hold)
KILLING = {
    "garbage bytes": (b"\xc1\xc1\xc1 not msgpack", "undecodable frame"),
    "a frame that is an integer": (msgpack.packb(5), "not a map"),
    "a frame that is a list": (msgpack.packb([1, 2]), "not a map"),
    "unknown message type": (encode({"t": "exec", "cmd": "sh"}), "unexpected message type 'exec'"),
    "no message type": (encode({"id": 1}), "unexpected message type None"),
    "message type not a string": (encode({"t": 7}), "unexpected message type 7"),
    "missing keys": (encode({"t": "result", "id": 1}), "lacks result"),
    "id that is a string": (encode({"t": "result", "id": "1", "result": {}}), "id must be an integer"),
    "id that is a boolean": (encode({"t": "result", "id": True, "result": {}}), "id must be an integer"),
    "oversized frame": (encode({"t": "event", "event": {"x": "y" * (2 << 20)}}), "larger than the protocol limit"),
    "deeply nested map": (_nested_map(2000), "undecodable frame"),
    "msgpack extension type": (
        msgpack.packb({"t": "event", "event": {"x": msgpack.ExtType(3, b"x")}}),
        "extension type 3",
    ),
    "non-string map key": (msgpack.packb({"t": "event", "event": {1: 2}}), "undecodable frame"),
    "result for a call never made": (
        encode({"t": "result", "id": 10**9, "result": {"status": "passed"}}),
        "unknown call id",
    ),
    "result for id 0": (encode({"t": "result", "id": 0, "result": {"status": "passed"}}), "unknown call id"),
    "result for a negative id": (encode({"t": "result", "id": -5, "result": {"status": "passed"}}), "unknown call id"),
    "second hello": (encode({"t": "hello", "protocol": PROTOCOL_VERSION, "tools": []}), "second hello"),
    "portal request without a call id": (
        encode({"t": "portal", "id": 1, "tool": "x", "args": {}}),
        "name its call by integer id",
    ),
    "portal request with a list as call id": (
        encode({"t": "portal", "id": 1, "call": [1], "tool": "x", "args": {}}),
        "name its call by integer id",
    ),
    "portal request whose tool is not a string": (
        encode({"t": "portal", "id": 1, "call": 1, "tool": 5, "args": {}}),
        "tool name",
    ),
    "portal request with deep arguments": (
        encode({"t": "portal", "id": 1, "call": 1, "tool": "x", "args": _schema_nested(70)}),
        "nested more than 64 deep",
    ),
    "host request whose op is a map": (encode({"t": "host", "id": 1, "call": 1, "op": {}}), "op name"),
    "portal flood": (
        b"".join(
            encode({"t": "portal", "id": i, "call": 1, "tool": "x", "args": {}})
            for i in range(MAX_REQUESTS_IN_FLIGHT + 1)
        ),
        "portal/host requests in flight",
    ),
    "tools_changed flood": (_tools_changed([tool()]) * (MAX_TOOLS_CHANGED + 1), "tools_changed messages within"),
    "tool list that is not a list": (_tools_changed({"a": 1}), "tools must be a list"),
    "tool that is not a map": (_tools_changed([5]), "tools must be a list"),
    "tool schema that is not a map": (_tools_changed([tool(schema=[1])]), "tools must be a list"),
    "too many tools": (_tools_changed([tool(f"t{i}") for i in range(MAX_TOOLS + 1)]), "more than the limit"),
    "empty tool name": (_tools_changed([tool("")]), "1 to 1024 characters"),
    "huge tool name": (_tools_changed([tool("n" * 5000)]), "1 to 1024 characters"),
    "description not a string": (_tools_changed([tool(description=5)]), "the description must be a string"),
    "annotations not a map": (_tools_changed([tool(annotations=[1])]), "annotations must be a map"),
    "schema nested 200 deep": (_tools_changed([tool(schema=_schema_nested(200))]), "nested more than 64 deep"),
    "NaN in a schema": (
        _tools_changed([tool(schema={"type": "object", "maximum": math.nan})]),
        "JSON cannot represent",
    ),
    "bytes in a schema": (
        _tools_changed([tool(schema={"type": "object", "default": b"\x00"})]),
        "bytes, which is not a JSON value",
    ),
    "load_errors not maps": (_tools_changed([], load_errors=[5]), "load_errors must be a list"),
    "event that is not a map": (encode({"t": "event", "event": [1]}), "event must be a map"),
    "event nested too deep": (encode({"t": "event", "event": _schema_nested(40)}), "event is nested more than"),
    "malformed result": (b"", "malformed result"),  # sent for the call in flight, below
    "result with 200k metadata pairs": (b"", "at most 256 pairs"),  # sent for the call in flight, below
}


@pytest.mark.parametrize("case", list(KILLING), ids=list(KILLING))
async def test_each_misbehaviour_ends_that_worker_and_answers_its_calls_with_the_cause(case: str) -> None:
    data, why = KILLING[case]
    worker = FakeWorker(max_frame_bytes=1 << 20)
    results: list[Any] = []
    async with running(worker), trio.open_nursery() as nursery:
        frame = await call_in_background(nursery, worker, results)
        if case == "malformed result":
            data = encode({"t": "result", "id": frame["id"], "result": {"status": "great"}})
        elif case == "result with 200k metadata pairs":
            data = encode(
                {"t": "result", "id": frame["id"], "result": {"status": "passed", "metadata": [["k", "v"]] * 200_000}}
            )
        await worker.raw(data)
        with trio.fail_after(5):
            await worker.conn.dead.wait()
    reason = worker.conn.death_reason or ""
    assert "broke the protocol" in reason and why in reason, reason
    assert worker.terminations >= 1
    [result] = results
    assert result.status == "error" and why in (result.data or ""), result.data
    assert "protocol_violation" in worker.kinds()


#: name -> bytes the worker writes after hello that must cost it nothing (it keeps serving)
TOLERATED = {
    "a late result for a finished call": "late",
    "an event with big strings": encode({"t": "event", "event": {f"k{i}": "v" * 10_000 for i in range(50)}}),
    "an event holding NaN": encode({"t": "event", "event": {"x": math.nan, "y": math.inf}}),
    "a tool with a hostile schema": _tools_changed([tool("bad", {"$schema": []}), tool("ok")]),
    "a tool whose $ref loops": _tools_changed([tool("loop", {"$ref": "#"}), tool("ok")]),
    "a unicode tool name": _tools_changed([tool("💥 tool"), tool("ok")]),
    "an event flood": b"".join(encode({"t": "event", "event": {"n": i}}) for i in range(300)),
}


@pytest.mark.parametrize("case", list(TOLERATED), ids=list(TOLERATED))
async def test_what_a_worker_may_send_costs_it_nothing(case: str) -> None:
    worker = FakeWorker()
    async with running(worker), trio.open_nursery() as nursery:
        if case == "a late result for a finished call":
            results: list[Any] = []
            frame = await call_in_background(nursery, worker, results)
            await worker.send({"t": "result", "id": frame["id"], "result": {"status": "passed", "data": "1"}})
            await trio.testing.wait_all_tasks_blocked()
            data = encode({"t": "result", "id": frame["id"], "result": {"status": "failed"}})
        else:
            data = TOLERATED[case]
        await worker.raw(data)
        # A call made after the bytes is answered only once they were read: frames are handled in order.
        results = []
        frame = await call_in_background(nursery, worker, results)
        await worker.send({"t": "result", "id": frame["id"], "result": {"status": "passed", "data": "fine"}})
        await trio.testing.wait_all_tasks_blocked()  # the in-memory frames are delivered and handled
        assert results[-1].data == "fine"
        assert worker.conn.state is ConnectionState.READY and worker.terminations == 0
    if case.startswith("a tool"):
        compiled = {t["name"]: s for t, s in zip(worker.conn.tools, worker.conn.schemas, strict=True)}
        assert compiled["ok"].validator is not None
        bad = [s for name, s in compiled.items() if name != "ok"]
        if case != "a unicode tool name":
            assert bad[0].validator is None and "invalid input schema" in (bad[0].error or "")
    if case == "an event flood":
        assert worker.kinds().count("worker_event") == 100  # the rest were counted and dropped


async def test_hello_problems_end_the_start() -> None:
    for hello, why in [
        ({"fatal": "toolbox failed to open: boom"}, "toolbox failed to open: boom"),
        ({"protocol": 99}, "hello for protocol '99'"),
    ]:
        worker = FakeWorker()
        async with running(worker, hello=False):
            await worker.hello(**hello)
            with trio.fail_after(5):
                await worker.conn.wait_started()
        assert worker.conn.state is ConnectionState.DEAD
        assert why in (worker.conn.death_reason or "")


async def test_requests_before_hello_are_a_violation() -> None:
    worker = FakeWorker()
    async with running(worker, hello=False):
        await worker.send({"t": "portal", "id": 1, "call": 1, "tool": "x", "args": {}})
        with trio.fail_after(5):
            await worker.conn.dead.wait()
    assert "portal request before hello" in (worker.conn.death_reason or "")


# -- the worker's life: crashes, timeouts, cancellation ---------------------------------------------------------------
async def test_a_crash_mid_call_answers_the_call_with_the_exit() -> None:
    worker = FakeWorker()
    worker.exit_reason = "was killed by SIGSEGV"
    results: list[Any] = []
    async with running(worker), trio.open_nursery() as nursery:
        await call_in_background(nursery, worker, results)
        await worker.out.aclose()  # the process died: EOF on its stdout
        with trio.fail_after(5):
            await worker.conn.dead.wait()
    assert results[0].status == "error" and "was killed by SIGSEGV" in results[0].data
    assert "restarted automatically" in results[0].data


#: the worker's stdin as a real pipe (a small call is written at once and the connection's one timer bounds its
#: wait) or as a memory stream (the write may block: a cancel scope of the call's own bounds it)
STDINS = pytest.mark.parametrize("pipe_stdin", [True, False], ids=["pipe", "memory stream"])


@STDINS
async def test_a_worker_that_never_answers_is_cancelled_then_killed_at_the_limit(
    autojump_clock: trio.testing.MockClock, pipe_stdin: bool
) -> None:
    worker = FakeWorker(wall_time_s=10, pipe_stdin=pipe_stdin)
    results: list[Any] = []
    async with running(worker), trio.open_nursery() as nursery:
        start = trio.current_time()
        frame = await call_in_background(nursery, worker, results)
        cancel = await worker.frame()  # the worker reads the cancel and ignores it
        assert cancel == {"t": "cancel", "id": frame["id"]}
        assert math.isclose(trio.current_time() - start, 10)
        await worker.conn.dead.wait()
    assert math.isclose(trio.current_time() - start, 10 + CANCEL_GRACE_S)
    assert results[0].status == "error" and "exceeded its wall-time limit of 10 s" in results[0].data
    assert f"did not stop call {frame['id']} within" in (worker.conn.death_reason or "")
    assert ("limit_hit", {"limit": "wall_time_s", "value": 10, "tool": "t"}) in worker.events


@STDINS
async def test_a_worker_that_honours_the_cancel_is_kept(
    autojump_clock: trio.testing.MockClock, pipe_stdin: bool
) -> None:
    worker = FakeWorker(wall_time_s=10, pipe_stdin=pipe_stdin)
    results: list[Any] = []
    async with running(worker), trio.open_nursery() as nursery:
        frame = await call_in_background(nursery, worker, results)
        await worker.frame()
        await worker.send({"t": "result", "id": frame["id"], "result": {"status": "error", "data": "cancelled"}})
        await trio.testing.wait_all_tasks_blocked()
        assert results and worker.conn.state is ConnectionState.READY and worker.terminations == 0
    assert "exceeded its wall-time limit" in results[0].data


@STDINS
async def test_a_cancelled_caller_cancels_in_the_worker_and_gets_cancelled(pipe_stdin: bool) -> None:
    worker = FakeWorker(pipe_stdin=pipe_stdin)
    async with running(worker), trio.open_nursery() as nursery:
        scope = trio.CancelScope()
        finished: list[str] = []

        async def caller() -> None:
            with scope:
                await worker.conn.call("t", {}, {})
            finished.append("cancelled" if scope.cancelled_caught else "returned")

        nursery.start_soon(caller)
        frame = await worker.frame()
        scope.cancel()
        assert await worker.frame() == {"t": "cancel", "id": frame["id"]}
        await worker.send({"t": "result", "id": frame["id"], "result": {"status": "error"}})
    assert finished == ["cancelled"] and worker.terminations == 0


async def test_the_connections_timer_ends_each_wait_at_its_own_deadline(autojump_clock: trio.testing.MockClock) -> None:
    """Calls written at once share the connection's timer: a later call with a shorter limit is ended first, at its
    own deadline, the earlier one at its own; an answered call in between costs nothing."""
    worker = FakeWorker(wall_time_s=100, pipe_stdin=True)
    ended: dict[str, tuple[float, str]] = {}
    async with running(worker), trio.open_nursery() as nursery:
        start = trio.current_time()

        async def call(label: str, limit: float) -> None:
            result = await worker.conn.call("t", {}, {}, wall_time_s=limit)
            ended[label] = (trio.current_time() - start, result.data or "")

        nursery.start_soon(call, "long", 30)
        long = await worker.frame()
        nursery.start_soon(call, "answered", 50)
        answered = await worker.frame()
        await worker.send({"t": "result", "id": answered["id"], "result": {"status": "passed", "data": "ok"}})
        nursery.start_soon(call, "short", 5)
        short = await worker.frame()
        timer = worker.conn._timer
        assert timer is not None and math.isclose(timer.deadline, start + 5)  # the calls' waits: on the timer
        for frame in (short, long):  # the cancels arrive in deadline order; the worker honours each
            assert await worker.frame() == {"t": "cancel", "id": frame["id"]}
            await worker.send({"t": "result", "id": frame["id"], "result": {"status": "error", "data": "stopped"}})
    assert math.isclose(ended["short"][0], 5) and "exceeded its wall-time limit" in ended["short"][1]
    assert math.isclose(ended["long"][0], 30) and "exceeded its wall-time limit" in ended["long"][1]
    assert ended["answered"][1] == "ok"
    assert worker.conn.state is ConnectionState.READY and worker.terminations == 0


async def test_a_worker_that_stops_reading_cannot_hold_a_big_call_past_its_limit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The wall-time limit covers writing the call: a worker that reads nothing (SIGSTOP, a full pipe) is killed at
    the limit, and a small call queued behind the big one is answered too, not left waiting."""
    worker = FakeWorker(wall_time_s=10, blocking_stdin=True)
    results: dict[str, Any] = {}
    async with running(worker), trio.open_nursery() as nursery:
        start = trio.current_time()

        async def call(label: str, size: int) -> None:
            results[label] = await worker.conn.call("t", {"blob": "x" * size}, {})

        nursery.start_soon(call, "big", 256 * 1024)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(call, "small", 10)
        await worker.conn.dead.wait()
    assert math.isclose(trio.current_time() - start, 10)
    assert "stopped reading its input" in (worker.conn.death_reason or "")
    for label in ("big", "small"):
        assert results[label].status == "error" and "reading its input" in results[label].data, (
            label,
            results[label].data,
        )


async def test_shutdown_is_bounded_when_the_worker_reads_nothing(autojump_clock: trio.testing.MockClock) -> None:
    worker = FakeWorker(blocking_stdin=True)
    async with running(worker):
        start = trio.current_time()
        await worker.conn.shutdown()
        assert trio.current_time() - start <= 0.5 + 1e-9
        assert worker.conn.state is ConnectionState.DRAINING


async def test_a_request_is_answered_and_its_handler_failing_is_an_error_reply() -> None:
    async def broken(message: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("planted handler bug")

    for handler, expect in [(None, {"status": "passed", "data": "answered"}), (broken, "planted handler bug")]:
        worker = FakeWorker(on_request=handler)
        results: list[Any] = []
        async with running(worker), trio.open_nursery() as nursery:
            frame = await call_in_background(nursery, worker, results)
            await worker.send({"t": "portal", "id": 7, "call": frame["id"], "tool": "other", "args": {"a": 1}})
            reply = await worker.frame()
            assert reply["t"] == "reply" and reply["id"] == 7
            if isinstance(expect, dict):
                assert reply["result"] == expect
            else:
                assert expect in reply["error"]
            await worker.send({"t": "result", "id": frame["id"], "result": {"status": "passed"}})
        assert results[0].status == "passed" and worker.terminations == 0


async def test_a_bug_handling_a_frame_costs_that_worker_only() -> None:
    worker = FakeWorker()

    def on_event(kind: str, data: dict[str, Any]) -> None:
        worker.events.append((kind, data))
        if kind == "worker_event":
            raise KeyError("planted bug")

    worker.conn._on_event = on_event
    results: list[Any] = []
    async with running(worker), trio.open_nursery() as nursery:
        await call_in_background(nursery, worker, results)
        await worker.send({"t": "event", "event": {"x": 1}})
        with trio.fail_after(5):
            await worker.conn.dead.wait()
    assert "failed to handle (KeyError)" in (worker.conn.death_reason or "")
    assert any(k == "internal_error" and "planted bug" in d["error"] for k, d in worker.events)
    assert results[0].status == "error"


async def test_unencodable_arguments_are_an_error_result() -> None:
    worker = FakeWorker()
    async with running(worker):
        result = await worker.conn.call("t", {"n": 10**30}, {})
    assert result.status == "error" and "cannot be sent to its worker" in result.data
    assert worker.conn.state is ConnectionState.READY


async def test_calls_to_a_dead_worker_answer_at_once() -> None:
    worker = FakeWorker()
    async with running(worker):
        await worker.conn.kill("was killed for the test")
        result = await worker.conn.call("t", {}, {})
    assert result.status == "error" and "was killed for the test" in result.data


# -- the work a tool list costs the trio loop ----------------------------------------------------------------------
async def test_compiling_a_huge_tool_list_leaves_the_loop_free() -> None:
    """A big tool list (29,000 schema values) takes seconds to compile; it is compiled on a thread (the real one), so
    the trio loop stays responsive meanwhile: a 10 ms ticker's wake-ups come within 100 ms (95th percentile).

    The objects alive before are frozen out of the garbage collector, as ``Supervisor.open`` does once its workers
    started: a full collection of pytest's own heap would stall the loop for 150 ms and say nothing about ours."""
    props = {f"p{i}": {"type": "string", "enum": ["a", "b"], "description": "x"} for i in range(40)}
    huge = [tool(f"t{i}", {"type": "object", "properties": {**props, "n": {"const": i}}}) for i in range(120)]
    worker = FakeWorker(run_sync=None, max_frame_bytes=1 << 26)
    gc.collect()
    gc.freeze()
    try:
        await _watch_lags(worker, huge)
    finally:
        gc.unfreeze()


async def _watch_lags(worker: FakeWorker, huge: list[dict[str, Any]]) -> None:
    async with running(worker):
        lags: list[float] = []
        await worker.raw(_tools_changed(huge))
        while not worker.conn.schemas or len(worker.conn.schemas) != len(huge):
            before = trio.current_time()
            await trio.sleep(0.01)
            lags.append(trio.current_time() - before - 0.01)
        assert len(lags) > 20, "the list compiled too fast to show anything"
        # The 95th percentile holds the 100 ms; the worst single wake-up is allowed more, for the machine's
        # own scheduling (these tests share 2 cores with others): it is still a hundred times less than the seconds
        # a compile on the loop took. The end-to-end test holds every call to 100 ms.
        ranked = sorted(lags)
        assert ranked[int(len(ranked) * 0.95)] < 0.1 and ranked[-1] < 0.5, [round(x, 3) for x in ranked[-10:]]
        assert all(s.validator is not None for s in worker.conn.schemas)


# -- without root ------------------------------------------------------------------------------------------------------
@pytest.mark.skipif(os.geteuid() != 0, reason="already unprivileged: this very run is the proof")
def test_runs_without_root(sandbox_tmp: Path) -> None:
    """This module and the runner's (fake workers) pass as uid 65534 (nobody) with no capabilities: the connection
    and the supervision of restarts need no privilege. The code is copied where that uid can read it (a checkout
    under /root would not be)."""
    setpriv = shutil.which("setpriv")
    assert setpriv, "setpriv (util-linux) is needed to drop privileges"
    repo = Path(__file__).resolve().parents[3]
    copy = sandbox_tmp / "repo"
    for part in ("supervisor", "sandbox", "toolboxes", "tests"):
        shutil.copytree(repo / part, copy / part, ignore=shutil.ignore_patterns("__pycache__", ".hypothesis"))
    shutil.copy(repo / "pyproject.toml", copy / "pyproject.toml")
    subprocess.run(["chmod", "-R", "a+rX", str(copy)], check=True)
    os.chown(copy, 65534, 65534)  # pytest and hypothesis write their own files in the root
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(copy), "HOME": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run(
        [
            setpriv,
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-x",
            "-k",
            "not test_runs_without_root and not huge_tool_list",  # latency is not what this run is about
            "tests/supervisor/workers/test_worker_connection.py",
            "tests/supervisor/workers/test_runner.py",
        ],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "failed" not in proc.stdout
