"""Fuzzing the egress proxy's request parsing and the DNS stub's packet parsing; slowloris and connection floods
against a real proxy on a loopback socket."""

from __future__ import annotations

import os
import socket

import dns.message
import dns.rdatatype
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox import AllowedHosts, HostError, Resolution, _egress, serve_egress
from sandbox._dns_stub import answer_query
from sandbox._egress import _split_absolute
from sandbox._egress_headers import Refusal
from sandbox._host_names import split_host_port

RULES = AllowedHosts.parse(["api.example.com"])


async def _never_resolve(host: str) -> Resolution:
    raise AssertionError(f"the resolver was asked about {host!r}")


def _no_addresses() -> frozenset:
    return frozenset()


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600))
def test_dns_stub_answers_any_bytes_without_raising(wire: bytes) -> None:
    reply = trio.run(lambda: answer_query(wire, RULES, resolve=_never_resolve, own_addresses=_no_addresses))
    assert reply is None or (isinstance(reply, bytes) and len(reply) <= 65535)
    if reply is not None:
        assert reply[:2] == wire[:2]  # the id is echoed
        assert reply[2] & 0x80  # QR: a response


@settings(max_examples=200, deadline=None)
@given(
    st.text(max_size=80),
    st.sampled_from(["A", "AAAA", "TXT", "ANY", "MX"]),
    st.lists(st.tuples(st.integers(0, 80), st.integers(0, 255)), max_size=6),
)
def test_dns_stub_mutated_queries(name: str, rdtype: str, flips: list[tuple[int, int]]) -> None:
    try:
        wire = bytearray(dns.message.make_query(name or ".", dns.rdatatype.from_text(rdtype)).to_wire())
    except Exception:  # a name dnspython itself cannot encode: nothing to send
        return
    for at, value in flips:
        if at < len(wire):
            wire[at] = value
    reply = trio.run(lambda: answer_query(bytes(wire), RULES, resolve=_never_resolve, own_addresses=_no_addresses))
    if reply is not None:
        parsed = dns.message.from_wire(reply)
        assert not parsed.answer  # nothing allowed was asked (the resolver would have raised)


@settings(max_examples=500, deadline=None)
@given(
    st.text(max_size=300)
    | st.sampled_from(
        [
            "http://",
            "http://[::1",
            "http://a:99999/",
            "http://:80",
            "HTTP://[fe80::1%25eth0]/",
            "http://a@b/",
            "http://\x00/",
            "HTTPS://a/",
            "https:/a",
            "ftp://a/",
        ]
    )
)
def test_request_targets_parse_or_refuse_cleanly(target: str) -> None:
    try:
        scheme, authority, path = _split_absolute(target)
    except Refusal as exc:
        refusal = exc
        assert refusal.status == 400
        assert refusal.reason
        return
    assert path.startswith("/")
    assert scheme in ("http", "https")
    try:
        split_host_port(authority, default_port=80)
    except HostError as exc:
        message = str(exc)
        assert message


async def _serve(nursery: trio.Nursery, decisions: list[dict]) -> tuple[str, int]:
    sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    await sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    await nursery.start(
        lambda task_status: serve_egress(
            sock,
            RULES,
            on_decision=decisions.append,
            resolve=_never_resolve,
            own_addresses=_no_addresses,
            task_status=task_status,
        )
    )
    return sock.getsockname()


async def _exchange(addr: tuple[str, int], data: bytes) -> bytes:
    """Send ``data`` on a new connection to the proxy and read until it closes (bounded in time)."""
    with trio.fail_after(10):
        async with await trio.open_tcp_stream(*addr) as client:
            await client.send_all(data)
            reply = b""
            while chunk := await client.receive_some(65536):
                reply += chunk
    return reply


HEADS = [
    b"GET / HTTP/1.1\r\n\r\n",
    b"CONNECT \r\n\r\n",
    b"CONNECT 169.254.169.254:80 HTTP/1.1\r\n\r\n",
    b"GET http://evil.example/ HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
    b"\x00\xff\r\n\r\n",
    b"GET http://" + b"a" * 20000 + b"/ HTTP/1.1\r\n\r\n",
    b"GET http://api.example.com:0/ HTTP/1.1\r\n\r\n",
]


@pytest.mark.parametrize("head", HEADS)
async def test_hostile_heads_get_an_http_refusal(head: bytes) -> None:
    decisions: list[dict] = []
    async with trio.open_nursery() as nursery:
        addr = await _serve(nursery, decisions)
        reply = await _exchange(addr, head)
        assert reply.startswith((b"HTTP/1.1 400", b"HTTP/1.1 403")), reply[:200]
        assert decisions and decisions[-1]["verdict"] == "refused"
        nursery.cancel_scope.cancel()


async def test_slowloris_is_cut_at_the_head_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_egress, "HEAD_TIMEOUT_S", 0.5)
    decisions: list[dict] = []
    async with trio.open_nursery() as nursery:
        addr = await _serve(nursery, decisions)
        reply = await _exchange(addr, b"G")  # one byte, then nothing: the proxy must not wait for ever
        assert reply.startswith(b"HTTP/1.1 400") and b"no complete request head within" in reply
        nursery.cancel_scope.cancel()


async def test_connections_beyond_the_limit_are_not_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_egress, "MAX_CONNECTIONS", 3)
    decisions: list[dict] = []
    async with trio.open_nursery() as nursery:
        addr = await _serve(nursery, decisions)
        with trio.fail_after(10):
            idle = [await trio.open_tcp_stream(*addr) for _ in range(3)]
            await trio.testing.wait_all_tasks_blocked()
            before = len(os.listdir("/proc/self/fd"))
            late = await trio.open_tcp_stream(*addr)  # completes in the kernel's backlog
            await late.send_all(b"GET / HTTP/1.1\r\n\r\n")
            await trio.testing.wait_all_tasks_blocked()
            # Only the client's own socket is new: the proxy did not accept (no descriptor, no task).
            assert len(os.listdir("/proc/self/fd")) - before == 1
            with trio.move_on_after(0.3) as scope:  # bounded look: nothing may arrive while 3 are open
                await late.receive_some(1)
            assert scope.cancelled_caught, "a 4th connection was served while 3 held every slot"
            await idle[0].aclose()  # a slot frees: the waiting connection is accepted and answered
            reply = await late.receive_some(65536)
        assert reply.startswith(b"HTTP/1.1 400")
        for stream in (late, *idle[1:]):
            await stream.aclose()
        nursery.cancel_scope.cancel()


async def test_a_bug_while_serving_a_connection_fails_that_connection_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever goes wrong inside the proxy for one connection (here a planted error) is a failed decision for it;
    the proxy, and the supervisor that runs it, serve on."""

    def broken(target: str) -> tuple[str, str]:
        raise RuntimeError("planted")

    decisions: list[dict] = []
    async with trio.open_nursery() as nursery:
        addr = await _serve(nursery, decisions)
        monkeypatch.setattr(_egress, "_split_absolute", broken)
        assert await _exchange(addr, b"GET http://api.example.com/ HTTP/1.1\r\nHost: api.example.com\r\n\r\n") == b""
        assert decisions[-1]["verdict"] == "failed"
        assert decisions[-1]["reason"] == "internal error: RuntimeError: planted"
        monkeypatch.undo()
        reply = await _exchange(addr, b"GET http://evil.example/ HTTP/1.1\r\nHost: evil.example\r\n\r\n")
        assert reply.startswith(b"HTTP/1.1 403") and decisions[-1]["verdict"] == "refused"
        nursery.cancel_scope.cancel()
