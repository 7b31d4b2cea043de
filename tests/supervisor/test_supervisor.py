"""The supervisor with real confined workers: confinement seen from outside and inside, faults, limits."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import trio

from supervisor._supervisor import Supervisor
from tests._policies import agent, system_toolbox, write_policy
from tests._workers import pid_one

pytestmark = pytest.mark.root


def _worker_pid(sup: Supervisor, toolbox: str = "system") -> int:
    """The worker process proper: PID 1 of its namespace (``tests._workers.pid_one``)."""
    worker = sup.runner(toolbox).worker
    assert worker is not None and worker.pid is not None
    return pid_one(worker.pid)


def _status(pid: int) -> dict[str, str]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        out[key] = value.strip()
    return out


@pytest.fixture
def policy(sandbox_tmp: Path) -> Path:
    return write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=[system_toolbox()])},
        limits={"open_files": 100, "cpu_seconds": 77, "wall_time_s": 5},
        supervision={"restart_backoff_initial_s": 0.05},
    )


async def test_worker_is_confined_seen_from_outside(policy: Path) -> None:
    async with Supervisor.open(policy) as sup:
        pid = _worker_pid(sup)
        assert os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net")
        assert os.readlink(f"/proc/{pid}/ns/pid") != os.readlink("/proc/self/ns/pid")
        interfaces = [line.split(":")[0].strip() for line in Path(f"/proc/{pid}/net/dev").read_text().splitlines()[2:]]
        assert interfaces == ["lo"]
        status = _status(pid)
        assert status["NoNewPrivs"] == "1"
        assert status["Uid"].split() == ["65534"] * 4
        assert status["Gid"].split() == ["65534"] * 4
        assert int(status["CapEff"], 16) == 0 and int(status["CapPrm"], 16) == 0
        limits = Path(f"/proc/{pid}/limits").read_text()
        assert any(
            line.startswith("Max open files") and line.split()[3:5] == ["100", "100"] for line in limits.splitlines()
        )
        assert any(
            line.startswith("Max cpu time") and line.split()[3:5] == ["77", "78"] for line in limits.splitlines()
        )
        assert any(
            line.startswith("Max core file size") and line.split()[4:6] == ["0", "0"] for line in limits.splitlines()
        )


async def test_worker_is_confined_seen_from_inside(policy: Path) -> None:
    async with Supervisor.open(policy) as sup:
        user = await sup.call("system_system_running_user", {})
        assert user.status == "passed", user.data
        assert user.structured["data"]["uid"] == 65534
        info = await sup.call("system_system_process_info", {})
        assert info.structured["data"]["noNewPrivs"] == "1"
        assert int(info.structured["data"]["capEff"], 16) == 0
        assert info.structured["data"]["pid"] == 1  # PID 1 of its own namespace
        env = await sup.call("system_system_env_vars", {})
        assert "PATH" in env.structured["data"]["variables"]
        assert not set(env.structured["data"]["variables"]) & {"PYTHONPATH", "PWD", "SUDO_USER", "SSH_AUTH_SOCK"}


async def test_unknown_tool_and_bad_arguments_are_error_results(policy: Path) -> None:
    async with Supervisor.open(policy) as sup:
        missing = await sup.call("system_system_nope", {})
        assert missing.status == "error"
        assert "Tool not found: 'system_system_nope'" in missing.data
        assert "system_system_date" in missing.data
        bad = await sup.call("system_system_date", {"capability": 7, "extra": 1})
        assert bad.status == "error"
        assert bad.data.startswith("Tool call validation failed for 'system_system_date' with 2 errors:")
        assert "1. capability: Expected string but got integer" in bad.data
        assert "2. extra: Unknown property" in bad.data
        assert bad.data.endswith("Please correct these issues and try again.")
        # the seed's QueryError kind for a capability the toolbox does not list; another listed one: its tool
        unlisted = await sup.call("system_system_date", {"capability": "execute-command"})
        assert unlisted.status == "error" and unlisted.data.startswith(
            "CapabilityNotEnabledError: 'execute-command' is not among this toolbox's Capabilities (date, "
        )
        other = await sup.call("system_system_date", {"capability": "hostname"})
        assert other.data == "capability 'hostname' is not this tool's (date): call system_system_hostname for it"
        not_object = await sup.call("system_system_date", ["x"])
        assert not_object.status == "error" and "Expected object but got array" in not_object.data


async def test_the_policys_validation_switches_act_per_toolbox(sandbox_tmp: Path) -> None:
    """The seed's ValidationConfig: ``allow_extra_properties`` leaves a property out of what the tool gets,
    ``strict_mode: false`` reads ``"false"`` as false; both noted on the result. Another toolbox stays strict."""
    (sandbox_tmp / "project").mkdir()
    (sandbox_tmp / "project" / "a.txt").write_text("a")
    sandbox = {"fsbPredicate": {"tag": "DirectoryRecursive", "contents": "./project"}}
    policy = write_policy(
        sandbox_tmp,
        {
            "tester": agent(
                builtinToolboxes=[
                    system_toolbox("lenient", ["list-directory"], FileSandbox=sandbox),
                    system_toolbox("strict", ["list-directory"], FileSandbox=sandbox),
                ]
            )
        },
        validation={"allow_extra_properties": True, "strict_mode": False},
        toolboxes={"strict": {"validation": {"allow_extra_properties": False, "strict_mode": True}}},
    )
    args = {"path": "./project", "recursive": "false", "sort": "name"}
    async with Supervisor.open(policy) as sup:
        lenient = await sup.call("system_lenient_list_directory", args)
        assert lenient.status == "passed", lenient.data
        assert [e["name"] for e in lenient.structured["entries"]] == ["a.txt"]
        warnings = [v for k, v in lenient.metadata if k == "validation_warning"]
        assert "sort: not a property of this tool; left out (allowExtraProperties)" in warnings
        assert "recursive: the string 'false' was read as the boolean False (strictMode off)" in warnings
        strict = await sup.call("system_strict_list_directory", args)
        assert strict.status == "error"
        assert "1. recursive: Expected boolean but got string" in strict.data
        assert "2. sort: Unknown property" in strict.data


async def test_sigkill_mid_call_fails_that_call_and_the_next_succeeds(policy: Path) -> None:
    async with Supervisor.open(policy) as sup:
        pid = _worker_pid(sup)
        os.kill(pid, signal.SIGSTOP)  # the call below is in flight when the worker dies
        async with trio.open_nursery() as nursery:
            results = []

            async def call() -> None:
                results.append(await sup.call("system_system_date", {}))

            nursery.start_soon(call)
            # Until the call is on its way to the stopped worker: "all tasks blocked" alone also holds while a
            # task waits on a thread before the send, and a call not yet sent rightly goes to the next worker.
            worker = sup.runner("system").worker
            assert worker is not None
            with trio.fail_after(30):
                while not worker.origins:  # noqa: ASYNC110 (a plain dict of the connection: no event to wait on)
                    await trio.sleep(0.005)
            await trio.testing.wait_all_tasks_blocked()
            os.kill(pid, signal.SIGKILL)
        assert results[0].status == "error"
        assert "was killed by SIGKILL" in results[0].data
        assert results[0].meta("portal_error") == "PortalExecutionError"  # the seed's kind of a call that failed
        after = await sup.call("system_system_date", {})
        assert after.status == "passed"
        assert _worker_pid(sup) != pid


async def test_an_unexpected_exception_behind_the_portal_is_a_portal_execution_error(
    policy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with Supervisor.open(policy) as sup:

        async def broken(*args: object, **kwargs: object) -> None:
            raise RuntimeError("planted bug")

        monkeypatch.setattr(sup.runner("system"), "call", broken)  # a planted bug in the runner, not a mock of it
        result = await sup.call("system_system_date", {})
        assert (result.status, result.meta("portal_error")) == ("error", "PortalExecutionError")
        assert result.data == "Tool 'system_system_date' failed to execute: RuntimeError: planted bug"
        monkeypatch.undo()
        assert (await sup.call("system_system_date", {})).status == "passed"


async def test_wall_time_limit_stops_a_hung_worker(sandbox_tmp: Path) -> None:
    path = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=[system_toolbox()])},
        limits={"wall_time_s": 0.5},
        supervision={"restart_backoff_initial_s": 0.05},
    )
    async with Supervisor.open(path) as sup:
        pid = _worker_pid(sup)
        os.kill(pid, signal.SIGSTOP)  # a hung worker: it neither answers nor dies
        with trio.fail_after(10):
            result = await sup.call("system_system_hostname", {})
        assert result.status == "error"
        assert "exceeded its wall-time limit of 0.5 s" in result.data
        with trio.fail_after(10):
            # The stopped worker was killed; its restart may take longer than the 0.5 s a call waits for it.
            while (new := sup.runner("system").worker) is None or new.pid == pid or new.state.value != "ready":  # noqa: ASYNC110
                await trio.sleep(0.01)  # the runner restarts on its own schedule
            after = await sup.call("system_system_hostname", {})
        assert after.status == "passed", after.data
        records = [json.loads(line) for line in (sandbox_tmp / "state" / "trace.jsonl").read_text().splitlines()]
        kinds = [r["event"] for r in records]
        assert "limit_hit" in kinds and "worker_restart" in kinds


async def test_garbage_on_the_pipe_kills_only_that_worker(sandbox_tmp: Path) -> None:
    path = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=[system_toolbox(), system_toolbox("other")])},
        supervision={"restart_backoff_initial_s": 0.05},
    )
    async with Supervisor.open(path) as sup:
        worker = sup.runner("system").worker
        assert worker is not None
        pid = _worker_pid(sup)
        # Find the worker's end of its protocol pipe and write garbage into it, as a compromised worker could.
        ours = os.fstat(worker._proc.stdout.fileno()).st_ino  # type: ignore[union-attr]
        target = None
        for fd in os.listdir(f"/proc/{pid}/fd"):
            if os.readlink(f"/proc/{pid}/fd/{fd}") == f"pipe:[{ours}]":
                target = f"/proc/{pid}/fd/{fd}"
        assert target is not None
        with open(target, "wb") as pipe:
            pipe.write(b"\xc1\xc1\xc1 not msgpack")
        with trio.fail_after(10):
            await worker.dead.wait()
        assert "broke the protocol" in (worker.death_reason or "")
        other = await sup.call("system_other_date", {})
        assert other.status == "passed"
        with trio.fail_after(10):
            again = await sup.call("system_system_date", {})
        assert again.status == "passed"


async def test_crash_loop_disables_the_toolbox_with_a_clear_error(sandbox_tmp: Path) -> None:
    path = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=[system_toolbox()])},
        supervision={
            "restart_backoff_initial_s": 0.01,
            "restart_backoff_max_s": 0.02,
            "crash_loop_max_restarts": 2,
            "crash_loop_window_s": 60,
        },
    )
    async with Supervisor.open(path) as sup:
        runner = sup.runner("system")
        for _ in range(3):
            with trio.fail_after(10):
                while runner.worker is None or runner.worker.state.value != "ready":  # noqa: ASYNC110
                    await trio.sleep(0.01)  # the runner restarts on its own schedule; poll its state
            worker = runner.worker
            os.kill(worker.pid, signal.SIGKILL)  # type: ignore[arg-type]
            with trio.fail_after(10):
                await worker.dead.wait()
        with trio.fail_after(10):
            while runner.failed_reason is None:  # noqa: ASYNC110
                await trio.sleep(0.01)
        result = await sup.call("system_system_date", {})
        assert result.status == "error"
        assert "is disabled for 300 s, until " in result.data and "its worker died 3 times" in result.data


async def test_stopping_the_supervisor_leaves_no_process(policy: Path) -> None:
    async with Supervisor.open(policy) as sup:
        launcher = sup.runner("system").worker.pid  # type: ignore[union-attr]
        worker = _worker_pid(sup)
    for pid in (launcher, worker):
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


async def test_trace_records_the_lifecycle(policy: Path) -> None:
    async with Supervisor.open(policy) as sup:
        await sup.call("system_system_date", {})
    records = [json.loads(line) for line in (policy.parent / "state" / "trace.jsonl").read_text().splitlines()]
    kinds = [r["event"] for r in records]
    for kind in (
        "supervisor_start",
        "policy_compiled",
        "worker_spawn",
        "call_start",
        "call_end",
        "worker_exit",
        "supervisor_stop",
    ):
        assert kind in kinds, kind
    start = next(r for r in records if r["event"] == "call_start")
    end = next(r for r in records if r["event"] == "call_end")
    assert start["call_id"] == end["call_id"] and end["status"] == "passed" and end["duration_s"] >= 0
