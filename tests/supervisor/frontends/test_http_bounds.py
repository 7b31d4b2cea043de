"""The HTTP frontend's bounds for real, against ``agents-supervise serve --http``: a tenant's calls in flight (every
request counts, not only ``tools/call``), its SSE streams, idle sessions ended, and the server's cap on open
connections. Waits poll what can be observed (the trace, the server's answers) under a deadline."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import trio

from labkit import REVISION, RawSession
from supervisor.frontends._http_auth import hash_token
from tests._policies import agent, system_toolbox, write_policy
from tests.supervisor.frontends.test_mcp_http import _Server, _start

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.root

TOKEN = "bounds-token"
AUTH = {"authorization": f"Bearer {TOKEN}"}


def _policy(root: Path, *, http: dict[str, Any] | None = None, limits: dict[str, Any] | None = None) -> Path:
    toolbox = system_toolbox(capabilities=["execute-command", "date"])
    return write_policy(
        root,
        {"alpha": agent("alpha", builtinToolboxes=[toolbox])},
        frontends={"http": {"listen": "127.0.0.1:0", **(http or {})}},
        tenants={"acme": {"tokens": [hash_token(TOKEN)], "agents": ["alpha"], "limits": limits or {}}},
    )


async def _until(check: Any, what: str) -> Any:
    """Poll ``check`` (an async callable) until it returns something true (``what``), at most 30 seconds."""
    with trio.fail_after(30):
        while not (value := await check()):  # noqa: ASYNC110 (the state is in another process: polled)
            await trio.sleep(0.05)
    return value


async def _raw(session: RawSession, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """One request's whole JSON-RPC answer (result or error)."""
    body = json.dumps({"jsonrpc": "2.0", "id": 99, "method": method, "params": params or {}}).encode()
    headers = {**session.headers, "mcp-session-id": session.session_id or "", "mcp-protocol-version": REVISION}
    return (await session.client.post(session.url, headers=headers, content=body)).json()


async def test_a_tenants_calls_in_flight_count_every_request(sandbox_tmp: Path) -> None:
    async with _start(_policy(sandbox_tmp, limits={"concurrent_calls": 1, "sse_streams": 1})) as server:
        url = server.url("alpha")
        async with httpx.AsyncClient(headers=AUTH, timeout=60) as client:
            busy, other = RawSession(client, url), RawSession(client, url)
            await busy.open()
            await other.open()
            async with trio.open_nursery() as nursery:

                async def hold() -> None:
                    try:
                        await busy.request(
                            "tools/call",
                            {"name": "system_system_execute_command", "arguments": {"command": "sleep 600"}},
                        )
                    except (httpx.HTTPError, RuntimeError):
                        pass  # cancelled below: MCP answers nothing, the connection is closed

                nursery.start_soon(hold)
                await _until(
                    lambda: _async(
                        any(r["tool"] == "system_system_execute_command" for r in server.records("call_start"))
                    ),
                    "the call started",
                )
                for method, params in [
                    ("tools/call", {"name": "system_system_date", "arguments": {}}),
                    ("tools/list", {}),
                    ("ping", {}),
                ]:
                    answer = await _raw(other, method, params)
                    assert "requests in flight, its limit" in answer["error"]["message"], (method, answer)
                # The tenant's SSE streams: one open, the second refused with the reason.
                stream_headers = {
                    **other.headers,
                    "accept": "text/event-stream",
                    "mcp-session-id": other.session_id or "",
                    "mcp-protocol-version": REVISION,
                }
                async with client.stream("GET", url, headers=stream_headers) as first:
                    assert first.status_code == 200
                    refused = await client.get(url, headers={**stream_headers, "mcp-session-id": busy.session_id or ""})
                    assert refused.status_code == 429 and "event streams open, its limit" in refused.text
                    assert refused.headers["retry-after"]
                await _until(
                    lambda: _stream_opens(client, url, {**stream_headers, "mcp-session-id": busy.session_id or ""}),
                    "a stream opens once the first is closed",
                )
                await client.post(
                    url,
                    headers={**busy.headers, "mcp-session-id": busy.session_id or "", "mcp-protocol-version": REVISION},
                    content=json.dumps(
                        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2}}
                    ).encode(),
                )
                answer = await _until(lambda: _result(other, "tools/list"), "the slot is free after the cancel")
                assert {t["name"] for t in answer["tools"]} == {"system_system_execute_command", "system_system_date"}


async def _async(value: Any) -> Any:
    return value


async def _result(session: RawSession, method: str) -> dict[str, Any] | None:
    answer = await _raw(session, method)
    return answer.get("result")


async def _stream_opens(client: httpx.AsyncClient, url: str, headers: dict[str, str]) -> bool:
    async with client.stream("GET", url, headers=headers) as response:
        return response.status_code == 200


async def test_an_idle_session_is_ended(sandbox_tmp: Path) -> None:
    policy = _policy(sandbox_tmp, http={"session_idle_s": 0.4})
    async with _start(policy) as server, httpx.AsyncClient(headers=AUTH, timeout=60) as client:
        session = RawSession(client, server.url("alpha"))
        await session.open()
        ended = await _until(
            lambda: _async([r for r in server.records("http_session_end") if r["why"] == "idle"]),
            "the idle session ended",
        )
        assert len(ended) == 1 and ended[0]["tenant"] == "acme"
        late = await client.post(
            session.url,
            headers={
                **session.headers,
                "mcp-session-id": session.session_id or "",
                "mcp-protocol-version": REVISION,
            },
            content=b'{"jsonrpc":"2.0","id":5,"method":"tools/list"}',
        )
        assert late.status_code == 404 and "no such session" in late.text


async def _connect(server: _Server) -> trio.SocketStream:
    host, port = server.base.removeprefix("http://").rsplit(":", 1)
    return await trio.open_tcp_stream(host, int(port))


async def _exchange(stream: trio.SocketStream, request: bytes) -> bytes:
    """Send ``request`` and read until the server closes or a whole response with a body has arrived."""
    await stream.send_all(request)
    data = b""
    with trio.fail_after(30):
        while chunk := await stream.receive_some(65536):
            data += chunk
            head, sep, body = data.partition(b"\r\n\r\n")
            length = [
                int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
            ]
            if sep and length and len(body) >= length[0]:
                break
    return data


async def _interim(stream: trio.SocketStream) -> bytes:
    """Read one interim response's head (``100 Continue``: a head and no body)."""
    data = b""
    with trio.fail_after(30):
        while b"\r\n\r\n" not in data:
            chunk = await stream.receive_some(1)  # byte by byte: nothing past the interim head is taken
            assert chunk, f"the server closed the connection: {data!r}"
            data += chunk
    return data


#: the end of a request head announcing a body that is sent only once the server asks for it (``100 Continue``)
_BODY_PENDING = b"\r\ncontent-type: application/json\r\ncontent-length: 64\r\nexpect: 100-continue\r\n\r\n"
_METADATA = b"GET /.well-known/oauth-protected-resource HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n"
#: a request with the tenant's token (400: no session named): its connection is the tenant's from then on
_AUTHENTICATED = (
    f"DELETE /agents/alpha/mcp HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {TOKEN}\r\n\r\n".encode()
)


async def test_connections_past_the_cap_are_refused_with_a_reason(sandbox_tmp: Path) -> None:
    # both places may be the one tenant's (by default a tenant holds max_connections / 2)
    async with _start(_policy(sandbox_tmp, http={"max_connections": 2, "max_connections_per_tenant": 2})) as server:
        held = []
        for _ in range(2):  # both are the tenant's and served (and stay open: keep-alive)
            held.append(stream := await _connect(server))
            assert b"Mcp-Session-Id" in (await _exchange(stream, _AUTHENTICATED))
            assert (await _exchange(stream, _METADATA)).startswith(b"HTTP/1.1 200 ")
            # then busy with a request whose body is awaited: idle, the tenant's connections past its fair share
            # (one of two) would give way to a new connection of a full server (test_http_tenant_connections.py).
            # The server's 100 Continue says it has read the head and waits for the body: busy from then on (the
            # bytes merely sent could still be unread when the next connection comes, the connection idle then).
            await stream.send_all(_AUTHENTICATED.replace(b"DELETE", b"POST").replace(b"\r\n\r\n", _BODY_PENDING))
            assert (await _interim(stream)).startswith(b"HTTP/1.1 100 ")
        extra = await _connect(server)
        answer = await _exchange(extra, _METADATA)
        assert answer.startswith(b"HTTP/1.1 503 ") and b"retry-after: 5" in answer
        assert b"holds 2 open connections, its limit (frontends.http.max_connections)" in answer
        await extra.aclose()
        refused = [r for r in server.records("http_refused") if r["status"] == 503]
        assert refused and "max_connections" in refused[0]["why"]
        await held.pop().aclose()

        async def served_again() -> bool:
            stream = await _connect(server)
            try:
                return (await _exchange(stream, _METADATA)).startswith(b"HTTP/1.1 200 ")
            finally:
                await stream.aclose()

        await _until(served_again, "a connection is served once one has closed")
        # the held one still serves: its pending request (a body that is no JSON) answered, then the next
        assert (await _exchange(held[0], b" " * 64)).startswith(b"HTTP/1.1 400 ")
        assert (await _exchange(held[0], _METADATA)).startswith(b"HTTP/1.1 200 ")
        await held[0].aclose()


async def test_https_from_the_policys_files(sandbox_tmp: Path) -> None:
    """TLS from ``frontends.http.tls`` (a test CA's certificate for 127.0.0.1): the SDK client calls a tool over
    HTTPS; a client that does not trust the CA fails its handshake."""
    import ssl

    import trustme
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    leaf.private_key_and_cert_chain_pem.write_to_path(str(sandbox_tmp / "server.pem"))
    policy = _policy(sandbox_tmp, http={"tls": {"cert": "server.pem", "key": "server.pem"}})
    async with _start(policy) as server:
        assert server.base.startswith("https://127.0.0.1:")
        trusted = ssl.create_default_context()
        ca.configure_trust(trusted)
        with trio.fail_after(60):
            async with (
                httpx.AsyncClient(headers=AUTH, verify=trusted, timeout=30) as http,
                Client(streamable_http_client(server.url("alpha"), http_client=http), mode="legacy") as client,
            ):
                result = await client.call_tool("system_system_date", {})
                assert not result.is_error
            async with httpx.AsyncClient(headers=AUTH, timeout=30) as untrusting:
                with pytest.raises(httpx.ConnectError):
                    await untrusting.get(f"{server.base}/.well-known/oauth-protected-resource")
