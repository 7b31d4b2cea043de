"""No tenant can take the HTTP server's connections from the others: against a real ``serve --http``, a tenant
opening many idle keep-alive connections loses its own longest-idle ones past its cap while another tenant's
connections and calls go on; a tenant whose connections are all busy is refused 429 naming the key; a tenant given
more than its fair share gives way first when the server is full. Then the pure rules.

Connections are raw sockets, so that which connection the server closed is seen exactly (an HTTP client's pool
would hide it)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import trio

from labkit import REVISION, RawSession
from supervisor.config import HttpFrontend, Tenant
from supervisor.frontends._http_admission import (
    Admit,
    ConnectionState,
    Refuse,
    fair_connection_share,
    plan_admission,
    plan_tenant_connection,
    tenant_connection_cap,
)
from supervisor.frontends._http_auth import hash_token
from tests._policies import agent, system_toolbox, write_policy
from tests.supervisor.frontends.test_mcp_http import _start

if TYPE_CHECKING:
    from pathlib import Path

    from tests.supervisor.frontends.test_mcp_http import _Server

A_TOKEN, B_TOKEN = "tenant-a-connections", "tenant-b-connections"


def _policy(root: Path, *, a_limits: dict[str, Any] | None = None, **http: Any) -> Path:
    return write_policy(
        root,
        {"alpha": agent("alpha", builtinToolboxes=[system_toolbox("system", ["date"])])},
        frontends={"http": {"listen": "127.0.0.1:0", **http}},
        tenants={
            "a": {"tokens": [hash_token(A_TOKEN)], "agents": ["alpha"], "limits": a_limits or {}},
            "b": {"tokens": [hash_token(B_TOKEN)], "agents": ["alpha"]},
        },
    )


class _Conn:
    """One raw keep-alive HTTP/1.1 connection: requests written, whole responses read."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buffer = b""

    @classmethod
    async def open(cls, server: _Server) -> _Conn:
        host, port = server.base.removeprefix("http://").rsplit(":", 1)
        return cls(await trio.open_tcp_stream(host, int(port)))

    async def _more(self) -> bool:
        chunk = await self.stream.receive_some(65536)
        self.buffer += chunk
        return bool(chunk)

    async def head(self, request: bytes) -> tuple[int, dict[str, str]]:
        """Send ``request``; the response's status and headers (its body, if any, stays in the buffer)."""
        await self.stream.send_all(request)
        with trio.fail_after(30):
            while b"\r\n\r\n" not in self.buffer:
                if not await self._more():
                    raise ConnectionError(f"closed by the server before a response: {self.buffer!r}")
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        return int(lines[0].split()[1]), headers

    async def exchange(self, request: bytes) -> tuple[int, dict[str, str], bytes]:
        """Send ``request`` and read its whole response (``content-length`` framed)."""
        status, headers = await self.head(request)
        length = int(headers.get("content-length", "0"))
        with trio.fail_after(30):
            while len(self.buffer) < length:
                if not await self._more():
                    break
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return status, headers, body

    async def closed_by_server(self) -> bool:
        """Whether the server closed it: read to the end (with a deadline), nothing else may arrive."""
        with trio.move_on_after(20):
            while await self._more():
                pass
            return True
        return False

    async def aclose(self) -> None:
        await trio.aclose_forcefully(self.stream)


def _post(token: str, message: dict[str, Any], session: str | None = None) -> bytes:
    body = json.dumps(message).encode()
    head = [
        "POST /agents/alpha/mcp HTTP/1.1",
        "host: 127.0.0.1",
        f"authorization: Bearer {token}",
        "content-type: application/json",
        "accept: application/json, text/event-stream",
        f"content-length: {len(body)}",
    ]
    if session is not None:
        head += [f"mcp-session-id: {session}", f"mcp-protocol-version: {REVISION}"]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def _initialize(token: str) -> bytes:
    params = {"protocolVersion": REVISION, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
    return _post(token, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params})


def _ping(token: str, session: str) -> bytes:
    return _post(token, {"jsonrpc": "2.0", "id": 2, "method": "ping"}, session)


async def _b_calls(server: _Server) -> None:
    """Tenant b opens a session on a new connection and calls a tool: it must succeed."""
    async with httpx.AsyncClient(headers={"authorization": f"Bearer {B_TOKEN}"}, timeout=30) as client:
        session = RawSession(client, server.url("alpha"))
        await session.open()
        result = await session.request("tools/call", {"name": "system_system_date", "arguments": {}})
        assert not result["isError"], result


@pytest.mark.root
async def test_a_tenants_idle_connections_give_way_to_its_own_new_ones_never_to_anothers(sandbox_tmp: Path) -> None:
    """Tenant a opens 20 keep-alive connections, each with a served request, then leaves them idle, against a
    server of 16 connections shared by two tenants (a's cap by default: 16 / 2 = 8). The server closes a's 12
    longest-idle ones as its newer ones come, keeps its 8 newest serving, never touches b's connection opened
    before the flood, and b's calls (on that connection and on new ones) all succeed."""
    async with _start(_policy(sandbox_tmp, max_connections=16)) as server:
        b_kept = await _Conn.open(server)
        status, headers, _ = await b_kept.exchange(_initialize(B_TOKEN))
        assert status == 200, status
        b_session = headers["mcp-session-id"]
        a_conns = []
        for _ in range(20):
            conn = await _Conn.open(server)
            status, headers, _ = await conn.exchange(_initialize(A_TOKEN))
            assert status == 200, status  # a's own idle ones make room: none of its requests is refused
            a_conns.append((conn, headers["mcp-session-id"]))
        for conn, _ in a_conns[:12]:
            assert await conn.closed_by_server(), "an idle connection of a past its cap was kept"
        for conn, session in a_conns[12:]:  # the newest 8 still serve (a request on a kept one is no new place)
            status, _, body = await conn.exchange(_ping(A_TOKEN, session))
            assert status == 200 and json.loads(body)["result"] == {}, body
        status, _, body = await b_kept.exchange(_ping(B_TOKEN, b_session))
        assert status == 200 and json.loads(body)["result"] == {}, body  # b's connection was never closed
        for _ in range(6):  # b's new connections find places: a holds 8 of 16
            await _b_calls(server)
        evicted = [r for r in server.records("http_refused") if "idle keep-alive connection" in r["why"]]
        assert evicted and {r["tenant"] for r in evicted} == {"a"}, evicted
        assert "tenants.a" not in evicted[0]["why"] and "max_connections_per_tenant" in evicted[0]["why"]
        for conn, _ in a_conns:
            await conn.aclose()
        await b_kept.aclose()


async def _open_stream(server: _Server, token: str) -> _Conn:
    """A session whose GET event stream holds a connection of the tenant (busy, not idle)."""
    conn = await _Conn.open(server)
    status, headers, _ = await conn.exchange(_initialize(token))
    assert status == 200, status
    session = headers["mcp-session-id"]
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    status, _, _ = await conn.exchange(_post(token, note, session))
    assert status == 202, status
    get = (
        "GET /agents/alpha/mcp HTTP/1.1\r\nhost: 127.0.0.1\r\naccept: text/event-stream\r\n"
        f"authorization: Bearer {token}\r\nmcp-session-id: {session}\r\nmcp-protocol-version: {REVISION}\r\n\r\n"
    )
    status, headers = await conn.head(get.encode())
    assert status == 200 and headers["content-type"].startswith("text/event-stream"), (status, headers)
    return conn


async def _served(server: _Server, token: str) -> bool:
    """Whether a new connection's request of the tenant is served."""
    conn = await _Conn.open(server)
    try:
        return (await conn.exchange(_initialize(token)))[0] == 200
    finally:
        await conn.aclose()


@pytest.mark.root
async def test_a_tenant_whose_connections_are_all_busy_is_refused_with_the_key(sandbox_tmp: Path) -> None:
    """Tenant a (``tenants.a.limits.connections: 3``) holds three event streams; its fourth connection's request
    is answered 429 with ``Retry-After``, the key named and the connection closed, while b's calls succeed; once
    one of a's streams ends, a's new connection is served."""
    async with _start(_policy(sandbox_tmp, a_limits={"connections": 3})) as server:
        streams = [await _open_stream(server, A_TOKEN) for _ in range(3)]
        extra = await _Conn.open(server)
        status, headers, body = await extra.exchange(_initialize(A_TOKEN))
        assert status == 429, (status, body)
        assert headers["retry-after"] == "1" and headers["connection"] == "close", headers
        error = json.loads(body)["error"]
        assert "tenant 'a' holds 3 connections, its limit of 3 (tenants.a.limits.connections)" in error["message"]
        assert error["data"] == {"retryAfterSeconds": 1, "limit": "connections"}, error
        assert await extra.closed_by_server()
        await extra.aclose()
        await _b_calls(server)
        for conn in streams:  # a's streams were not touched by the refusal: still open after its answer
            with trio.move_on_after(0.3):
                while await conn._more():
                    pass
                raise AssertionError("a busy stream of a was closed")
        refused = [r for r in server.records("http_refused") if r["status"] == 429 and r["tenant"] == "a"]
        assert refused and "tenants.a.limits.connections" in refused[0]["why"], refused
        await streams.pop().aclose()  # one stream ends: its place is free

        with trio.fail_after(30):
            while not await _served(server, A_TOKEN):  # noqa: ASYNC110 (the place is freed in another process)
                await trio.sleep(0.1)
        for conn in streams:
            await conn.aclose()


@pytest.mark.root
async def test_a_tenant_past_its_fair_share_gives_way_when_the_server_is_full(sandbox_tmp: Path) -> None:
    """The policy lets a hold every connection (``tenants.a.limits.connections: 8`` of 8); a does, all idle. A new
    connection of b finds the server full with no stalled unauthenticated one: it takes the place of a's
    longest-idle connection (a is past its fair share of 8 / 2), and b's calls are served."""
    async with _start(_policy(sandbox_tmp, max_connections=8, a_limits={"connections": 8})) as server:
        a_conns = []
        for _ in range(8):
            conn = await _Conn.open(server)
            assert (await conn.exchange(_initialize(A_TOKEN)))[0] == 200
            a_conns.append(conn)
        await _b_calls(server)
        assert await a_conns[0].closed_by_server(), "a's longest-idle connection was not the one taken"
        records = [r for r in server.records("http_refused") if "past its fair share of 4" in r["why"]]
        assert records and records[0]["tenant"] == "a", records
        for conn in a_conns:
            await conn.aclose()


def _conn(tenant: str | None, since: float, *, idle: bool = True, begun: bool = False) -> ConnectionState:
    return ConnectionState(
        "p", waiting_since=since, reading_head=idle, tenant=tenant, head_begun_at=1.0 if begun else None
    )


def test_a_tenant_past_its_cap_closes_its_longest_idle_connections_first() -> None:
    old, new, busy, reading = _conn("a", 1), _conn("a", 5), _conn("a", 0, idle=False), _conn("a", 0, begun=True)
    assert plan_tenant_connection("a", [old, new, busy], 4, "k") == []  # under its cap: nothing closed
    assert plan_tenant_connection("a", [new, busy, old], 3, "k") == [old]
    # over by two (a reload lowered the cap): the two longest idle
    assert plan_tenant_connection("a", [new, busy, old], 2, "k") == [old, new]
    # a connection busy with a request, or with a head begun, is never closed for a new one: refused, key named
    refused = plan_tenant_connection("a", [busy, reading], 2, "tenants.a.limits.connections")
    assert isinstance(refused, Refuse) and refused.status == 429
    assert "holds 2 connections, its limit of 2 (tenants.a.limits.connections)" in refused.reason


def test_a_full_server_takes_an_idle_place_only_from_a_tenant_past_its_fair_share() -> None:
    a1, a2, a3, b1 = _conn("a", 3), _conn("a", 1), _conn("a", 2), _conn("b", 0)
    caps = {"open_count": 4, "max_connections": 4, "max_unauthenticated": 1, "per_peer": 4, "unauthenticated_count": 0}
    plan = plan_admission("c", unauthenticated={}, tenants={"a": [a1, a2, a3], "b": [b1]}, fair_share=2, **caps)
    assert isinstance(plan, Admit) and plan.evict is a2, plan  # a's longest idle; b (within its share) untouched
    refused = plan_admission("c", unauthenticated={}, tenants={"a": [a1, a2], "b": [b1]}, fair_share=2, **caps)
    assert isinstance(refused, Refuse) and "max_connections" in refused.reason  # nobody past the share: refused
    busy = {"a": [_conn("a", 0, idle=False)] * 3, "b": [b1]}
    assert isinstance(plan_admission("c", unauthenticated={}, tenants=busy, fair_share=2, **caps), Refuse)


def test_a_tenants_cap_and_the_key_that_sets_it() -> None:
    settings = HttpFrontend(max_connections=4096)
    plain, own = Tenant(agents=["x"]), Tenant(agents=["x"], limits={"connections": 10})  # type: ignore[arg-type]
    assert fair_connection_share(4096, 1) == 2048 and fair_connection_share(4096, 16) == 256
    assert fair_connection_share(3, 8) == 1
    assert tenant_connection_cap("t", plain, settings, 1) == (
        2048,
        "frontends.http.max_connections_per_tenant, by default max_connections / max(2, tenants)",
    )
    assert tenant_connection_cap("t", own, settings, 1) == (10, "tenants.t.limits.connections")
    fixed = HttpFrontend(max_connections=4096, max_connections_per_tenant=100)
    assert tenant_connection_cap("t", plain, fixed, 4) == (100, "frontends.http.max_connections_per_tenant")
