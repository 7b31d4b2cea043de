"""The MCP Inspector CLI (``@modelcontextprotocol/inspector``, installed by scripts/setup; the test never fetches)
against a real ``agents-supervise serve --http`` (``--transport http``) and over stdio: ``tools/list`` and
``tools/call`` with ``--tool-arg``."""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING

import pytest
import trio

from supervisor.frontends._http_auth import hash_token
from tests._policies import agent, system_toolbox, write_policy
from tests.supervisor.frontends.test_mcp_http import REPO, _start

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.root

INSPECTOR = "/usr/bin/mcp-inspector"
TOKEN = "inspector-token"


@pytest.fixture
def policy(sandbox_tmp: Path) -> Path:
    if not os.path.exists(INSPECTOR):
        pytest.skip(f"{INSPECTOR} is missing: scripts/setup installs it (npm) when node is present")
    toolbox = system_toolbox(capabilities=["date", "execute-command"])
    return write_policy(
        sandbox_tmp,
        {"alpha": agent("alpha", builtinToolboxes=[toolbox])},
        frontends={"http": {"listen": "127.0.0.1:0"}},
        tenants={"acme": {"tokens": [hash_token(TOKEN)], "agents": ["alpha"]}},
    )


async def _inspector(home: Path, *args: str) -> dict:
    home.mkdir(exist_ok=True)
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": REPO, "npm_config_offline": "true"}
    with trio.fail_after(120):
        done = await trio.run_process(
            [INSPECTOR, "--cli", *args], capture_stdout=True, capture_stderr=True, env=env, cwd=REPO, check=False
        )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    return json.loads(done.stdout)


def _check(listed: dict, called: dict) -> None:
    assert {t["name"] for t in listed["tools"]} == {"system_system_date", "system_system_execute_command"}
    assert called["isError"] is False and called["structuredContent"]["stdout"] == "from the inspector\n"


async def test_over_http(policy: Path) -> None:
    async with _start(policy) as server:
        url = server.url("alpha")
        auth = ["--transport", "http", "--header", f"Authorization: Bearer {TOKEN}"]
        listed = await _inspector(policy.parent / "home", url, *auth, "--method", "tools/list")
        called = await _inspector(
            policy.parent / "home",
            url,
            *auth,
            "--method",
            "tools/call",
            "--tool-name",
            "system_system_execute_command",
            "--tool-arg",
            "command=echo from the inspector",
        )
        _check(listed, called)
        assert {r["tenant"] for r in server.records("http_session_start")} == {"acme"}
        assert any(r["tool"] == "system_system_execute_command" for r in server.records("call_end"))


async def test_over_stdio(policy: Path) -> None:
    command = [sys.executable, "-m", "supervisor", "--policy", str(policy)]
    listed = await _inspector(policy.parent / "home", *command, "--method", "tools/list")
    called = await _inspector(
        policy.parent / "home",
        *command,
        "--method",
        "tools/call",
        "--tool-name",
        "system_system_execute_command",
        "--tool-arg",
        "command=echo from the inspector",
    )
    _check(listed, called)
