"""The frame decoder, dispatch and registry rebuild under hypothesis: nothing a worker sends raises out of them.

Random frames (well-formed messages of every kind with random fields, and random bytes) go through a real
:class:`WorkerConnection` (its far end the fake worker of ``test_worker_connection.py``) with a call in flight; the
tool lists it keeps are then registered and their validators run on random arguments. Whatever happens, the
connection ends ``ready`` or ``dead`` with a reason, the call in flight is answered (``error`` naming the cause when
the worker was ended), the registry builds, and every check returns a list. Examples are bounded for the normal
suite; ``scripts/chaos fuzz`` runs many more (``AGENTS_SUPERVISE_FUZZ_EXAMPLES``).
"""

from __future__ import annotations

import os
import types
from typing import Any

import msgpack
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supervisor.calls._registry import ToolRegistry
from supervisor.workers._connection import ConnectionState
from tests.supervisor.workers.test_worker_connection import FakeWorker, call_in_background, running
from toolboxes import encode

EXAMPLES = int(os.environ.get("AGENTS_SUPERVISE_FUZZ_EXAMPLES", "100"))

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(),
    st.text(max_size=12),
    st.binary(max_size=8),
    st.sampled_from(["object", "string", "#", "$ref", "status", "passed"]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.one_of(
                st.text(max_size=8),
                st.sampled_from(
                    [
                        "type",
                        "properties",
                        "$ref",
                        "$schema",
                        "required",
                        "enum",
                        "items",
                        "pattern",
                        "name",
                        "input_schema",
                    ]
                ),
            ),
            inner,
            max_size=4,
        ),
    ),
    max_leaves=25,
)
SCHEMAS = st.one_of(
    VALUES,
    st.fixed_dictionaries(
        {"type": st.just("object")},
        optional={
            "properties": st.dictionaries(st.text(max_size=4), VALUES, max_size=3),
            "$ref": st.sampled_from(["#", "#/x"]),
            "$schema": VALUES,
            "required": VALUES,
        },
    ),
)
TOOLS = st.lists(
    st.fixed_dictionaries(
        {"name": st.one_of(st.text(min_size=1, max_size=10), VALUES), "input_schema": SCHEMAS},
        optional={"description": VALUES, "annotations": VALUES},
    ),
    max_size=5,
)


def _message(kind: str, call_id: int) -> st.SearchStrategy[dict[str, Any]]:
    ids = st.one_of(st.just(call_id), st.integers(-3, call_id + 3), VALUES)
    fields = {
        "result": {
            "id": ids,
            "result": st.one_of(
                VALUES,
                st.fixed_dictionaries(
                    {"status": st.sampled_from(["passed", "failed", "error", "odd"])},
                    optional={"data": VALUES, "metadata": VALUES, "structured": VALUES, "attachments": VALUES},
                ),
            ),
        },
        "hello": {"protocol": st.just(1), "tools": TOOLS},
        "tools_changed": {"tools": st.one_of(TOOLS, VALUES), "load_errors": VALUES},
        "event": {"event": VALUES},
        "portal": {"id": ids, "call": ids, "tool": VALUES, "args": VALUES},
        "host": {"id": ids, "call": ids, "op": VALUES, "args": VALUES},
        "nonsense": {"x": VALUES},
    }[kind]
    return st.fixed_dictionaries({"t": st.just(kind), **fields})


def _frames(call_id: int) -> st.SearchStrategy[list[bytes]]:
    one = st.one_of(
        st.sampled_from(["result", "hello", "tools_changed", "event", "portal", "host", "nonsense"])
        .flatmap(lambda kind: _message(kind, call_id))
        .map(lambda m: msgpack.packb(m, use_bin_type=True)),
        st.binary(max_size=40),
    )
    return st.lists(one, min_size=1, max_size=6)


async def _one_run(frames: list[bytes], args: list[Any]) -> None:
    worker = FakeWorker(max_frame_bytes=1 << 20)
    results: list[Any] = []
    with trio.fail_after(600):  # the mock clock's seconds: a call never answered fails at once, never hangs
        async with running(worker), trio.open_nursery() as nursery:
            frame = await call_in_background(nursery, worker, results)
            assert frame["id"] == 1
            for data in frames:
                await worker.raw(data)
            await trio.testing.wait_all_tasks_blocked()
            if worker.conn.state is ConnectionState.READY:
                # Still serving: the call can be answered normally (unless a random result already did).
                await worker.raw(encode({"t": "result", "id": 1, "result": {"status": "passed", "data": "ok"}}))
            else:
                assert worker.conn.state is ConnectionState.DEAD and worker.conn.death_reason
            # The nursery waits for the call's answer: the worker's, the harness's, or (a frame left incomplete holds
            # back what follows it) the wall time's, which the mock clock reaches at once.
    assert len(results) == 1, "the call in flight was not answered"
    [result] = results
    assert result.status in ("passed", "failed", "error")
    if not _a_result_of_the_call(frames):
        # Nothing the worker sent was the call's result: the connection answered it, with the harness's result
        # while it served, or with an error naming the cause once the worker was ended.
        if worker.conn.state is ConnectionState.DEAD and result.status != "passed":
            assert result.status == "error" and result.data, result
        else:
            assert (result.status, result.data) == ("passed", "ok"), result
    # Otherwise the worker's own result answered it, whatever it said (an ``error`` without data is the worker's
    # to send), or the connection refused that result as malformed: any of the three statuses.
    registry = ToolRegistry()
    runner = types.SimpleNamespace(
        name="fuzz", tools=worker.conn.tools, schemas=worker.conn.schemas, spec=types.SimpleNamespace(agent="a")
    )
    registry.rebuild([runner])  # type: ignore[list-item]
    for tool in registry.tools.values():
        for each in args:
            assert isinstance(tool.validator.errors(each), list)


def _a_result_of_the_call(frames: list[bytes]) -> bool:
    """Whether one of the frames is a ``result`` message for the call in flight (id 1, or an id equal to it)."""
    for data in frames:
        try:
            message = msgpack.unpackb(data, raw=False, strict_map_key=False)
        except Exception:  # random bytes: not a message of their own
            continue
        if isinstance(message, dict) and message.get("t") == "result":
            try:
                if message.get("id") == 1:
                    return True
            except Exception:  # an id that cannot be compared
                continue
    return False


@pytest.mark.slow
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(frames=_frames(1), args=st.lists(st.dictionaries(st.text(max_size=4), VALUES, max_size=3), max_size=3))
def test_random_frames_never_raise_and_always_answer_the_call(frames: list[bytes], args: list[Any]) -> None:
    trio.run(_one_run, frames, args, clock=trio.testing.MockClock(autojump_threshold=0))
