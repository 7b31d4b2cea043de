"""The order of a supervisor's start (``Supervisor.open``): the zygote is launched on the staged code before the
policy compiles, so its imports run while the supervisor compiles; the launched zygote is the one that serves; a
start that stops before its workers (a refused policy) leaves no zygote behind; a launched zygote that cannot
start leaves the launcher; the agent loops' HTTP client is made at their first model request; a schema many
toolboxes list is compiled once. Real supervisors, real
zygotes, a real model server on loopback; the only stand-ins are spies (around the compile, looking at this
process's children from /proc while it runs; around httpx's client class and the schema compiler, counting)."""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any

import httpx
import psutil
import pytest
import trio

import supervisor._running as running_module
import supervisor._supervisor as supervisor_module
import supervisor.tools._tool_lists as tool_lists
from sandbox import landlock_abi
from supervisor._errors import PolicyRefused
from supervisor._supervisor import Supervisor
from supervisor.workers import ZygoteSpawner
from supervisor.workers._launch import launcher_argv
from supervisor.workers._zygote_client import Zygote
from tests._policies import agent, local_model, system_toolbox, write_policy
from tests.supervisor._model_server import answer, model_server

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [
    pytest.mark.root,
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
    """The zygotes that run while each compile of ``Supervisor.open`` (``plan_and_apply``) runs (one list per
    compile)."""
    seen: list[list[int]] = []
    real = running_module.plan_and_apply

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(_zygotes())
        return real(*args, **kwargs)

    monkeypatch.setattr(running_module, "plan_and_apply", spy)
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
        serving = sup.services.spawner.serving  # type: ignore[attr-defined]
        assert serving is not None and serving.pid == launched  # that zygote serves: no second one was started
        assert _zygotes() == [launched]
        for runner in sup.runners:
            assert runner.worker is not None and runner.worker.pid is not None
            assert psutil.Process(runner.worker.pid).ppid() == launched
        assert [e for e in _events(sup) if e.startswith("zygote_")] == ["zygote_started"]
        assert (await sup.call("system_one_date", {})).status == "passed"
        # forks are cheap: more of them start at once by default than launchers would
        starts = sup.running.starts.parallel_starts(sup.runners, sup.compiled)
        assert starts == sup.compiled.zygote_parallel_starts > sup.compiled.parallel_starts
    assert not psutil.pid_exists(launched) or psutil.Process(launched).status() == psutil.STATUS_ZOMBIE


async def test_the_launcher_mode_launches_no_zygote(sandbox_tmp: Path, seen_while_compiling: list[list[int]]) -> None:
    policy = write_policy(
        sandbox_tmp, {"tester": agent(builtinToolboxes=[system_toolbox()])}, supervision={"spawn": "launcher"}
    )
    async with Supervisor.open(policy) as sup:
        assert seen_while_compiling == [[]] and _zygotes() == []
        assert (await sup.call("system_system_date", {})).status == "passed"
        starts = sup.running.starts.parallel_starts(sup.runners, sup.compiled)
        assert starts == sup.compiled.parallel_starts == 4 * (os.cpu_count() or 1)


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


async def test_the_model_http_client_is_made_at_the_first_model_request_not_at_start(
    sandbox_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An HTTP client (its TLS context: tens of ms of CPU) is made by the first agent run that asks a model, once
    for every later run, and none by a start whose loops never run. The model is a real server on loopback."""
    made: list[httpx.AsyncClient] = []
    real = httpx.AsyncClient

    def counting(**kwargs: Any) -> httpx.AsyncClient:
        made.append(real(**kwargs))
        return made[-1]

    monkeypatch.setattr(httpx, "AsyncClient", counting)
    monkeypatch.setenv("AGENTS_TEST_KEY", "sk-test-0123456789abcdef")
    with model_server(lambda _request: answer("done")) as server:
        policy = write_policy(
            sandbox_tmp,
            {"tester": agent(modelUrl=server.url, builtinToolboxes=[system_toolbox(capabilities=["date"])])},
            model_keys={"test": "AGENTS_TEST_KEY"},
            agent_loop=local_model(),
        )
        async with Supervisor.open(policy) as sup:
            assert made == []
            for _ in range(2):
                result = await sup.run_agent("tester", "hello")
                assert (result.status, result.data) == ("passed", "done"), result.data
            assert len(made) == 1 and len(server.requests) == 2
    assert made[0].is_closed  # closed with the supervisor


async def test_a_schema_many_toolboxes_list_is_compiled_once(
    sandbox_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three toolboxes of one kind list the same ``date`` schema: started one after another, the first worker's
    hello compiles it and the others reuse it (the supervisor's schema pool); every toolbox's tool still refuses
    arguments its schema does not allow."""
    compiled: list[str] = []
    real = tool_lists.compile_schema

    def counting(schema: Any, digest: str | None = None) -> Any:
        compiled.append(tool_lists.fingerprint(schema))
        return real(schema, digest)

    monkeypatch.setattr(tool_lists, "compile_schema", counting)
    boxes = [system_toolbox(name, capabilities=["date"]) for name in ("one", "two", "three")]
    policy = write_policy(sandbox_tmp, {"tester": agent(builtinToolboxes=boxes)}, supervision={"parallel_starts": 1})
    async with Supervisor.open(policy) as sup:
        assert sup.load_errors() == []
        schemas = {name: sup.runner(name).schemas[0] for name in ("one", "two", "three")}
        assert len(compiled) == 1 and {s.fingerprint for s in schemas.values()} == set(compiled)
        assert schemas["two"] is schemas["one"] and schemas["three"] is schemas["one"]
        for name in ("one", "two", "three"):
            assert (await sup.call(f"system_{name}_date", {})).status == "passed"
            refused = await sup.call(f"system_{name}_date", {"unexpected": 1})
            assert refused.status == "error" and "unexpected" in (refused.data or ""), refused.data
