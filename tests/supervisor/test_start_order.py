"""The order of a supervisor's start (``Supervisor.open``): the zygote is launched on the staged code before the
policy compiles, so its imports run while the supervisor compiles; the launched zygote is the one that serves; a
start that stops before its workers (a refused policy) leaves no zygote behind; a launched zygote that cannot
start leaves the launcher. Real supervisors, real zygotes; the only stand-in is a spy around the compile that
looks at this process's children (as root, from /proc) while it runs."""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any

import psutil
import pytest
import trio

import supervisor._supervisor as supervisor_module
from sandbox._landlock import landlock_abi
from supervisor._errors import PolicyRefused
from supervisor._supervisor import Supervisor
from supervisor.workers import ZygoteSpawner
from supervisor.workers._launch import launcher_argv
from supervisor.workers._zygote_client import Zygote
from tests._policies import agent, system_toolbox, write_policy

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="workers drop to uid 65534 and need root"),
    pytest.mark.skipif(landlock_abi() < 1, reason="the kernel has no Landlock"),
]


def _zygotes() -> list[int]:
    """The pids of this process's zygotes (children running ``sandbox._zygote``)."""
    found = []
    for child in psutil.Process().children():
        try:
            if any("sandbox._zygote" in arg for arg in child.cmdline()):
                found.append(child.pid)
        except psutil.NoSuchProcess:
            pass
    return found


@pytest.fixture
def seen_while_compiling(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """The zygotes that run while each ``compile_policy`` of ``Supervisor.open`` runs (one list per compile)."""
    seen: list[list[int]] = []
    real = supervisor_module.compile_policy

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(_zygotes())
        return real(*args, **kwargs)

    monkeypatch.setattr(supervisor_module, "compile_policy", spy)
    return seen


def _events(sup: Supervisor) -> list[str]:
    sup.trace.flush()
    assert sup.compiled.trace_path is not None
    with open(sup.compiled.trace_path) as f:
        return [json.loads(line)["event"] for line in f]


async def test_the_zygote_imports_while_the_policy_compiles_and_is_the_one_that_serves(
    sandbox_tmp: Path, seen_while_compiling: list[list[int]]
) -> None:
    boxes = [system_toolbox(name, capabilities=["date"]) for name in ("one", "two")]
    policy = write_policy(sandbox_tmp, {"tester": agent(builtinToolboxes=boxes)}, supervision={"spawn": "zygote"})
    async with Supervisor.open(policy) as sup:
        assert sup.load_errors() == []
        ((launched,),) = seen_while_compiling  # one compile, one zygote running during it
        serving = sup.spawner.serving  # type: ignore[attr-defined]
        assert serving is not None and serving.pid == launched  # that zygote serves: no second one was started
        assert _zygotes() == [launched]
        for runner in sup.runners:
            assert runner.worker is not None and runner.worker.pid is not None
            assert psutil.Process(runner.worker.pid).ppid() == launched
        assert [e for e in _events(sup) if e.startswith("zygote_")] == ["zygote_started"]
        assert (await sup.call("system_one_date", {})).status == "passed"
    assert not psutil.pid_exists(launched) or psutil.Process(launched).status() == psutil.STATUS_ZOMBIE


async def test_the_launcher_mode_launches_no_zygote(sandbox_tmp: Path, seen_while_compiling: list[list[int]]) -> None:
    policy = write_policy(
        sandbox_tmp, {"tester": agent(builtinToolboxes=[system_toolbox()])}, supervision={"spawn": "launcher"}
    )
    async with Supervisor.open(policy) as sup:
        assert seen_while_compiling == [[]] and _zygotes() == []
        assert (await sup.call("system_system_date", {})).status == "passed"


async def test_a_policy_refused_at_compile_leaves_no_zygote(
    sandbox_tmp: Path, seen_while_compiling: list[list[int]]
) -> None:
    """The zygote was launched (it runs during the compile), the compile refuses the policy: ``open`` raises and the
    zygote is stopped and reaped."""
    policy = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=[system_toolbox()])},
        strict=True,
        landlock_min_abi=64,
        supervision={"spawn": "zygote"},
    )
    with pytest.raises(PolicyRefused, match="needs at least 64"):
        async with Supervisor.open(policy):
            pytest.fail("a refused policy started")
    ((launched,),) = seen_while_compiling
    assert not psutil.pid_exists(launched)
    assert _zygotes() == []


class Notes(list):  # type: ignore[type-arg]
    def __call__(self, event: str, fields: dict[str, Any]) -> None:
        self.append((event, fields))


async def test_a_launched_zygote_that_cannot_start_leaves_the_launcher(sandbox_tmp: Path) -> None:
    """A zygote launched ahead (``Zygote.launch``) on a broken code root dies during its imports: the spawner that
    waits for it notes one ``zygote_fallback`` saying why, and its spawns go to the launcher."""
    broken = sandbox_tmp / "broken" / "sandbox"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("")
    (broken / "_zygote.py").write_text("import agents_supervise_no_such_module\n")
    env = {"LANG": "C.UTF-8"}
    zygote = Zygote(sys.executable, str(broken.parent), env=env)
    zygote.launch([])
    notes = Notes()
    spawner = ZygoteSpawner(sys.executable, str(broken.parent), env=env, modules=[], note=notes, launched=zygote)
    async with trio.open_nursery() as nursery:
        await nursery.start(spawner.run)
        assert spawner.serving is None and spawner.zygote is zygote
        assert [event for event, _ in notes] == ["zygote_fallback"]
        reason = notes[0][1]["reason"]
        assert "could not start" in reason and "ModuleNotFoundError" in reason, reason
        code_root = os.path.dirname(os.path.dirname(os.path.abspath(supervisor_module.__file__)))
        spawner.argv = launcher_argv(sys.executable, code_root)  # a command it would serve, were it up
        child = await spawner.spawn(spawner.argv, env=env, cwd="/")
        assert psutil.Process(child.pid).ppid() == os.getpid()  # a launcher of ours, not a zygote's fork
        await child.aclose(grace_s=0.1)
        nursery.cancel_scope.cancel()
