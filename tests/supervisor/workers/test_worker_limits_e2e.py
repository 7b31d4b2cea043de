"""Time limits and loop latency that hold whatever a real confined worker does (root, real workers).

- One worker does its worst with its tool list (huge, ever-changing lists at the tools_changed rate limit, written
  into its real protocol pipe): another toolbox's trivial call still answers within 100 ms, every time.
- A stopped worker (SIGSTOP) handed a 256 KiB call: the call is answered at its wall-time limit, the worker is
  killed and restarted, a call queued behind it is answered too.
- The MCP frontend's stdin closes while a worker is stopped with a big call in flight: the supervisor exits promptly
  (it used to wait until the worker got SIGCONT).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import trio

from supervisor._supervisor import Supervisor
from tests._policies import agent, system_toolbox, write_policy
from tests._workers import pid_one
from toolboxes import encode

if TYPE_CHECKING:
    from supervisor.workers._worker import Worker

pytestmark = pytest.mark.root
REPO = Path(__file__).resolve().parents[3]


def _worker_process(launcher: int) -> int:
    return pid_one(launcher)


def _pipe_of(worker: Worker) -> str:
    """The path through which the worker process itself writes its protocol frames."""
    assert worker.pid is not None
    pid = _worker_process(worker.pid)
    ours = os.fstat(worker._proc.stdout.fileno()).st_ino  # type: ignore[union-attr]
    for fd in os.listdir(f"/proc/{pid}/fd"):
        if os.readlink(f"/proc/{pid}/fd/{fd}") == f"pipe:[{ours}]":
            return f"/proc/{pid}/fd/{fd}"
    raise AssertionError("the worker's protocol pipe was not found")


def _huge_list(generation: int) -> bytes:
    """A tools_changed frame of 600 tools, 36,000 schema values, none of them compiled before."""
    props = {f"p{i}": {"type": "string", "enum": ["a", "b"], "description": "x"} for i in range(9)}
    tools = [
        {
            "name": f"t{i}",
            "description": "huge",
            "input_schema": {"type": "object", "properties": {**props, "g": {"const": generation * 10_000 + i}}},
        }
        for i in range(600)
    ]
    return encode({"t": "tools_changed", "tools": tools})


def _last_const(tools: list[dict[str, Any]]) -> Any:
    return tools[-1]["input_schema"]["properties"].get("g", {}).get("const") if tools else None


@pytest.mark.slow
async def test_a_worker_relisting_huge_tool_lists_does_not_slow_another_toolbox(sandbox_tmp: Path) -> None:
    tools = [system_toolbox("hostile", ["date"]), system_toolbox("calm", ["date"])]
    policy = write_policy(sandbox_tmp, {"tester": agent(builtinToolboxes=tools)})
    frames = [_huge_list(g) for g in range(6)]
    async with Supervisor.open(policy) as sup:
        for _ in range(5):  # warm: the calm worker's own first calls
            assert (await sup.call("system_calm_date", {})).status == "passed"
        hostile = sup.runner("hostile").worker
        assert hostile is not None
        pipe = _pipe_of(hostile)
        done = trio.Event()

        def flood() -> None:
            with open(pipe, "wb") as out:
                for frame in frames:
                    out.write(frame)
                    out.flush()

        async def attack() -> None:
            await trio.to_thread.run_sync(flood)
            done.set()

        latencies: list[float] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(attack)
            with trio.fail_after(120):
                # Until the last list is taken (checked and compiled): the supervisor is busy all that time.
                while not done.is_set() or _last_const(hostile.tools) != 50_599:
                    start = time.monotonic()
                    result = await sup.call("system_calm_date", {})
                    latencies.append(time.monotonic() - start)
                    assert result.status == "passed", result.data
                    await trio.sleep(0.02)
        assert len(latencies) > 20, "the attack was over too soon to measure anything"
        # The 100 ms holds for 95 calls in 100; the worst single call is allowed more for the machine's own
        # scheduling (CI shares 2 cores): still a hundred times less than the seconds a compile on the loop took.
        ranked = sorted(latencies)
        assert ranked[int(len(ranked) * 0.95)] < 0.1 and ranked[-1] < 0.5, [round(x, 3) for x in ranked[-5:]]
        assert not hostile.dead.is_set()  # six lists in the window are within the limit: it keeps serving


async def test_a_stopped_worker_cannot_hold_a_big_call_past_its_limit(sandbox_tmp: Path) -> None:
    tools = [system_toolbox(capabilities=["execute-command", "date"])]
    policy = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=tools)},
        limits={"wall_time_s": 2},
        supervision={"restart_backoff_initial_s": 0.05},
    )
    async with Supervisor.open(policy) as sup:
        worker = sup.runner("system").worker
        assert worker is not None and worker.pid is not None
        os.kill(_worker_process(worker.pid), signal.SIGSTOP)
        results: dict[str, Any] = {}

        async def call(label: str, args: dict[str, Any], tool: str) -> None:
            start = time.monotonic()
            results[label] = (await sup.call(tool, args), time.monotonic() - start)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call, "big", {"command": "echo " + "x" * (256 * 1024)}, "system_system_execute_command")
            await trio.sleep(0.2)  # let the big frame fill the pipe first (an order, not a synchronisation)
            nursery.start_soon(call, "small", {}, "system_system_date")
        for label in ("big", "small"):
            result, took = results[label]
            assert result.status == "error", (label, result.data)
            assert took < 2 + 1.5, (label, took)  # the limit, plus scheduling on a loaded machine
        assert "stopped reading its input" in (worker.death_reason or ""), worker.death_reason
        with trio.fail_after(20):
            await worker.dead.wait()
            while (new := sup.runner("system").worker) is worker or new is None or new.state.value != "ready":  # noqa: ASYNC110
                await trio.sleep(0.02)  # the runner restarts on its own schedule
        assert (await sup.call("system_system_date", {})).status == "passed"


def _serve(policy: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "supervisor", "--policy", str(policy)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


async def test_the_supervisor_exits_on_eof_while_a_stopped_worker_holds_a_call(sandbox_tmp: Path) -> None:
    tools = [system_toolbox(capabilities=["execute-command", "date"])]
    policy = write_policy(sandbox_tmp, {"tester": agent(builtinToolboxes=tools)}, limits={"wall_time_s": 30})
    trace = sandbox_tmp / "state" / "trace.jsonl"
    proc = _serve(policy)
    assert proc.stdin is not None and proc.stdout is not None
    try:

        def send(message: dict[str, Any]) -> None:
            proc.stdin.write(json.dumps(message).encode() + b"\n")  # type: ignore[union-attr]
            proc.stdin.flush()  # type: ignore[union-attr]

        send(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            }
        )
        assert json.loads(await trio.to_thread.run_sync(proc.stdout.readline))["id"] == 0
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        [spawn] = [json.loads(line) for line in trace.read_text().splitlines() if '"worker_spawn"' in line]
        os.kill(_worker_process(spawn["pid"]), signal.SIGSTOP)
        send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {
                    "name": "system_system_execute_command",
                    "arguments": {"command": "echo " + "x" * (256 * 1024)},
                },
            }
        )
        await trio.sleep(0.5)  # the call is on its way into the stopped worker's pipe (an order only)
        start = time.monotonic()
        proc.stdin.close()
        code = await trio.to_thread.run_sync(lambda: proc.wait(timeout=60))
        took = time.monotonic() - start
        assert code == 0, proc.stderr.read().decode()[-2000:]  # type: ignore[union-attr]
        assert took < 15, took  # bounded: cancel 2 s, shutdown 0.5 s, grace 2 s + 2 s; it used to wait for SIGCONT
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
