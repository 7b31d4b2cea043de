"""Closing a session drops what the supervisor keeps of it in memory (issue 19: flat under steady load), through
every way a session ends: the Python API's ``close_session``, an HTTP session deleted by its client or ended idle, a
stateless HTTP request, the end of a stdio connection. Real System toolbox workers through ``Supervisor.open``;
the HTTP frontend is the real server on 127.0.0.1, driven by httpx; stdio is the real stdio server over trio
memory streams (the transport is the only stand-in: no process's stdin is needed to end a session)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import trio
import trio.testing

from supervisor._supervisor import Supervisor
from supervisor.config import load_config
from supervisor.frontends._http_auth import hash_token, http_frontend_from_policy
from supervisor.frontends._http_server import serve_mcp_http
from supervisor.frontends._mcp_stdio import McpStdioServer
from tests._policies import agent, system_toolbox, write_policy

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.root

DATE = "system_system_date"
TOKEN = "close-test-token"
SESSIONS = 12


def _policy(root: Path, **extra: Any) -> Path:
    return write_policy(
        root,
        {"tester": agent(builtinToolboxes=[system_toolbox(capabilities=["date", "execute-command"])])},
        sessions={"max_calls": 1000},  # call counts of idle sessions are kept: one more map to empty
        **extra,
    )


def per_session_state(sup: Supervisor) -> dict[str, int]:
    """The size of every map the supervisor keeps per session."""
    assert sup.sessions is not None
    return {
        "frontend names": len(sup.services.calls.frontends._names),
        "frontend sessions": len(sup.services.calls.frontends._opened),
        "portal busy": sup.services.calls.ledger.busy,
        "portal idle": sup.services.calls.ledger.idle,
        "store roots": len(sup.sessions._roots),
        "store known": len(sup.sessions._known),
        "tool-list events": len(sup.services.calls.session_tools._events),
        "tool-list waiters": len(sup.services.calls.session_tools._waiters),
    }


async def test_closing_sessions_returns_every_per_session_map_to_its_size_before(sandbox_tmp: Path) -> None:
    async with Supervisor.open(_policy(sandbox_tmp)) as sup:
        assert (await sup.call(DATE, {}, session_id="kept")).status == "passed"
        before = per_session_state(sup)
        for i in range(SESSIONS):
            assert (await sup.call(DATE, {}, session_id=f"s{i}")).status == "passed"
            sup.list_tools(f"s{i}")
        grown = per_session_state(sup)
        for name in ("frontend names", "frontend sessions", "portal idle", "store roots", "store known"):
            assert grown[name] == before[name] + SESSIONS, name  # the test sees each map fill
        for i in range(SESSIONS):
            sup.close_session(f"s{i}")
        assert per_session_state(sup) == before
        sup.close_session("never-opened")  # nothing to drop: nothing happens
        assert per_session_state(sup) == before

        # A closed name used again is the same session (read back from the store), its count from 0.
        assert sup.sessions is not None
        first = next(r for r in sup.sessions.rows(set(sup.sessions.parents())) if r.name == "s0")
        assert (await sup.call(DATE, {}, session_id="s0")).status == "passed"
        calls = sup.sessions.tool_calls(first.id)
        assert len(calls) == 2 and calls[0]["conversation_id"] == calls[1]["conversation_id"] == first.conversation_id
        assert sup.services.calls.ledger.calls_of(first.id) == 1


async def test_a_session_closed_during_a_call_is_forgotten_when_the_call_ends(sandbox_tmp: Path) -> None:
    async with Supervisor.open(_policy(sandbox_tmp)) as sup:
        before = per_session_state(sup)
        results = []

        async def slow() -> None:
            results.append(await sup.call("system_system_execute_command", {"command": "sleep 1"}, session_id="x"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(slow)
            with trio.fail_after(30):
                while not sup.services.calls.ledger.busy:  # noqa: ASYNC110 - the call is in a real worker: no event to wait on
                    await trio.sleep(0.01)
            sup.close_session("x")
            assert sup.services.calls.ledger.busy == 1  # the running call keeps its count until it ends
        assert results[0].status == "passed", results[0]
        assert per_session_state(sup) == before


async def _rpc(client: httpx.AsyncClient, url: str, message: dict[str, Any], **headers: str) -> httpx.Response:
    base = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    return await client.post(url, content=json.dumps(message), headers={**base, **headers})


def _result(response: httpx.Response) -> dict[str, Any]:
    text = response.text
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        text = next(line[5:] for line in text.splitlines() if line.startswith("data:") and '"result"' in line)
    return json.loads(text)["result"]


async def test_http_sessions_deleted_expired_or_stateless_leave_nothing(sandbox_tmp: Path) -> None:
    policy = _policy(
        sandbox_tmp,
        frontends={"http": {"listen": "127.0.0.1:0", "session_idle_s": 1}},
        tenants={"acme": {"tokens": [hash_token(TOKEN)], "agents": ["tester"]}},
    )
    settings, auth = await http_frontend_from_policy(load_config(policy).policy)
    async with Supervisor.open(policy) as sup, trio.open_nursery() as nursery:
        base = await nursery.start(serve_mcp_http, sup, settings, auth)
        url = f"{base}/agents/tester/mcp"
        before = per_session_state(sup)
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": DATE, "arguments": {}}}
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
        async with httpx.AsyncClient(headers={"authorization": f"Bearer {TOKEN}"}, trust_env=False) as client:
            ids = []
            for _ in range(2):  # one deleted by its client, one left to expire
                reply = await _rpc(client, url, init)
                assert reply.status_code == 200, reply.text
                session = reply.headers["mcp-session-id"]
                headers = {"mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
                reply = await _rpc(client, url, call, **headers)
                assert reply.status_code == 200 and _result(reply)["isError"] is False, reply.text
                ids.append(session)
            assert per_session_state(sup)["frontend sessions"] == before["frontend sessions"] + 2
            reply = await client.delete(url, headers={"mcp-session-id": ids[0]})
            assert reply.status_code == 204
            assert per_session_state(sup)["frontend sessions"] == before["frontend sessions"] + 1
            with trio.fail_after(30):  # the idle one ends on the frontend's own timer (1 s idle, checked each 0.25 s)
                while per_session_state(sup) != before:  # noqa: ASYNC110
                    await trio.sleep(0.05)

            meta = {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            }
            stateless = {**call, "params": {**call["params"], "_meta": meta}}
            for _ in range(3):  # each request of the stateless revision is a session of its own, gone with it
                reply = await _rpc(
                    client,
                    url,
                    stateless,
                    **{"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": DATE},
                )
                assert reply.status_code == 200 and _result(reply)["isError"] is False, reply.text
            with trio.fail_after(30):  # closed once the answer is sent: the client may read it before that
                while per_session_state(sup) != before:  # noqa: ASYNC110
                    await trio.sleep(0.01)
        nursery.cancel_scope.cancel()


async def test_the_end_of_a_stdio_connection_closes_its_session(sandbox_tmp: Path) -> None:
    async with Supervisor.open(_policy(sandbox_tmp)) as sup:
        before = per_session_state(sup)
        to_server, from_client = trio.testing.memory_stream_one_way_pair()
        to_client, from_server = trio.testing.memory_stream_one_way_pair()
        server = McpStdioServer(sup, from_client, to_client)
        lines = [
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            },
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": DATE, "arguments": {}}},
        ]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.serve)
            await to_server.send_all(b"".join(json.dumps(m).encode() + b"\n" for m in lines))
            received = b""
            with trio.fail_after(30):
                while b'"id":2' not in received:
                    received += await from_server.receive_some(65536)
            assert per_session_state(sup)["frontend sessions"] == before["frontend sessions"] + 1
            await to_server.aclose()  # EOF: the connection ends
        assert per_session_state(sup) == before
