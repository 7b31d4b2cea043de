"""MCP over Streamable HTTP for real: ``agents-supervise serve --http`` in a subprocess, driven by the official MCP
SDK client (the 2025-11-25 session path and the stateless 2026-07-28 path), by curl for the raw transport and the
authentication errors, and by two tenants that try to reach each other's agents and sessions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import trio
from joserfc import jwt
from joserfc.jwk import ECKey, KeySet
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from labkit import describe_json, write_script
from supervisor.frontends._http_auth import hash_token
from tests._policies import agent, system_toolbox, write_policy
from tests.supervisor.test_skills_e2e import Notifications

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

pytestmark = pytest.mark.root

REPO = str(Path(__file__).resolve().parents[3])
ACME, GLOBEX = "acme-secret-token", "globex-secret-token"
ISSUER = "https://auth.example.test"


def _policy(root: Path, **extra: Any) -> Path:
    # Two agents; acme may use alpha, globex may use beta and alpha (so the two tenants meet at alpha's endpoint).
    return write_policy(
        root,
        {
            "alpha": agent("alpha", builtinToolboxes=[system_toolbox("system", ["date", "running-user"])]),
            "beta": agent("beta", builtinToolboxes=[system_toolbox("sys2", ["date"])]),
        },
        frontends={
            "http": {"listen": "127.0.0.1:0", "allowed_origins": ["https://app.example.test"], "max_body_bytes": 65536}
        },
        tenants={
            "acme": {"tokens": [hash_token(ACME)], "agents": ["alpha"]},
            "globex": {"tokens": [hash_token(GLOBEX)], "agents": ["beta", "alpha"], "limits": {"sessions": 2}},
        },
        **extra,
    )


class _Server:
    def __init__(self, process: trio.Process, base: str, trace: Path) -> None:
        self.process, self.base, self.trace = process, base, trace

    def url(self, agent_slug: str) -> str:
        return f"{self.base}/agents/{agent_slug}/mcp"

    def records(self, kind: str) -> list[dict[str, Any]]:
        lines = self.trace.read_text().splitlines() if self.trace.exists() else []
        return [r for r in map(json.loads, lines) if r.get("event") == kind]


@asynccontextmanager
async def _start(policy: Path) -> AsyncIterator[_Server]:
    """``serve --http`` of ``policy`` until the block ends (a context manager, not a bare generator: a block that
    raises still stops the server at once, nothing is left for the garbage collector to finalise in a later test)."""
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "supervisor", "serve", "--http", "--policy", str(policy)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": REPO},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        assert process.stderr is not None
        line = b""
        with trio.fail_after(60):
            while b"\n" not in line.partition(b"serving MCP over HTTP at ")[2]:  # printed once it listens
                chunk = await process.stderr.receive_some(4096)
                assert chunk, f"the server exited: {line!r}"
                line += chunk
        line = line.split(b"serving MCP over HTTP at ", 1)[1].split(b"\n", 1)[0]
        base = line.decode().split("/agents/")[0]
        yield _Server(process, base, policy.parent / "state" / "trace.jsonl")
    finally:
        process.terminate()
        await process.wait()
        if process.stderr is not None:
            await process.stderr.aclose()


@pytest.fixture
async def server(sandbox_tmp: Path) -> AsyncIterator[_Server]:
    async with _start(_policy(sandbox_tmp)) as s:
        yield s


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_sdk_client_over_http_sees_only_its_agent(server: _Server, mode: str) -> None:
    with trio.fail_after(60):
        async with (
            create_mcp_http_client(headers={"Authorization": f"Bearer {ACME}"}) as http,
            Client(streamable_http_client(server.url("alpha"), http_client=http), mode=mode) as client,
        ):
            # 'auto' probes server/discover and keeps the stateless revision; 'legacy' initializes a session.
            assert client.protocol_version == ("2026-07-28" if mode == "auto" else "2025-11-25")
            assert client.server_info is None or client.server_info.name == "agents-supervise"
            names = {t.name for t in (await client.list_tools()).tools}
            assert names == {"system_system_date", "system_system_running_user"}  # beta's sys2 tools are not here
            ok = await client.call_tool("system_system_date", {})
            assert not ok.is_error and json.loads(ok.content[0].text)["capability"] == "date"
            other = await client.call_tool("sys2_sys2_date", {})  # another agent's tool does not exist here
            assert other.is_error and "Tool not found: 'sys2_sys2_date'" in other.content[0].text
            assert "sys2" not in other.content[0].text.split("Available tools:")[1]
    starts = server.records("http_session_start")
    assert (len(starts) == 1 and starts[0]["tenant"] == "acme") if mode == "legacy" else not starts


async def test_list_changed_reaches_the_session_stream(sandbox_tmp: Path) -> None:
    """The SDK client opens the session's GET stream after initialize; a new bash tool is announced on it (when the
    stream opens after the change, at its opening: the session knows what it last listed)."""
    tools = sandbox_tmp / "tools"
    tools.mkdir()
    write_script(tools, "old", describe_json("old"), "echo old")
    policy = write_policy(
        sandbox_tmp,
        {"alpha": agent("alpha", bashToolboxes=[{"tag": "FileSystemDirectory", "contents": {"Path": "./tools"}}])},
        frontends={"http": {"listen": "127.0.0.1:0"}},
        tenants={"acme": {"tokens": [hash_token(ACME)], "agents": ["alpha"]}},
    )
    seen = Notifications()
    async with _start(policy) as server:
        with trio.fail_after(60):
            async with (
                create_mcp_http_client(headers={"Authorization": f"Bearer {ACME}"}) as http,
                Client(
                    streamable_http_client(server.url("alpha"), http_client=http),
                    mode="legacy",
                    message_handler=seen.handler,
                ) as client,
            ):
                assert {t.name for t in (await client.list_tools()).tools} == {"bash_old"}
                write_script(tools, "new", describe_json("new"), "echo fresh")
                await seen.wait()
                while {t.name for t in (await client.list_tools()).tools} != {"bash_old", "bash_new"}:
                    await seen.wait()
                assert (await client.call_tool("bash_new", {})).content[0].text == "fresh\n"


async def _curl(*args: str) -> tuple[int, dict[str, str], str]:
    done = await trio.run_process(["curl", "-s", "-i", "--max-time", "20", *args], capture_stdout=True, check=False)
    head, _, body = done.stdout.decode().replace("\r\n", "\n").partition("\n\n")
    status_line, *header_lines = head.split("\n")
    headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
    return int(status_line.split()[1]), headers, body


_INIT = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "curl", "version": "1"}},
    }
)
_JSON = ["-H", "content-type: application/json", "-H", "accept: application/json, text/event-stream"]


def _bearer(token: str) -> list[str]:
    return ["-H", f"authorization: Bearer {token}"]


async def test_authentication_errors_say_why_and_serve_nothing(server: _Server) -> None:
    url = server.url("alpha")
    status, headers, body = await _curl("-X", "POST", url, *_JSON, "-d", _INIT)
    assert status == 401 and "needs a bearer token" in body
    assert headers["www-authenticate"] == (
        f'Bearer resource_metadata="{server.base}/.well-known/oauth-protected-resource/agents/alpha/mcp"'
    )
    status, headers, body = await _curl("-X", "POST", url, *_JSON, *_bearer("not-a-token"), "-d", _INIT)
    assert status == 401 and 'error="invalid_token"' in headers["www-authenticate"]
    status, headers, body = await _curl("-X", "POST", server.url("beta"), *_JSON, *_bearer(ACME), "-d", _INIT)
    assert status == 403 and "tenant 'acme' may not use agent 'beta'" in body
    assert 'error="insufficient_scope"' in headers["www-authenticate"]
    refused = server.records("http_refused")
    assert [r["status"] for r in refused] == [401, 401, 403] and "acme-secret" not in server.trace.read_text()
    # The RFC 9728 document is public.
    status, _, body = await _curl(f"{server.base}/.well-known/oauth-protected-resource/agents/alpha/mcp")
    assert status == 200 and json.loads(body)["resource"] == url


async def test_raw_transport_rules(server: _Server) -> None:
    url = server.url("alpha")
    status, _, body = await _curl(
        "-X", "POST", url, *_JSON, *_bearer(ACME), "-H", "origin: https://evil.test", "-d", _INIT
    )
    assert status == 403 and "Origin 'https://evil.test' is not allowed" in body
    status, headers, body = await _curl(
        "-X", "POST", url, *_JSON, *_bearer(ACME), "-H", "origin: https://app.example.test", "-d", _INIT
    )
    assert status == 200 and json.loads(body)["result"]["protocolVersion"] == "2025-11-25"
    session = headers["mcp-session-id"]
    assert len(session) >= 32
    call = json.dumps(
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "system_system_date", "arguments": {}}}
    )
    status, _, body = await _curl("-X", "POST", url, *_JSON, *_bearer(ACME), "-d", call)
    assert status == 400 and "needs the Mcp-Session-Id" in body
    status, _, body = await _curl("-X", "POST", url, *_JSON, *_bearer(ACME), "-H", "mcp-session-id: nope", "-d", call)
    assert status == 404
    status, _, body = await _curl(
        "-X",
        "POST",
        url,
        *_JSON,
        *_bearer(ACME),
        "-H",
        f"mcp-session-id: {session}",
        "-H",
        "mcp-protocol-version: 1999-01-01",
        "-d",
        call,
    )
    assert status == 400 and "MCP-Protocol-Version '1999-01-01' is not served" in body
    status, _, body = await _curl(
        "-X",
        "POST",
        url,
        *_JSON,
        *_bearer(ACME),
        "-H",
        f"mcp-session-id: {session}",
        "-H",
        "mcp-protocol-version: 2025-11-25",
        "-d",
        call,
    )
    assert status == 200 and json.loads(body)["result"]["isError"] is False
    # Another tenant that may use the same agent cannot use this session: it does not exist for globex.
    status, _, body = await _curl(
        "-X", "POST", url, *_JSON, *_bearer(GLOBEX), "-H", f"mcp-session-id: {session}", "-d", call
    )
    assert status == 404 and "no such session" in body
    status, _, body = await _curl("-X", "POST", url, *_JSON, *_bearer(ACME), "-d", "x" * 70000)
    assert status == 413 and "larger than 65536 bytes" in body
    status, _, body = await _curl("-X", "POST", url, "-H", "content-type: text/plain", *_bearer(ACME), "-d", "{}")
    assert status == 415
    note = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})
    status, _, _ = await _curl(
        "-X", "POST", url, *_JSON, *_bearer(ACME), "-H", f"mcp-session-id: {session}", "-d", note
    )
    assert status == 202
    status, _, _ = await _curl("-X", "DELETE", url, *_bearer(ACME), "-H", f"mcp-session-id: {session}")
    assert status == 204
    status, _, _ = await _curl(
        "-X", "POST", url, *_JSON, *_bearer(ACME), "-H", f"mcp-session-id: {session}", "-d", call
    )
    assert status == 404  # ended


async def test_tenant_session_limit(server: _Server) -> None:
    url = server.url("alpha")
    for _ in range(2):
        status, _, _ = await _curl("-X", "POST", url, *_JSON, *_bearer(GLOBEX), "-d", _INIT)
        assert status == 200
    status, headers, body = await _curl("-X", "POST", url, *_JSON, *_bearer(GLOBEX), "-d", _INIT)
    assert status == 429 and "holds 2 sessions, its limit" in body and headers["retry-after"]
    status, _, _ = await _curl("-X", "POST", url, *_JSON, *_bearer(ACME), "-d", _INIT)  # acme's own count
    assert status == 200


def _stateless(
    method: str, params: dict[str, Any], *, version: str = "2026-07-28", header_method: str | None = None
) -> list[str]:
    meta = {"io.modelcontextprotocol/protocolVersion": version, "io.modelcontextprotocol/clientCapabilities": {}}
    body = json.dumps({"jsonrpc": "2.0", "id": 7, "method": method, "params": {**params, "_meta": meta}})
    extra = ["-H", f"mcp-name: {params['name']}"] if "name" in params else []
    return [
        *_JSON,
        "-H",
        "mcp-protocol-version: 2026-07-28",
        "-H",
        f"mcp-method: {header_method or method}",
        *extra,
        "-d",
        body,
    ]


async def test_stateless_revision_checks_its_envelope(server: _Server) -> None:
    url = server.url("alpha")
    status, _, body = await _curl("-X", "POST", url, *_bearer(ACME), *_stateless("server/discover", {}))
    result = json.loads(body)["result"]
    assert status == 200 and result["supportedVersions"] == ["2026-07-28"] and result["resultType"] == "complete"
    status, _, body = await _curl(
        "-X", "POST", url, *_bearer(ACME), *_stateless("tools/call", {"name": "system_system_date", "arguments": {}})
    )
    assert status == 200 and json.loads(body)["result"]["isError"] is False
    status, _, body = await _curl(
        "-X", "POST", url, *_bearer(ACME), *_stateless("tools/list", {}, header_method="tools/call")
    )
    assert status == 400 and json.loads(body)["error"]["code"] == -32020
    status, _, body = await _curl("-X", "POST", url, *_bearer(ACME), *_stateless("nope/nothing", {}))
    assert status == 404 and json.loads(body)["error"]["code"] == -32601


def _jwks(root: Path) -> ECKey:
    key = ECKey.generate_key("P-256", {"kid": "test-key"})
    (root / "jwks.json").write_text(json.dumps(KeySet([key]).as_dict(private=False)))
    return key


def _token(key: ECKey, **claims: Any) -> str:
    now = int(time.time())
    base = {"iss": ISSUER, "sub": "user-1", "iat": now, "exp": now + 300, "tenant": "acme"}
    return jwt.encode({"alg": "ES256", "kid": "test-key"}, {**base, **claims}, key)


async def test_oauth_access_tokens(sandbox_tmp: Path) -> None:
    key = _jwks(sandbox_tmp)
    policy = _policy(sandbox_tmp, oauth={"issuer": ISSUER, "jwks_file": "jwks.json", "required_scopes": ["mcp"]})
    async with _start(policy) as server:
        url = server.url("alpha")
        good = _token(key, aud=url, scope="mcp tools")
        status, headers, body = await _curl("-X", "POST", url, *_JSON, *_bearer(good), "-d", _INIT)
        assert status == 200 and headers["mcp-session-id"]
        cases = [
            (_token(key, aud=url, scope="mcp", exp=int(time.time()) - 3600), 401, "has expired"),
            (_token(key, aud="https://other.example.test/mcp", scope="mcp"), 401, "another audience"),
            (_token(key, aud=url, scope="mcp", iss="https://evil.test"), 401, "another issuer"),
            (_token(key, aud=url), 403, "lacks scope mcp"),
            (_token(key, aud=url, scope="mcp", tenant="nobody"), 403, "names no tenant"),
            (_token(ECKey.generate_key("P-256", {"kid": "test-key"}), aud=url, scope="mcp"), 401, "does not verify"),
        ]
        for token, want_status, want_text in cases:
            status, headers, body = await _curl("-X", "POST", url, *_JSON, *_bearer(token), "-d", _INIT)
            assert (status, want_text in body) == (want_status, True), body
            assert "www-authenticate" in headers
        status, _, body = await _curl(f"{server.base}/.well-known/oauth-protected-resource/agents/alpha/mcp")
        assert json.loads(body)["authorization_servers"] == [ISSUER]


async def test_tenant_call_rate(sandbox_tmp: Path) -> None:
    """A tenant's calls per second: the bucket holds at least one call, then the next waits for the rate."""
    policy = write_policy(
        sandbox_tmp,
        {"alpha": agent("alpha", builtinToolboxes=[system_toolbox("system", ["date"])])},
        frontends={"http": {"listen": "127.0.0.1:0"}},
        tenants={"acme": {"tokens": [hash_token(ACME)], "agents": ["alpha"], "limits": {"calls_per_second": 0.01}}},
    )
    async with _start(policy) as server:
        url = server.url("alpha")
        _, headers, _ = await _curl("-X", "POST", url, *_JSON, *_bearer(ACME), "-d", _INIT)
        call = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "system_system_date", "arguments": {}},
            }
        )
        session = ["-H", f"mcp-session-id: {headers['mcp-session-id']}"]
        _, _, body = await _curl("-X", "POST", url, *_JSON, *_bearer(ACME), *session, "-d", call)
        assert json.loads(body)["result"]["isError"] is False
        _, _, body = await _curl("-X", "POST", url, *_JSON, *_bearer(ACME), *session, "-d", call)
        assert "rate of 0.01 calls per second is spent" in json.loads(body)["error"]["message"]
