"""A tool of a toolbox that failed to load, called by the official MCP SDK client over stdio and over Streamable
HTTP: the answer names the toolbox's load error (a real MCP toolbox server that exits at start, and a real bash
script whose ``describe`` is broken), not a bare "Tool not found"."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import pytest
import trio
from mcp import Client, ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from labkit import write_script
from supervisor.frontends._http_auth import hash_token
from tests._policies import agent, system_toolbox, write_policy
from tests.supervisor.frontends.test_frontends import REPO, _env
from tests.supervisor.frontends.test_mcp_http import _start

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.root

TOKEN = "unloaded-token"
WHY = "the database file /srv/db.sqlite is missing"


def _policy(root: Path) -> Path:
    tools = root / "tools"
    tools.mkdir()
    write_script(tools, "broken", "this is not JSON", "echo never")
    server = {
        "tag": "McpSimpleBinary",
        "contents": {"name": "store", "executable": sys.executable, "args": ["-c", f"import sys; sys.exit({WHY!r})"]},
    }
    return write_policy(
        root,
        {
            "alpha": agent(
                "alpha",
                mcpServers=[server],
                builtinToolboxes=[system_toolbox()],
                bashToolboxes=[{"tag": "FileSystemDirectory", "contents": {"Path": "./tools"}}],
            )
        },
        frontends={"http": {"listen": "127.0.0.1:0"}},
        tenants={"acme": {"tokens": [hash_token(TOKEN)], "agents": ["alpha"]}},
    )


def _check(store: str, script: str) -> None:
    assert store.startswith("Tool not found: 'mcp_store_fetch'. Its toolbox store did not load: ") and WHY in store
    assert "Available tools: " in store and "system_system_date" in store
    assert "the script " in script and "broken of toolbox " in script and "describe" in script


async def test_over_stdio(sandbox_tmp: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "supervisor", "--policy", str(_policy(sandbox_tmp))], env=_env(), cwd=REPO
    )
    with trio.fail_after(90):
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            store = await session.call_tool("mcp_store_fetch", {})
            script = await session.call_tool("bash_broken", {})
    assert store.is_error and script.is_error
    _check(store.content[0].text, script.content[0].text)


async def test_over_http(sandbox_tmp: Path) -> None:
    async with _start(_policy(sandbox_tmp)) as server:
        with trio.fail_after(90):
            async with (
                create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"}) as http,
                Client(streamable_http_client(server.url("alpha"), http_client=http), mode="legacy") as client,
            ):
                store = await client.call_tool("mcp_store_fetch", {})
                script = await client.call_tool("bash_broken", {})
        assert store.is_error and script.is_error
        _check(store.content[0].text, script.content[0].text)
