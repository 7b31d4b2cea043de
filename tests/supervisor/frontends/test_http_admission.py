"""Which connections the HTTP server holds: a real slowloris (connections trickling request heads from another
loopback address) beside an authenticated tenant whose calls go on, the per-peer cap, the whole-head bound, and the
``Host`` check against DNS rebinding; then the pure rules they follow."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import trio

from labkit import RawSession, Slowloris
from supervisor.config import host_is_served, served_host_names
from supervisor.frontends._http_admission import (
    Admit,
    ConnectionState,
    Refuse,
    head_deadline,
    plan_admission,
)
from supervisor.frontends._http_auth import hash_token
from tests._policies import agent, system_toolbox, write_policy
from tests.supervisor.frontends.test_mcp_http import _start

if TYPE_CHECKING:
    from pathlib import Path

    from tests.supervisor.frontends.test_mcp_http import _Server

TOKEN = "admission-token"
#: the attacker's own loopback address: the tenant calls from 127.0.0.1
ATTACKER = "127.0.0.2"


def _policy(root: Path, **http: Any) -> Path:
    return write_policy(
        root,
        {"alpha": agent("alpha", builtinToolboxes=[system_toolbox("system", ["date"])])},
        frontends={"http": {"listen": "127.0.0.1:0", **http}},
        tenants={"acme": {"tokens": [hash_token(TOKEN)], "agents": ["alpha"]}},
    )


def _port(server: _Server) -> int:
    return int(server.base.rsplit(":", 1)[1])


@pytest.mark.slow
@pytest.mark.root
async def test_a_slowloris_beside_a_tenant_whose_calls_go_on(sandbox_tmp: Path) -> None:
    """24 connections trickling a byte every 0.2 s against a server of 16 connections (the attack that took every
    place before): the tenant's calls, each on a new connection, and its keep-alive session all succeed, and every
    trickling connection is closed within the whole-head bound however steadily it sends."""
    policy = _policy(sandbox_tmp, max_connections=16, head_timeout_s=3)
    async with _start(policy) as server:
        loris = Slowloris(_port(server), connections=24, every_s=0.2, source=ATTACKER, path="/agents/alpha/mcp")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(loris.run)
            with trio.fail_after(60):
                while loris.opened < 24:  # noqa: ASYNC110 (counted by the attacker's tasks)
                    await trio.sleep(0.05)
            auth = {"authorization": f"Bearer {TOKEN}"}
            slowest = 0.0
            async with httpx.AsyncClient(headers=auth, timeout=30) as kept:
                session = RawSession(kept, server.url("alpha"))
                await session.open()
                deadline = time.monotonic() + 8  # past two whole-head bounds: the attack goes on meanwhile
                calls = 0
                while time.monotonic() < deadline or calls < 10:
                    began = time.monotonic()
                    # on a new connection (as a client whose pool was empty), then on the kept one
                    async with httpx.AsyncClient(headers=auth, timeout=30) as fresh:
                        on_fresh = RawSession(fresh, server.url("alpha"))
                        on_fresh.session_id = session.session_id
                        result = await on_fresh.request("tools/call", {"name": "system_system_date", "arguments": {}})
                    assert not result["isError"], result
                    result = await session.request("tools/call", {"name": "system_system_date", "arguments": {}})
                    assert not result["isError"], result
                    slowest = max(slowest, time.monotonic() - began)
                    calls += 1
            nursery.cancel_scope.cancel()
        # Generous: a call here takes milliseconds; 10 s would mean it waited out the attack.
        assert slowest < 10, slowest
        closed = [t for t in loris.lifetimes if t > 0]
        assert closed, "the server closed no trickling connection"
        # Every connection the server closed ended within the whole-head bound (3 s) plus slack, though it sent a
        # byte every 0.2 s: a deadline re-armed per byte would have held them all the 8 s and more.
        assert max(closed) < 3 + 2.5, sorted(closed)[-5:]
        refused = server.records("http_refused")
        assert any("had not sent its request head gave its place" in r["why"] for r in refused), refused[-3:]


@pytest.mark.root
async def test_one_address_holds_at_most_its_share_of_unauthenticated_connections(sandbox_tmp: Path) -> None:
    """Past ``max_unauthenticated_per_peer`` a new connection of an address takes the place of that address's
    longest-waiting one; the other addresses' connections are not touched."""
    policy = _policy(sandbox_tmp, max_unauthenticated_per_peer=3, unauthenticated_share=1.0, head_timeout_s=60)
    async with _start(policy) as server:
        port = _port(server)
        bystander = await trio.open_tcp_stream("127.0.0.1", port)
        opened = []
        for _ in range(6):
            opened.append(await trio.open_tcp_stream("127.0.0.1", port, local_address=ATTACKER))
            await opened[-1].send_all(b"GET / HTTP/1.1\r\n")  # a head begun, never finished
        with trio.fail_after(30):
            for stream in opened[:3]:  # the three oldest were closed for the three newest
                while await stream.receive_some(65536):
                    pass
        for stream in [*opened[3:], bystander]:
            with trio.move_on_after(0.5) as still_open:
                await stream.receive_some(65536)
            assert still_open.cancelled_caught, "a connection within its address's share was closed"
        await bystander.send_all(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        with trio.fail_after(30):
            assert (await bystander.receive_some(65536)).startswith(b"HTTP/1.1 200 ")
        records = server.records("http_refused")
        assert any(f"address {ATTACKER} at its 3 unauthenticated connections" in r["why"] for r in records), records
        for stream in [*opened, bystander]:
            await trio.aclose_forcefully(stream)


@pytest.mark.root
async def test_a_host_the_server_is_not_known_by_is_refused(sandbox_tmp: Path) -> None:
    """DNS rebinding: a page of ``evil.example`` whose name now resolves to this server sends ``Host:
    evil.example``; refused 421 with the names served. IP addresses, ``localhost`` and ``server_names`` pass."""
    policy = _policy(sandbox_tmp, server_names=["tools.example.test"])
    async with _start(policy) as server:
        port = _port(server)
        async with httpx.AsyncClient(timeout=30) as client:
            url = f"{server.base}/healthz"
            for host in [
                f"127.0.0.1:{port}",
                f"localhost:{port}",
                "tools.example.test",
                "TOOLS.example.test.",
                "[::1]",
            ]:
                answer = await client.get(url, headers={"host": host})
                assert answer.status_code == 200, (host, answer.text)
            refused = await client.get(
                server.url("alpha"), headers={"host": f"evil.example:{port}", "authorization": f"Bearer {TOKEN}"}
            )
            assert refused.status_code == 421
            why = refused.json()["error"]["message"]
            assert "'evil.example:" in why and "tools.example.test" in why and "server_names" in why
        [record] = [r for r in server.records("http_refused") if r["status"] == 421]
        assert "evil.example" in record["why"]


def _state(peer: str, since: float, *, reading: bool = True) -> ConnectionState:
    return ConnectionState(peer, waiting_since=since, reading_head=reading)


def _plan(peer: str, unauthenticated: dict[str, list[ConnectionState]], **caps: int) -> Admit | Refuse:
    limits = {"open_count": 0, "max_connections": 100, "max_unauthenticated": 10, "per_peer": 4, **caps}
    count = sum(len(v) for v in unauthenticated.values())
    return plan_admission(peer, unauthenticated=unauthenticated, unauthenticated_count=count, **limits)


def test_admission_takes_the_place_of_the_longest_waiting_connection_of_the_largest_holder() -> None:
    a1, a2, b1 = _state("a", 5), _state("a", 1), _state("b", 0)
    assert _plan("c", {"a": [a1, a2], "b": [b1]}) == Admit()
    # the unauthenticated share is full: the largest holder (a) gives its longest-waiting place, though b's is older
    assert _plan("c", {"a": [a1, a2], "b": [b1]}, max_unauthenticated=3).evict is a2  # type: ignore[union-attr]
    # past the per-peer cap, the peer's own longest-waiting connection
    assert _plan("b", {"a": [a1, a2], "b": [b1]}, per_peer=1).evict is b1  # type: ignore[union-attr]
    # all places taken by connections whose requests are being answered: refused, saying which limit
    busy = {"a": [_state("a", 0, reading=False)]}
    refused = _plan("a", busy, per_peer=1)
    assert isinstance(refused, Refuse) and refused.status == 429 and "max_unauthenticated_per_peer" in refused.reason
    refused = _plan("c", busy, max_unauthenticated=1)
    assert isinstance(refused, Refuse) and refused.status == 503 and "unauthenticated_share" in refused.reason
    refused = _plan("c", {}, open_count=100)
    assert isinstance(refused, Refuse) and refused.status == 503 and "max_connections" in refused.reason
    # the server is full of connections, some of them stalled: a stalled one gives its place
    assert _plan("c", {"a": [a1]}, open_count=100).evict is a1  # type: ignore[union-attr]


def test_the_head_deadline_is_the_whole_heads() -> None:
    # unauthenticated: from the start of the wait, whatever arrives
    assert (
        head_deadline(authenticated=False, waiting_since=10, first_byte_at=19, keepalive_s=30, head_timeout_s=5) == 15
    )
    # a tenant's connection may idle keepalive_s, then has head_timeout_s from the head's first byte
    assert (
        head_deadline(authenticated=True, waiting_since=10, first_byte_at=None, keepalive_s=30, head_timeout_s=5) == 40
    )
    assert head_deadline(authenticated=True, waiting_since=10, first_byte_at=12, keepalive_s=30, head_timeout_s=5) == 17


def test_host_names_served() -> None:
    names = served_host_names("0.0.0.0:8765", "https://Tools.Example.com", ["mcp.internal."])
    assert names == {"localhost", "0.0.0.0", "tools.example.com", "mcp.internal"}
    for host in [None, "localhost:8765", "10.1.2.3:8765", "[fe80::1]:1", "tools.example.com", "MCP.internal:80"]:
        assert host_is_served(host, names), host
    for host in ["evil.example", "localhost.evil.example", "", "tools.example.com.evil", "a b"]:
        assert not host_is_served(host, names), host
    assert json.dumps(sorted(names))  # printable in a refusal
