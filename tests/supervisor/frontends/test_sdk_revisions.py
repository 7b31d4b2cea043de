"""The official MCP SDK client on every revision and transport this server speaks: a cancelled call leaves the
connection usable (the next call on it is answered), over Streamable HTTP on the 2025-11-25 session revision and
the stateless 2026-07-28 one, and over stdio on both; a stdio client pinned to 2026-07-28 is answered in that
revision's shape."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import pytest
import trio
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from labkit import make_skill, skill_md
from supervisor.frontends._http_auth import hash_token
from supervisor.frontends._mcp_session import McpSession
from tests._policies import agent, system_toolbox, write_policy
from tests.supervisor.frontends.test_frontends import REPO, _env
from tests.supervisor.frontends.test_mcp_http import _start

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.root

TOKEN = "revisions-token"
LONG = {"command": "echo started; sleep 60"}


def _policy(root: Path) -> Path:
    toolbox = system_toolbox("system", ["execute-command", "date"])
    return write_policy(
        root,
        {"alpha": agent("alpha", builtinToolboxes=[toolbox])},
        frontends={"http": {"listen": "127.0.0.1:0"}},
        tenants={"acme": {"tokens": [hash_token(TOKEN)], "agents": ["alpha"]}},
    )


def _records(policy: Path, event: str) -> list[dict[str, Any]]:
    trace = policy.parent / "state" / "trace.jsonl"
    lines = trace.read_text().splitlines() if trace.exists() else []
    return [r for r in map(json.loads, lines) if r.get("event") == event]


async def _cancel_then_call(client: Client, policy: Path) -> None:
    """Cancel a long call once it runs in its worker; the next call on the same client is answered, and the
    cancelled one ended in the worker."""
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:

            async def long_call() -> None:
                await client.call_tool("system_system_execute_command", LONG)

            nursery.start_soon(long_call)
            while not _records(policy, "call_start"):  # noqa: ASYNC110 (the trace is the sign the call runs)
                await trio.sleep(0.05)
            scope.cancel()
    result = await client.call_tool("system_system_date", {})
    assert not result.is_error, result
    assert json.loads(result.content[0].text)["capability"] == "date"
    while not [r for r in _records(policy, "call_end") if r["tool"] == "system_system_execute_command"]:  # noqa: ASYNC110
        await trio.sleep(0.05)
    [ended] = [r for r in _records(policy, "call_end") if r["tool"] == "system_system_execute_command"]
    assert ended["status"] == "error", ended


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_cancel_over_http_leaves_the_connection_usable(sandbox_tmp: Path, mode: str) -> None:
    policy = _policy(sandbox_tmp)
    async with _start(policy) as server:
        with trio.fail_after(90):
            async with (
                create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"}) as http,
                Client(streamable_http_client(server.url("alpha"), http_client=http), mode=mode) as client,
            ):
                assert client.protocol_version == ("2025-11-25" if mode == "legacy" else mode)
                await _cancel_then_call(client, policy)


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_a_cancel_over_stdio_leaves_the_connection_usable(sandbox_tmp: Path, mode: str) -> None:
    policy = _policy(sandbox_tmp)
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "supervisor", "--policy", str(policy)], env=_env(), cwd=REPO
    )
    with trio.fail_after(90):
        async with Client(params, mode=mode) as client:
            assert client.protocol_version == ("2025-11-25" if mode == "legacy" else mode)
            tools = await client.list_tools()
            assert {t.name for t in tools.tools} >= {"system_system_date", "system_system_execute_command"}
            await _cancel_then_call(client, policy)


async def _answers(session: McpSession, sent: list[dict[str, Any]], *messages: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for message in messages:
        job = session.handle_message(message)
        assert job is not None, message
        before = len(sent)
        await job()
        out.append(sent[before])
    return out


_ENVELOPE = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}


async def test_the_first_request_decides_a_stdio_sessions_revision() -> None:
    """A handshake connection refuses requests before ``initialize`` (``ping`` is answered) and stateless-era
    requests; a stateless-era one refuses ``initialize`` naming what it speaks and requests without the envelope.
    (Only the refusals run: they touch nothing of a supervisor.)"""
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    legacy = McpSession(None, send, dual_era=True)  # type: ignore[arg-type]
    early, envelope = await _answers(
        legacy,
        sent,
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": _ENVELOPE}},
    )
    assert early["error"]["code"] == -32600 and "tools/list before initialize" in early["error"]["message"]
    assert envelope["error"]["code"] == -32600 and "began with initialize" in envelope["error"]["message"]
    assert not legacy.modern

    modern = McpSession(None, send, dual_era=True)  # type: ignore[arg-type]
    assert modern.handle_message({"jsonrpc": "2.0", "id": 1, "method": "x/y", "params": {"_meta": _ENVELOPE}})
    assert modern.modern and modern.version == "2026-07-28"
    init, bare, other = await _answers(
        modern,
        sent,
        {"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/list"},
        {
            "jsonrpc": "2.0",
            "id": 4,
            "method": "tools/list",
            "params": {"_meta": {**_ENVELOPE, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}},
        },
    )
    assert init["error"]["code"] == -32022 and init["error"]["data"]["supported"] == ["2026-07-28"]
    assert bare["error"]["code"] == -32602 and "params._meta must carry" in bare["error"]["message"]
    assert other["error"]["code"] == -32022 and other["error"]["data"]["requested"] == "2099-01-01"


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_skill_scripts_over_each_http_revision(sandbox_tmp: Path, mode: str) -> None:
    """On 2026-07-28 every request is a session of its own, so a skill it enabled could not last into the next:
    every loaded skill's scripts are listed and callable there. A 2025-11-25 session enables them as before."""
    skills = sandbox_tmp / "skills"
    make_skill(skills, "pdf", skill_md("pdf-tools"), scripts={"extract": "extract"})
    policy = write_policy(
        sandbox_tmp,
        {"alpha": agent("alpha", skillSources=[{"tag": "SkillDirectory", "contents": "./skills"}])},
        frontends={"http": {"listen": "127.0.0.1:0"}},
        tenants={"acme": {"tokens": [hash_token(TOKEN)], "agents": ["alpha"]}},
    )
    script = "skill_pdf-tools_extract"
    async with _start(policy) as server:
        with trio.fail_after(90):
            async with (
                create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"}) as http,
                Client(streamable_http_client(server.url("alpha"), http_client=http), mode=mode) as client,
            ):
                listed = {t.name for t in (await client.list_tools()).tools}
                if mode == "legacy":
                    assert script not in listed and "skill_enable_pdf-tools" in listed
                    refused = await client.call_tool(script, {"file": "a.pdf"})
                    assert refused.is_error and "call skill_enable_pdf-tools first" in refused.content[0].text
                    assert not (await client.call_tool("skill_enable_pdf-tools", {})).is_error
                else:
                    assert script in listed
                result = await client.call_tool(script, {"file": "a.pdf"})
                assert not result.is_error, result
                assert "on a.pdf in session" in result.content[0].text
