"""A start-up or reload that fails after the policy was applied takes back what applying made, and nothing of the
running policy: the new toolboxes' work and state folders and the CA file go (``AppliedPlan.rollback``, called by
``Supervisor.open``'s exit stack and the reload's abort path), the running generation's workers, tools and folders
stay and serve, and the identity records stay (a number is never given twice: applying again gives the same one).

Each case fails a real step that comes after the apply (a session store that is no database, a trace file that
cannot be opened, a cancellation while the next generation is prepared or once a start's workers run), checks that
nothing of it is left (workers and their cgroups included) and that the old generation still serves, then lets the
same policy through and finds it all made (so every check can fail). Workers run with a uid each (a
registry of the test's own), so the folders' owners and the identity records are the real ones.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
import pytest
import trio
import yaml

from supervisor import Supervisor
from supervisor.plan._identities import TABLE_FILE
from supervisor.sessions import SessionStoreUnavailable
from tests._policies import agent, system_toolbox, write_policy

if TYPE_CHECKING:
    from supervisor._supervisor import Supervisor as RunningSupervisor

pytestmark = pytest.mark.root

REPO = str(Path(__file__).resolve().parents[2])
#: this module's uid range (unique on the host: other tests' ranges never meet it)
FIRST_UID = 3_270_400_000


def _policy(root: Path, boxes: dict[str, list[str]], **keys: Any) -> Path:
    """Agent ``tester`` with a date toolbox per name of ``boxes`` (its capabilities), a uid per worker; a toolbox
    called ``news`` terminates TLS (so applying writes the CA file its worker is granted)."""
    toolboxes = (
        {"tester/news": {"allowed_hosts": ["api.example.com"], "tls_termination": True}} if "news" in boxes else {}
    )
    return write_policy(
        root,
        {"tester": agent(builtinToolboxes=[system_toolbox(name, caps) for name, caps in boxes.items()])},
        toolboxes=toolboxes,
        worker_uids={"first": FIRST_UID, "count": 64},
        **keys,
    )


def _made(state: Path, box: str) -> dict[str, bool]:
    """Whether each place applying makes for ``box`` is there (the CA's folder: ``tls``)."""
    return {
        "work": (state / "work" / "tester" / box).exists(),
        "state": (state / "toolbox-state" / "tester" / box).exists(),
        "ca": (state / "tls").exists(),
    }


def _recorded_uid(state: Path, box: str) -> int:
    """The uid the state dir's identity table holds for ``tester/box``."""
    workers = json.loads((state / TABLE_FILE).read_text())["workers"]
    assert f"tester/{box}" in workers, workers
    return int(workers[f"tester/{box}"]["uid"])


def _tool_names(sup: RunningSupervisor) -> set[str]:
    return {tool.name for tool in sup.list_tools()}


def _own_groups(pid: int) -> list[Path]:
    """The worker's own cgroups (v1: one per controller, v2: one), as folders under ``/sys/fs/cgroup``."""
    groups = []
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "agents-supervise" in path:
            first = controllers.split(",")[0]
            groups.append(Path("/sys/fs/cgroup", first, path.lstrip("/")) if first else Path("/sys/fs/cgroup", path))
    return groups


async def _date(sup: RunningSupervisor, box: str) -> None:
    result = await sup.call(f"system_{box}_date", {})
    assert result.status == "passed", result.data


async def test_a_start_up_that_fails_after_the_apply_leaves_no_folder_nor_ca_file(
    sandbox_tmp: Path, fresh_uid_registry: Path
) -> None:
    """The session store is damaged: it is opened after the policy was applied, and the start fails there."""
    policy = _policy(sandbox_tmp, {"clock": ["date"], "news": ["date"]})
    state = sandbox_tmp / "state"
    state.mkdir(mode=0o711)
    store = state / "sessions.sqlite3"
    store.write_bytes(b"\x00not a database" * 100)
    with pytest.raises(SessionStoreUnavailable):
        async with Supervisor.open(policy):
            pass
    assert _made(state, "clock") == _made(state, "news") == {"work": False, "state": False, "ca": False}
    assert not (state / "work").exists() and not (state / "toolbox-state").exists()
    uid = _recorded_uid(state, "news")  # identity records stay

    os.rename(store, state / "damaged.sqlite3")
    async with Supervisor.open(policy) as sup:
        await _date(sup, "clock")
        assert _made(state, "clock") == _made(state, "news") == {"work": True, "state": True, "ca": True}
        assert (state / "work" / "tester" / "news").stat().st_uid == uid  # the number recorded before, again


def test_a_start_up_that_fails_is_one_line_from_the_cli_and_leaves_nothing_applied(
    sandbox_tmp: Path, fresh_uid_registry: Path
) -> None:
    """``agents-supervise tools`` on the same damaged store: one line, exit 2, no folder nor CA file left."""
    policy = _policy(sandbox_tmp, {"clock": ["date"], "news": ["date"]})
    state = sandbox_tmp / "state"
    state.mkdir(mode=0o711)
    (state / "sessions.sqlite3").write_bytes(b"\x00not a database" * 100)
    out = subprocess.run(
        [sys.executable, "-m", "supervisor", "tools", "--policy", str(policy)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": REPO},
        timeout=120,
    )
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""
    [line] = out.stderr.splitlines()
    assert line.startswith(f"agents-supervise: error: the session store {state / 'sessions.sqlite3'}"), line
    assert _made(state, "clock") == _made(state, "news") == {"work": False, "state": False, "ca": False}


async def test_a_reload_refused_after_the_apply_takes_back_its_effects_and_the_old_generation_serves(
    sandbox_tmp: Path, fresh_uid_registry: Path
) -> None:
    """A reload changes ``clock`` (restarted), adds the TLS-terminating ``news`` and moves the trace to a file that
    cannot be opened (a part prepared after the compile applied the new policy): refused; the new toolbox's folders
    and the CA file are gone, ``clock``'s worker is the one that ran before and still answers, the tool list is the
    old one. With an openable trace file the same reload goes through: ``news`` gets the uid recorded before."""
    policy = _policy(sandbox_tmp, {"clock": ["date"]})
    state = sandbox_tmp / "state"
    async with Supervisor.open(policy) as sup:
        assert _made(state, "clock") == {"work": True, "state": True, "ca": False}
        runner, worker, tools = sup.runner("clock"), sup.runner("clock").worker, _tool_names(sup)
        blocked = sandbox_tmp / "a-file"
        blocked.write_text("")
        _policy(sandbox_tmp, {"clock": ["date", "uptime"], "news": ["date"]}, trace={"path": str(blocked / "t")})
        outcome = await sup.reload()
        assert outcome.refused is not None and "trace.path" in outcome.refused, outcome.refused
        assert _made(state, "news") == {"work": False, "state": False, "ca": False}
        assert _made(state, "clock")["work"] and _made(state, "clock")["state"]
        assert sup.runner("clock") is runner and runner.worker is worker and runner.load_failure is None
        assert _tool_names(sup) == tools
        await _date(sup, "clock")  # the running policy stays
        uid = _recorded_uid(state, "news")

        data = yaml.safe_load(policy.read_text())
        del data["trace"]
        policy.write_text(yaml.safe_dump(data))
        outcome = await sup.reload()
        assert outcome.refused is None, outcome.describe()
        assert outcome.plan.started == (("tester", "news"),) and outcome.plan.restarted == (("tester", "clock"),)
        assert _made(state, "news") == {"work": True, "state": True, "ca": True}
        assert (state / "work" / "tester" / "news").stat().st_uid == uid
        assert "system_clock_uptime" in _tool_names(sup)
        await _date(sup, "news")


async def test_a_reload_given_up_while_its_generation_is_prepared_leaves_the_old_one_serving(
    sandbox_tmp: Path, fresh_uid_registry: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The switch's own prepare (the new toolboxes' git clones: a stand-in here, since a clone that raises is a
    load error by design and a real one cannot be held at a known point) first raises, then hangs and the reload
    is cancelled. Either way the reload ends before its commit: what the apply made is gone, the old ``clock`` (to
    be restarted by the reload) still serves, and a later reload goes through."""
    import supervisor._running as running_module

    policy = _policy(sandbox_tmp, {"clock": ["date"]})
    state = sandbox_tmp / "state"
    async with Supervisor.open(policy) as sup:
        runner, worker = sup.runner("clock"), sup.runner("clock").worker
        _policy(sandbox_tmp, {"clock": ["date", "uptime"], "news": ["date"]})
        cloning = trio.Event()

        async def failing(*_args: Any) -> list[Any]:
            raise RuntimeError("a bug while cloning the git sources")

        async def hanging(*_args: Any) -> list[Any]:
            cloning.set()
            await trio.sleep_forever()
            raise AssertionError("unreachable")

        with monkeypatch.context() as patched:
            patched.setattr(running_module, "prepare_git_sources", failing)
            outcome = await sup.reload()
        assert outcome.refused is not None and "a bug while cloning" in outcome.refused, outcome.refused
        assert _made(state, "news") == {"work": False, "state": False, "ca": False}
        assert sup.runner("clock") is runner and runner.worker is worker and runner.load_failure is None
        await _date(sup, "clock")

        with monkeypatch.context() as patched:
            patched.setattr(running_module, "prepare_git_sources", hanging)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(sup.reload)
                await cloning.wait()
                nursery.cancel_scope.cancel()
        assert _made(state, "news") == {"work": False, "state": False, "ca": False}
        assert sup.runner("clock") is runner and runner.worker is worker and runner.load_failure is None
        await _date(sup, "clock")

        outcome = await sup.reload()
        assert outcome.refused is None and outcome.plan.restarted == (("tester", "clock"),), outcome.describe()
        assert _made(state, "news") == {"work": True, "state": True, "ca": True}
        assert sup.runner("clock") is not runner
        await _date(sup, "news")


async def test_sighup_to_a_service_whose_reload_is_refused_after_the_apply_leaves_nothing_of_it(
    sandbox_tmp: Path, fresh_uid_registry: Path
) -> None:
    """The operator's way: a stdio ``serve``, its policy edited (``clock`` changed, ``news`` added, the trace moved
    where no file can be made), SIGHUP. One refusal line; ``news`` has no folder and no tool, the CA file is not
    there, ``clock``'s worker is the one that ran before (the same pid, alive) and still answers the session."""
    from tests.supervisor._service import serve_processes
    from tests.supervisor.test_reload import StdioClient

    _policy(sandbox_tmp, {"clock": ["date"]})
    state = sandbox_tmp / "state"
    async with serve_processes(sandbox_tmp) as start:
        service = await start()
        client = StdioClient(service.process)
        with trio.fail_after(180):
            await client.initialize()
            names = await client.names()
            assert names == {"system_clock_date"}
            [clock_pid] = service.spawns("clock")

            blocked = sandbox_tmp / "a-file"
            blocked.write_text("")
            _policy(sandbox_tmp, {"clock": ["date", "uptime"], "news": ["date"]}, trace={"path": str(blocked / "t")})
            line = await service.wait_line("the policy was not reloaded", service.hup())
            assert "trace.path" in line and "Traceback" not in line, line
            assert _made(state, "news") == {"work": False, "state": False, "ca": False}
            assert await client.names() == names
            assert not (await client.call("system_clock_date")).get("isError")
            assert service.spawns("clock") == [clock_pid] and os.path.exists(f"/proc/{clock_pid}")


async def test_a_start_up_cancelled_once_its_workers_run_stops_them_and_takes_back_its_folders(
    sandbox_tmp: Path, fresh_uid_registry: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cancellation comes when the first generation's workers have started but the start has not finished
    (a stand-in wraps the starts: a real cancellation cannot be aimed at that point). The workers are stopped, their
    cgroups gone, then the folders the apply made are taken back (a worker that ran leaves them empty)."""
    from supervisor._runners import RunnerStarts

    policy = _policy(sandbox_tmp, {"clock": ["date"], "news": ["date"]})
    state = sandbox_tmp / "state"
    real_start = RunnerStarts.start
    ran: dict[int, list[Path]] = {}

    with trio.CancelScope() as scope:

        async def start_then_cancel(self: RunnerStarts, runners: Any, compiled: Any) -> None:
            await real_start(self, runners, compiled)
            for runner in runners:
                assert runner.worker is not None and runner.worker.pid is not None
                pid = runner.worker.pid
                ran[pid] = _own_groups(pid)
                assert ran[pid] and all(group.is_dir() for group in ran[pid]), ran
            scope.cancel()
            await trio.lowlevel.checkpoint()

        monkeypatch.setattr(RunnerStarts, "start", start_then_cancel)
        async with Supervisor.open(policy):
            raise AssertionError("the start was cancelled: never reached")
    assert scope.cancelled_caught and len(ran) == 2
    for pid, groups in ran.items():
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE  # (init reaps it)
        assert not [group for group in groups if group.exists()]
    assert _made(state, "clock") == _made(state, "news") == {"work": False, "state": False, "ca": False}
