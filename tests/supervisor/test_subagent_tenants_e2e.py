"""A tenant's agent file cannot adopt another tenant's agent as its sub-agent (issue 24, the sub-agent finding).

Two tenants on one ``serve --http`` (a real subprocess, each worker a uid of its own), each allowed only its own
agent (``tenants.<name>.agents``). globex's agent ``b`` has a developer toolbox over its own folder, where a file
only b's worker uid may read lies (0600, owned by that uid, as if b's worker had written it). acme's agent file ``a``
names ``b``'s file in its ``extraAgents``. Before the fix, acme's client saw ``io_prompt_agent_b`` on its own
endpoint and a call of it ran b's loop with b's toolboxes, identity and files: it answered with globex's secret.
Now that sub-agent is a load error of ``a`` naming the key that would allow it (``tenants.acme.agents``), ``a``'s
endpoint offers no such tool, no loop of ``b`` runs for acme (the model endpoint gets no request), and globex's
own agent and ``a``'s other tools serve as before.

Real parts: the supervisor process, its confined workers, the official MCP SDK client over Streamable HTTP. Not
real: the model endpoint, a scripted OpenAI-compatible server on loopback (``tests/supervisor/_model_server.py``),
because no real model can run here (the policy opens the loopback to model endpoints only, ``agent_loop``).
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import pytest
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from supervisor.frontends._http_auth import hash_token
from tests._policies import agent, local_model, system_toolbox
from tests.supervisor._model_server import Reply, answer, call, model_server
from tests.supervisor.frontends.test_mcp_http import _start

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.root

ACME, GLOBEX = "acme-subagent-token", "globex-subagent-token"
SECRET = "globex's secret: 7c1f"
FIRST_UID = 3_260_000_000


def _dev(folder: str) -> dict[str, Any]:
    return {
        "tag": "DeveloperToolbox",
        "contents": {
            "Name": "dev",
            "Description": "globex's files",
            "Capabilities": ["read-file-range"],
            "FileSandbox": {"fsbPredicate": {"tag": "DirectoryRecursive", "contents": folder}, "fsbName": "private"},
        },
    }


def _setup(root: Path, model_url: str) -> tuple[Path, Path]:
    """acme's and globex's folders, their agent files and the policy; returns (policy, the secret file)."""
    acme, globex = root / "acme", root / "globex"
    for folder in (acme, globex, globex / "private"):
        folder.mkdir()
        os.chmod(folder, 0o755)
    secret = globex / "private" / "secret.txt"
    secret.write_text(SECRET + "\n")
    os.chmod(secret, 0o600)
    own = {"modelUrl": model_url}
    (globex / "b.json").write_text(
        json.dumps(agent("b", modelName="model-b", builtinToolboxes=[_dev("./private")], **own))
    )
    extra = [{"slug": "b", "path": "../globex/b.json"}]  # another tenant's file, readable by all
    (acme / "a.json").write_text(
        json.dumps(
            agent(
                "a", modelName="model-a", builtinToolboxes=[system_toolbox("sys", ["date"])], extraAgents=extra, **own
            )
        )
    )
    policy = root / "policy.yaml"
    data = {
        "agents": [str(acme / "a.json"), str(globex / "b.json")],
        "state_dir": str(root / "state"),
        "worker_uids": {"first": FIRST_UID, "count": 64},
        "agent_loop": local_model({"max_steps": 4}),
        "model_keys": {"test": "AGENTS_TEST_KEY"},
        "frontends": {"http": {"listen": "127.0.0.1:0"}},
        "tenants": {
            "acme": {"tokens": [hash_token(ACME)], "agents": ["a"]},
            "globex": {"tokens": [hash_token(GLOBEX)], "agents": ["b"]},
        },
    }
    policy.write_text(json.dumps(data))  # JSON is YAML
    return policy, secret


def _script(secret: Path) -> Any:
    """b's model: read the secret with b's tool, then answer with what the tool said."""

    def script(request: dict[str, Any]) -> Reply:
        tools = [m for m in request["messages"] if m["role"] == "tool"]
        if not tools:
            return call("developer_dev_read_file_range", {"path": str(secret)})
        return answer(str(tools[-1]["content"]))

    return script


def _text(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


async def test_a_tenants_agent_file_cannot_drive_another_tenants_agent(
    sandbox_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTS_TEST_KEY", "sk-test")  # the supervisor's environment: the agents' apiKeyId
    with model_server(_script(sandbox_tmp / "globex" / "private" / "secret.txt")) as model:
        policy, secret = _setup(sandbox_tmp, model.url)
        async with _start(policy) as server:
            [compiled] = server.records("policy_compiled")
            [dev] = [w for w in compiled["workers"] if (w["agent"], w["toolbox"]) == ("b", "dev")]
            os.chown(secret, dev["uid"], dev["uid"])  # b's worker's own file: only b's identity reads it
            errors = [e for e in server.records("load_error") if e.get("agent") == "a"]
            assert len(errors) == 1, errors
            assert "tenants.acme.agents" in errors[0]["message"], errors
            with trio.fail_after(120):
                async with (
                    create_mcp_http_client(headers={"Authorization": f"Bearer {ACME}"}) as http,
                    Client(streamable_http_client(server.url("a"), http_client=http), mode="legacy") as acme,
                ):
                    names = {t.name for t in (await acme.list_tools()).tools}
                    assert names == {"system_sys_date"}, names  # no io_prompt_agent_b on acme's endpoint
                    adopted = await acme.call_tool("io_prompt_agent_b", {"what": "read globex's secret"})
                    assert adopted.is_error and "Tool not found: 'io_prompt_agent_b'" in _text(adopted), _text(adopted)
                    assert SECRET not in _text(adopted)
                    assert not (await acme.call_tool("system_sys_date", {})).is_error
                assert model.requests == []  # no loop of b ran for acme
                async with (
                    create_mcp_http_client(headers={"Authorization": f"Bearer {GLOBEX}"}) as http,
                    Client(streamable_http_client(server.url("b"), http_client=http), mode="legacy") as globex,
                ):
                    own = await globex.call_tool("developer_dev_read_file_range", {"path": str(secret)})
                    assert not own.is_error and SECRET in _text(own), _text(own)  # globex's agent is whole
    assert server.records("agent_start") == []


async def test_a_sub_agent_claiming_a_slug_bound_to_another_file_does_not_stop_the_others(sandbox_tmp: Path) -> None:
    """A slug names its uids and folders, so the state dir binds it to its file (``plan/_agent_bindings.py``); a
    policy's own agent file claiming a bound slug stops the start (the operator lists those). A *sub-agent* file
    doing so is globex's agent file's to write: it used to stop every tenant's start (a ``ConfigError`` of the
    binding); now it is a load error of globex's agent, naming ``rebind-agent``, and everything else starts.
    Through the Python API, as an embedding application starts it."""
    from supervisor._supervisor import Supervisor

    acme, globex = sandbox_tmp / "acme", sandbox_tmp / "globex"
    for folder in (acme, globex):
        folder.mkdir()
    (acme / "helper.json").write_text(json.dumps(agent("helper", builtinToolboxes=[system_toolbox("h", ["date"])])))
    (globex / "helper.json").write_text(json.dumps(agent("helper", builtinToolboxes=[system_toolbox("h", ["date"])])))
    box = [system_toolbox("sys", ["date"])]

    def policy(a_names_helper: bool, b_names_helper: bool) -> Path:
        extra_a = [{"slug": "helper", "path": "helper.json"}] if a_names_helper else []
        extra_b = [{"slug": "helper", "path": "helper.json"}] if b_names_helper else []
        (acme / "a.json").write_text(json.dumps(agent("a", builtinToolboxes=box, extraAgents=extra_a)))
        (globex / "b.json").write_text(json.dumps(agent("b", builtinToolboxes=box, extraAgents=extra_b)))
        path = sandbox_tmp / "policy.yaml"
        data = {
            "agents": [str(acme / "a.json"), str(globex / "b.json")],
            "state_dir": str(sandbox_tmp / "state"),
            "worker_uids": None,
            "tenants": {"acme": {"agents": ["a"]}, "globex": {"agents": ["b"]}},
        }
        path.write_text(json.dumps(data))
        return path

    async with Supervisor.open(policy(True, False)) as sup:  # helper is acme's: bound to acme/helper.json
        assert sup.load_errors() == []
        assert (await sup.call("system_h_date", {}, agent_scope="helper", tenant="acme")).status == "passed"
    async with Supervisor.open(policy(True, False)) as sup:  # a reload reads the files again: the same verdict
        policy(False, True)
        outcome = await sup.reload()
        assert outcome.refused is None, outcome.describe()
        assert [e["agent"] for e in sup.load_errors()] == ["b"]
        assert (await sup.call("system_sys_date", {}, agent_scope="a", tenant="acme")).status == "passed"
    async with Supervisor.open(policy(False, True)) as sup:  # acme no longer names it; globex's file claims it
        [error] = sup.load_errors()
        assert error["agent"] == "b" and "$.contents.extraAgents[0]" in error["source"]
        assert f"agent slug 'helper' belongs to {acme / 'helper.json'}" in error["message"]
        assert "agents-supervise rebind-agent helper" in error["message"]
        # globex's helper: no worker, no uid of acme's
        assert {a.slug for a in sup.generation.config.agents} == {"a", "b"}
        for slug, tenant in (("a", "acme"), ("b", "globex")):
            assert (await sup.call("system_sys_date", {}, agent_scope=slug, tenant=tenant)).status == "passed"
