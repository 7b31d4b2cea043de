"""Restarts and the crash-loop cap of :class:`ToolboxRunner`, with fake workers over in-memory streams (no root).

The runner makes its workers through ``make_worker``; here each is a :class:`WorkerConnection` whose far end is a
task of this test that says hello and answers calls. Time is a ``MockClock``: the backoffs, the crash-loop window and
the cool-down pass without waiting.
"""

from __future__ import annotations

import time
import types
from typing import TYPE_CHECKING, Any

import trio
import trio.testing

from supervisor.config import Supervision
from supervisor.workers._connection import WorkerConnection
from supervisor.workers._runner import ToolboxRunner
from toolboxes import PROTOCOL_VERSION, FrameDecoder, encode

if TYPE_CHECKING:
    from toolboxes import ToolResult


async def inline(fn: Any, *args: Any) -> Any:
    return fn(*args)


class ServingWorker:
    """What ``ToolboxRunner`` needs of a worker, over a connection to an in-process fake that answers every call."""

    made: list[ServingWorker] = []
    #: who made the process (the worker_spawn record says; a fake is made by no spawner)
    spawned_by: str | None = None

    def __init__(self, spec: Any, *, on_request: Any, on_event: Any, reuse: Any = ()) -> None:
        self.spec = spec
        self.pid = len(ServingWorker.made) + 1
        self._out, from_worker = trio.testing.memory_stream_one_way_pair()
        to_worker, self._inp = trio.testing.memory_stream_one_way_pair()
        self.conn = WorkerConnection(
            spec.toolbox,
            to_worker,
            from_worker,
            wall_time_s=spec.wall_time_s,
            on_request=lambda m: on_request(self, m),
            on_event=lambda kind, data: on_event(self, kind, data),
            terminate=self._terminate,
            exit_reason=self._exit,
            run_sync=inline,
        )
        ServingWorker.made.append(self)

    async def _terminate(self) -> None:
        await self._out.aclose()
        await self._inp.aclose()

    async def _exit(self) -> str:
        return "exited with status 3"

    async def _serve(self) -> None:
        decoder = FrameDecoder("to_worker")
        try:
            await self._out.send_all(
                encode(
                    {
                        "t": "hello",
                        "protocol": PROTOCOL_VERSION,
                        "tools": [{"name": "t", "input_schema": {"type": "object"}}],
                    }
                )
            )
            while data := await self._inp.receive_some(65536):
                for frame in decoder.feed(data):
                    if frame["t"] == "call":
                        await self._out.send_all(
                            encode(
                                {
                                    "t": "result",
                                    "id": frame["id"],
                                    "result": {"status": "passed", "data": f"worker {self.pid}"},
                                }
                            )
                        )
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    async def crash(self) -> None:
        await self._out.aclose()  # EOF: the process exited

    async def start(self, nursery: trio.Nursery) -> None:
        await nursery.start(self.conn.serve)
        nursery.start_soon(self._serve)
        await self.conn.wait_started()

    dead = property(lambda self: self.conn.dead)
    death_reason = property(lambda self: self.conn.death_reason)
    state = property(lambda self: self.conn.state)
    tools = property(lambda self: self.conn.tools)
    schemas = property(lambda self: self.conn.schemas)
    load_errors = property(lambda self: self.conn.load_errors)

    def stderr_tail(self) -> str:
        return ""

    async def call(self, *args: Any) -> ToolResult:
        return await self.conn.call(*args)

    async def kill(self, reason: str) -> None:
        await self.conn.kill(reason)

    async def stop(self) -> None:
        await self.conn.shutdown()
        self.conn.mark_dead("was stopped")
        await self._terminate()


async def test_a_crash_loop_rests_the_toolbox_for_its_cool_down_then_it_serves_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ServingWorker.made = []
    events: list[tuple[str, dict[str, Any]]] = []
    listed: list[tuple[bool, str | None]] = []  # what the runner told the supervisor each time its list changed

    async def no_requests(worker: Any, message: dict[str, Any]) -> dict[str, Any]:
        return {"error": "none"}

    spec = types.SimpleNamespace(toolbox="fake", wall_time_s=5.0, agent="a")
    runner = ToolboxRunner(
        spec,
        Supervision(
            restart_backoff_initial_s=0.1,
            restart_backoff_max_s=1.0,
            crash_loop_max_restarts=2,
            crash_loop_window_s=60.0,
            crash_loop_cooldown_s=30.0,
        ),  # type: ignore[arg-type]
        on_request=no_requests,
        on_event=lambda w, kind, data: events.append((kind, data)),
        on_tools=lambda r: listed.append((r.crash_looped, r.failed_reason)),
        make_worker=ServingWorker,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        assert (await runner.call("t", {}, {})).data == "worker 1"
        for n in range(3):  # three deaths within the window: more than max_restarts
            worker = runner.worker
            assert worker is not None
            await worker.crash()  # type: ignore[attr-defined]
            await worker.dead.wait()
            if n < 2:
                result = await runner.call("t", {}, {})  # waits for the restart
                assert result.data == f"worker {n + 2}", result.data
        await trio.testing.wait_all_tasks_blocked()
        down_at = trio.current_time()
        refused = await runner.call("t", {}, {})
        assert refused.status == "error" and "disabled for 30 s" in refused.data
        assert "died 3 times within 60 s" in refused.data and "exited with status 3" in refused.data
        assert runner.crash_looped and runner.resting_until is not None
        until = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(runner.resting_until))
        assert f"until {until}" in refused.data and "at once by a policy reload (SIGHUP)" in refused.data
        assert listed[-1] == (True, refused.data)  # told when it went down: its tools say why (the registry)
        [loop] = [d for k, d in events if k == "crash_loop"]
        assert (loop["deaths"], loop["cooldown_s"]) == (3, 30.0)
        while not any(k == "crash_loop_recovered" for k, _ in events):  # noqa: ASYNC110
            await trio.sleep(1)  # the mock clock: one simulated second per turn
        assert 30 <= trio.current_time() - down_at < 32
        assert not runner.crash_looped and listed[-1][0] is False  # told when it came back
        back = await runner.call("t", {}, {})
        assert (back.status, back.data) == ("passed", "worker 4")
        # The death count starts afresh: two more deaths are restarts, not another rest.
        for _ in range(2):
            worker = runner.worker
            await worker.crash()  # type: ignore[union-attr]
            await worker.dead.wait()  # type: ignore[union-attr]
            assert (await runner.call("t", {}, {})).status == "passed"
        assert [k for k, _ in events].count("crash_loop") == 1
        await runner.stop()
        nursery.cancel_scope.cancel()


async def test_every_death_is_traced_and_the_restart_answers_calls_waiting_for_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    ServingWorker.made = []
    events: list[str] = []

    async def no_requests(worker: Any, message: dict[str, Any]) -> dict[str, Any]:
        return {"error": "none"}

    spec = types.SimpleNamespace(toolbox="fake", wall_time_s=5.0, agent="a")
    runner = ToolboxRunner(
        spec,
        Supervision(restart_backoff_initial_s=0.5, crash_loop_max_restarts=100),  # type: ignore[arg-type]
        on_request=no_requests,
        on_event=lambda w, kind, data: events.append(kind),
        on_tools=lambda r: None,
        make_worker=ServingWorker,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        worker = runner.worker
        await worker.kill("was killed by the test")  # type: ignore[union-attr]
        start = trio.current_time()
        result = await runner.call("t", {}, {})
        assert result.data == "worker 2" and 0.5 <= trio.current_time() - start < 1
        assert events.count("worker_exit") == 1 and events.count("worker_restart") == 1
        nursery.cancel_scope.cancel()


class HangingStart(ServingWorker):
    """A worker whose second start never finishes (a slow launcher) until it is killed."""

    killed: list[str] = []

    async def start(self, nursery: trio.Nursery) -> None:
        if len(ServingWorker.made) == 1:
            await super().start(nursery)
            return
        await trio.sleep_forever()

    async def kill(self, reason: str) -> None:
        HangingStart.killed.append(reason)
        await super().kill(reason)


async def test_a_worker_starting_when_the_supervisor_stops_is_ended_not_left_running(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The chaos harness found launchers left running after ``Supervisor.open`` returned: a restart in progress when
    the supervisor stopped was neither the runner's worker (so not stopped) nor killed when its start was
    cancelled."""
    ServingWorker.made, HangingStart.killed = [], []

    async def no_requests(worker: Any, message: dict[str, Any]) -> dict[str, Any]:
        return {"error": "none"}

    spec = types.SimpleNamespace(toolbox="fake", wall_time_s=5.0, agent="a")
    runner = ToolboxRunner(
        spec,
        Supervision(restart_backoff_initial_s=0.1),
        on_request=no_requests,  # type: ignore[arg-type]
        on_event=lambda w, kind, data: None,
        on_tools=lambda r: None,
        make_worker=HangingStart,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        first = runner.worker
        await first.crash()  # type: ignore[union-attr]
        while len(ServingWorker.made) < 2:  # noqa: ASYNC110
            await trio.sleep(0.05)  # the restart begins after its backoff (mock clock)
        await runner.stop()
        nursery.cancel_scope.cancel()  # as Supervisor.open does after stopping the runners
    assert HangingStart.killed == ["its start was interrupted: the supervisor is stopping"]
