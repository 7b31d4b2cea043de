"""Issue 24 defect 2, from real workers: an agent file opens the host's loopback (or a private address) to nothing;
only the policy opens it, per toolbox, and never to the supervisor's own sockets.

The policy is the shipped strict.yaml with its protections as they are: only what names this test's world is set
(agents, state dir, the HTTP frontend and its tenant, the hosts the operator grants a shell toolbox, and, in the
second half, the one key that opens the loopback). A service listens on the host's 127.0.0.1 (a thread of this
process: the proxy refuses the supervisor's own listening sockets, which the HTTP frontend records, not every socket
of the process) and the supervisor serves MCP over HTTP on another loopback port.
"""

from __future__ import annotations

import json
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import trio
import yaml

from supervisor._supervisor import Supervisor
from supervisor.config import load_config
from supervisor.frontends._http_auth import hash_token, http_frontend_from_policy
from supervisor.frontends._http_server import serve_mcp_http
from tests._policies import agent, system_toolbox, write_policy
from tests.toolboxes._api_server import Answer, serve_api

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from tests.toolboxes._api_server import ApiServer, Seen

pytestmark = pytest.mark.root

STRICT = Path(__file__).resolve().parents[2] / "policies" / "strict.yaml"


def _lua(name: str, hosts: list[str]) -> dict[str, Any]:
    """A Lua toolbox whose agent file grants ``hosts`` (the seed's file-agent grants ``localhost``)."""
    return {
        "tag": "LuaToolbox",
        "contents": {
            "Name": name,
            "Description": "scripts",
            "MaxMemoryMB": 64,
            "MaxExecutionTimeSeconds": 20,
            "AllowedTools": [],
            "AllowedHosts": hosts,
        },
    }


def _policy(root: Path, **toolboxes: dict[str, Any]) -> Path:
    strict = yaml.safe_load(STRICT.read_text())
    settings = {k: v for k, v in strict.items() if k not in ("agents", "state_dir", "toolboxes")}
    boxes = [
        system_toolbox("sh", capabilities=["execute-command"]),
        _lua("lua", ["localhost"]),
        _lua("priv", ["10.1.2.3"]),
    ]
    return write_policy(
        root,
        {"tenant": agent("tenant", builtinToolboxes=boxes)},
        **settings,
        toolboxes={"tenant/sh": {"allowed_hosts": ["www.example.test"]}, **toolboxes},
        frontends={"http": {"listen": "127.0.0.1:0"}},
        tenants={"acme": {"tokens": [hash_token("t0ken")], "agents": ["tenant"]}},
    )


@asynccontextmanager
async def _serving(policy: Path) -> AsyncIterator[tuple[Supervisor, int]]:
    """The supervisor and the port its HTTP frontend listens on."""
    settings, auth = await http_frontend_from_policy(load_config(str(policy)).policy)
    async with Supervisor.open(policy) as sup, trio.open_nursery() as nursery:
        base = await nursery.start(serve_mcp_http, sup, settings, auth)
        yield sup, int(base.rsplit(":", 1)[1])
        nursery.cancel_scope.cancel()


async def _sh(sup: Supervisor, command: str) -> dict[str, Any]:
    out = await sup.call("system_sh_execute_command", {"command": command})
    assert out.structured is not None, out.data
    return out.structured


def _curl(url: str, *extra: str) -> str:
    return f"curl -s -m 15 {' '.join(extra)} -w ' %{{http_code}}' {url}; echo \" exit=$?\""


def _answer(seen: Seen) -> Answer:
    return Answer(200, {"service": "host loopback", "path": seen.target})


@pytest.fixture
def service() -> Any:
    with serve_api(_answer) as api:
        yield api


async def test_under_strict_yaml_an_agent_files_localhost_reaches_nothing(
    sandbox_tmp: Path, service: ApiServer
) -> None:
    async with _serving(_policy(sandbox_tmp)) as (sup, http_port):
        errors = {e["toolbox"]: e["message"] for e in sup.load_errors()}
        assert "toolboxes.tenant/lua.allow_loopback: true" in errors["lua"], errors
        assert "toolboxes.tenant/priv.allow_private_ranges: [10.1.2.3/32]" in errors["priv"], errors
        assert not {"lua_lua_execute", "lua_priv_execute"} & {t.name for t in sup.list_tools()}
        # A real shell in a real worker with a proxy: neither the service nor the supervisor's port, by any road.
        for port in (service.port, http_port):
            for url in (f"http://127.0.0.1:{port}/x", f"http://localhost:{port}/x", f"http://[::1]:{port}/x"):
                out = await _sh(sup, _curl(url))
                assert out["stdout"].endswith(" 403 exit=0\n"), (url, out)
            direct = await _sh(sup, _curl(f"http://127.0.0.1:{port}/x", "--noproxy '*'"))
            assert "exit=7" in direct["stdout"], direct  # its own namespace's loopback: nothing listens there
    assert service.requests == []


async def test_the_policy_key_opens_the_loopback_but_never_the_supervisors_own_sockets(
    sandbox_tmp: Path, service: ApiServer
) -> None:
    policy = _policy(
        sandbox_tmp,
        **{
            "tenant/lua": {"allow_loopback": True},
            "tenant/sh": {"allowed_hosts": ["localhost"], "allow_loopback": True},
        },
    )
    async with _serving(policy) as (sup, http_port):
        assert {e["toolbox"] for e in sup.load_errors()} == {"priv"}  # a private literal still needs its key
        opened = await _sh(sup, _curl(f"http://localhost:{service.port}/from-shell"))
        assert opened["stdout"].startswith('{"service": "host loopback", "path": "/from-shell"} 200'), opened
        own = await _sh(sup, _curl(f"http://localhost:{http_port}/healthz"))
        assert own["stdout"].endswith(" 403 exit=0\n") and "a socket of the supervisor itself" in own["stdout"], own
        script = (
            f"local a = http.get('http://localhost:{service.port}/from-lua')\n"
            f"local b = http.get('http://localhost:{http_port}/healthz')\n"
            "return a.status, b.status, b.body"
        )
        result = await sup.call("lua_lua_execute", {"script": script})
        assert result.status == "passed", result.data
        status, own_status, body = result.structured["values"]
        assert (status, own_status) == (200, 403) and "a socket of the supervisor itself" in body
    assert [s.target for s in service.requests] == ["/from-shell", "/from-lua"]


def _policy_naming(root: Path, agent_file: Path, **settings: Any) -> Path:
    policy = write_policy(root, {}, **settings)
    data = yaml.safe_load(policy.read_text())
    data["agents"] = [str(agent_file)]
    policy.write_text(yaml.safe_dump(data))
    return policy


REWRITE = (
    "python3 -c \"import json, sys; f = open(sys.argv[1], 'r+'); a = json.load(f); "
    "a['contents']['builtinToolboxes'][0]['contents']['Capabilities'].append('hostname'); "
    'f.seek(0); f.truncate(); json.dump(a, f)" '
)


async def test_a_worker_that_can_rewrite_its_own_agent_file_is_warned_then_refused(sandbox_tmp: Path) -> None:
    """A worker whose FileSandbox holds its own agent file rewrites it (in place: same file, owner and inode) to
    gain ``hostname``. A permissive policy says so at every start (and the gain shows why); a strict one refuses
    the agent, so the rewritten file grants nothing."""
    from supervisor.frontends._cli import main

    project = sandbox_tmp / "project"
    project.mkdir()
    project.chmod(0o777)
    file = project / "agent.json"
    fsb = {"fsbPredicate": {"tag": "DirectoryRecursive", "contents": str(project)}, "fsbName": "project"}
    box = system_toolbox("sh", capabilities=["execute-command"], FileSandbox=fsb)
    file.write_text(json.dumps(agent("rewriter", builtinToolboxes=[box])))
    file.chmod(0o666)
    warned = f"the agent file {file} can be written by the worker of rewriter/sh (its write rule {project})"
    permissive = _policy_naming(sandbox_tmp, file, strict=False, landlock_min_abi=0)
    async with Supervisor.open(permissive) as sup:
        assert any(warned in w for w in sup.compiled.warnings), sup.compiled.warnings
        out = await sup.call("system_sh_execute_command", {"command": REWRITE + str(file)})
        assert out.structured is not None and out.structured["exitCode"] == 0, out.data
    assert "hostname" in file.read_text()
    async with Supervisor.open(permissive) as sup:  # the gain is real where the policy only warns
        assert "system_sh_hostname" in {t.name for t in sup.list_tools()}
        assert any(warned in w for w in sup.compiled.warnings)
    strict = _policy_naming(sandbox_tmp, file, landlock_min_abi=1)
    async with Supervisor.open(strict) as sup:
        assert not [t for t in sup.list_tools() if t.name.startswith("system_sh_")]
        [error] = sup.load_errors()
        assert error["toolbox"] == "sh" and warned in error["message"] and "A strict policy refuses" in error["message"]
    # the CLI runs its own trio loop: in a thread of its own, as from a shell
    assert await trio.to_thread.run_sync(main, ["check", "--policy", str(strict)]) == 0  # says the same, starts nothing
