"""No error while one toolbox loads ends the supervisor: it becomes a load error naming that toolbox.

Each test plants an unexpected exception (``RuntimeError("planted ...")``) in one load-time path of one toolbox
(``broken``) — its compilation, its folders, staging the worker code, its git skill source, its worker's start,
the handling of its tool list, the registry — and opens a real supervisor with real confined workers: the other
toolbox (``good``) serves, ``broken`` serves no tool, and ``load_errors()`` and the trace name it and the error.
The planted exceptions stand in for bugs; nothing else is replaced.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

import supervisor.calls._registry as registry_module
import supervisor.plan._apply as apply_module
import supervisor.plan._compile as compile_module
import supervisor.plan._policy_plan as policy_plan_module
import supervisor.plan._skill_clones as sources_module
from supervisor._supervisor import Supervisor
from supervisor._tool_lists import ServedTools
from supervisor.workers._worker import Worker
from tests._policies import agent, system_toolbox, write_policy

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

pytestmark = pytest.mark.root


def _policy(root: Path, **keys: Any) -> Path:
    return write_policy(
        root, {"tester": agent(builtinToolboxes=[system_toolbox("good"), system_toolbox("broken")], **keys)}
    )


def _trace(root: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (root / "state" / "trace.jsonl").read_text().splitlines()]


def _plant_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    real = policy_plan_module.plan_worker

    def plan_worker(config: Any, tb: Any, inputs: Any, **kw: Any) -> Any:
        if tb.name == "broken":
            raise RuntimeError("planted in compile")
        return real(config, tb, inputs, **kw)

    monkeypatch.setattr(policy_plan_module, "plan_worker", plan_worker)


def _plant_folders(monkeypatch: pytest.MonkeyPatch) -> None:
    real = apply_module.prepare_worker_folders

    def prepare(anchor: int, state_dir: str, spec: Any) -> list[str]:
        if spec.toolbox == "broken":
            raise PermissionError("planted in the folders")
        return real(anchor, state_dir, spec)

    monkeypatch.setattr(apply_module, "prepare_worker_folders", prepare)


def _plant_worker_start(monkeypatch: pytest.MonkeyPatch) -> None:
    real = Worker.start

    async def start(self: Worker, nursery: Any) -> None:
        if self.spec.toolbox == "broken":
            raise RuntimeError("planted in the worker start")
        await real(self, nursery)

    monkeypatch.setattr(Worker, "start", start)


def _plant_tool_list(monkeypatch: pytest.MonkeyPatch) -> None:
    real = ServedTools._take

    def take(self: ServedTools, runner: Any, *args: Any) -> None:
        if runner.name == "broken":
            raise RuntimeError("planted in the tool list")
        real(self, runner, *args)

    monkeypatch.setattr(ServedTools, "_take", take)


def _plant_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    real = registry_module.public_name

    def public_name(raw: str) -> str:
        if "broken" in raw:
            raise RuntimeError("planted in the registry")
        return real(raw)

    monkeypatch.setattr(registry_module, "public_name", public_name)


PLANTS: dict[str, tuple[Callable[[pytest.MonkeyPatch], None], str]] = {
    "compile": (_plant_compile, "did not load (compile): RuntimeError: planted in compile"),
    "folders": (_plant_folders, "did not load (its work and state folders): PermissionError: planted in the folders"),
    "worker start": (_plant_worker_start, "did not load (worker start): RuntimeError: planted in the worker start"),
    "tool list": (_plant_tool_list, "did not load (tool list): RuntimeError: planted in the tool list"),
    "registry": (_plant_registry, "did not load (tool list): RuntimeError: planted in the registry"),
}


@pytest.mark.parametrize("where", list(PLANTS))
async def test_an_exception_in_a_load_path_is_that_toolboxs_load_error(
    where: str, sandbox_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plant, expected = PLANTS[where]
    plant(monkeypatch)
    async with Supervisor.open(_policy(sandbox_tmp)) as sup:
        good = await sup.call("system_good_date", {})
        assert good.status == "passed", good.data
        names = {t.name for t in sup.list_tools()}
        assert "system_good_hostname" in names and not any("broken" in n for n in names)
        broken = await sup.call("system_broken_date", {})
        assert broken.status == "error"
        [error] = [e for e in sup.load_errors() if e.get("toolbox") == "broken"]
        assert error["message"].startswith("toolbox broken")
        assert expected in error["message"] and "restart the supervisor" in error["message"]
        assert "Tool not found: 'system_broken_date'" in broken.data
    assert any(
        r["event"] == "load_error" and r.get("toolbox") == "broken" and expected in r["message"]
        for r in _trace(sandbox_tmp)
    )
    assert _trace(sandbox_tmp)[-1]["event"] == "supervisor_stop"


async def test_worker_code_that_cannot_be_staged_is_every_toolboxs_load_error(
    sandbox_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def stage(state_dir: str) -> str:
        raise OSError(28, "No space left on device (planted)")

    monkeypatch.setattr(compile_module, "stage_worker_code", stage)
    async with Supervisor.open(_policy(sandbox_tmp)) as sup:
        assert sup.list_tools() == []
        errors = {e["toolbox"]: e["message"] for e in sup.load_errors()}
        assert set(errors) == {"good", "broken"}
        assert "did not load (staging the worker code): OSError: [Errno 28] No space left on device" in errors["good"]
        assert (await sup.call("system_good_date", {})).status == "error"


async def test_an_exception_on_a_git_sources_clone_path_is_that_sources_load_error(
    sandbox_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from labkit import make_skill, skill_md

    async def fetch(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("planted in the clone")

    monkeypatch.setattr(sources_module, "fetch_git_source", fetch)
    make_skill(sandbox_tmp / "local", "core", skill_md("core-utils"), scripts={"hello": "hello"})
    policy = _policy(
        sandbox_tmp,
        skillSources=[
            {"tag": "SkillGitRepo", "contents": {"url": "https://git.example.test/skills.git"}},
            {"tag": "SkillDirectory", "contents": "./local"},
        ],
    )
    async with Supervisor.open(policy) as sup:
        assert (await sup.call("system_broken_date", {})).status == "passed"
        assert (await sup.call("skill_enable_core-utils", {})).status == "passed"  # the local source loads
        [error] = sup.load_errors()
        assert error == {
            "toolbox": "skills",
            "agent": "tester",
            "source": "skillSources[0]",
            "message": "git source https://git.example.test/skills.git: the clone failed: "
            "RuntimeError: planted in the clone",
        }


async def test_an_unset_variable_of_one_openapi_toolbox_is_its_load_error_only(
    sandbox_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 25: a missing ``${GITHUB_TOKEN}`` in one OpenAPI toolbox of one agent leaves that toolbox out; the
    agent's other toolboxes, its other OpenAPI toolbox and every other agent load and serve."""
    monkeypatch.delenv("AS_TEST_UNSET_TOKEN_25", raising=False)
    monkeypatch.setenv("AS_TEST_SET_TOKEN_25", "t")
    spec = {
        "openapi": "3.0.3",
        "info": {"title": "t", "version": "1"},
        "paths": {"/ping": {"get": {"operationId": "ping", "responses": {"200": {"description": "ok"}}}}},
    }
    (sandbox_tmp / "spec.json").write_text(json.dumps(spec))

    def api(name: str, token: str) -> dict[str, Any]:
        return {
            "tag": "OpenAPIServer",
            "contents": {"Name": name, "SpecUrl": "./spec.json", "BaseUrl": "https://203.0.113.9", "Token": token},
        }

    policy = write_policy(
        sandbox_tmp,
        {
            "coder": agent(
                "coder",
                builtinToolboxes=[system_toolbox("good")],
                openApiToolboxes=[api("github", "${AS_TEST_UNSET_TOKEN_25}"), api("fine", "${AS_TEST_SET_TOKEN_25}")],
            ),
            "other": agent("other", builtinToolboxes=[system_toolbox("theirs")]),
        },
    )
    async with Supervisor.open(policy) as sup:
        assert (await sup.call("system_good_date", {})).status == "passed"
        assert (await sup.call("system_theirs_date", {})).status == "passed"
        names = {t.name for t in sup.list_tools()}
        assert "openapi_fine_ping" in names and not any("github" in n for n in names)
        [error] = sup.load_errors()
        assert (error["toolbox"], error["agent"]) == ("github", "coder")
        assert error["source"].endswith("coder.json $.contents.openApiToolboxes[0]")
        assert error["message"].startswith(
            "toolbox github (agent coder) did not load: the environment variable AS_TEST_UNSET_TOKEN_25 is not set"
        )
        refused = await sup.call("openapi_github_ping", {})
        assert refused.status == "error"
        assert "AS_TEST_UNSET_TOKEN_25 is not set" in refused.data
