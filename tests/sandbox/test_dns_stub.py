"""The DNS stub's answers and the shared ``decide`` step, with a recording resolver (no network)."""

from __future__ import annotations

import ipaddress
import os

import dns.flags
import dns.message
import dns.opcode
import dns.query
import dns.rcode
import pytest
import trio
import trio.lowlevel
import trio.testing

from sandbox import AllowedHosts, HostError, IPAddress, Resolution, ResolveError, decide, serve_dns_stub
from sandbox._dns_stub import answer_query

RULES = AllowedHosts.parse(
    [
        "www.example.test",
        "*.cdn.example.test",
        "gone.example.test",
        "broken.example.test",
        "meta.example.test",
        "many.example.test",
        "localhost",
    ],
    loopback=True,
)


class Recorder:
    """A resolver that records every name it is asked for."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def __call__(self, host: str) -> Resolution:
        self.asked.append(host)
        await trio.lowlevel.checkpoint()
        return Resolution(*self._answer(host))

    def _answer(self, host: str) -> tuple[tuple[IPAddress, ...], tuple[str, ...]]:
        if host == "gone.example.test":
            raise ResolveError("no such name", not_found=True)
        if host == "broken.example.test":
            raise ResolveError("resolver timed out")
        if host == "meta.example.test":
            return (ipaddress.ip_address("169.254.169.254"),), ()
        if host == "many.example.test":
            return tuple(ipaddress.ip_address(f"203.0.113.{i}") for i in range(1, 101)), ()
        if host.startswith("alias-"):  # alias-<target>: a CNAME of <target>
            return (ipaddress.ip_address("203.0.113.10"),), (host[len("alias-") :],)
        return (ipaddress.ip_address("203.0.113.10"), ipaddress.ip_address("2001:db8::10")), ()


def no_own() -> frozenset[IPAddress]:
    return frozenset()


async def ask(name: str, kind: str = "A", resolver: Recorder | None = None, **kw: object) -> dns.message.Message:
    query = dns.message.make_query(name, kind, **kw)  # type: ignore[arg-type]
    wire = await answer_query(query.to_wire(), RULES, resolve=resolver or Recorder(), own_addresses=no_own)
    assert wire is not None
    return dns.message.from_wire(wire)


async def test_allowed_names_get_the_dialable_addresses_with_ttl_zero() -> None:
    reply = await ask("www.example.test", "A")
    assert reply.rcode() == dns.rcode.NOERROR
    assert [(r.to_text(), s.ttl) for s in reply.answer for r in s] == [("203.0.113.10", 0)]
    reply = await ask("A.CDN.Example.Test.", "AAAA")
    assert [r.to_text() for s in reply.answer for r in s] == ["2001:db8::10"]


async def test_refused_names_never_reach_the_resolver() -> None:
    recorder = Recorder()
    for name, kind in [
        ("evil.example.test", "A"),
        ("cdn.example.test", "A"),
        ("x.www.example.test", "AAAA"),
        ("www.example.test", "TXT"),
        ("www.example.test", "MX"),
        ("10.in-addr.arpa", "PTR"),
        ("bad\\000name.example.test", "A"),
    ]:
        reply = await ask(name, kind, recorder)
        assert reply.rcode() == dns.rcode.REFUSED, (name, kind)
        assert not reply.answer
    assert recorder.asked == []


async def test_forbidden_addresses_refused_missing_names_nxdomain_failures_servfail() -> None:
    assert (await ask("meta.example.test")).rcode() == dns.rcode.REFUSED
    assert (await ask("gone.example.test")).rcode() == dns.rcode.NXDOMAIN
    assert (await ask("broken.example.test")).rcode() == dns.rcode.SERVFAIL


async def test_localhost_is_answered_without_any_lookup() -> None:
    recorder = Recorder()
    reply = await ask("localhost", "AAAA", recorder)
    assert [r.to_text() for s in reply.answer for r in s] == ["::1"]
    assert recorder.asked == []
    # Where the policy does not open the loopback, localhost is not answered at all.
    closed = await answer_query(
        dns.message.make_query("localhost", "A").to_wire(), AllowedHosts.parse(["localhost"]), resolve=recorder
    )
    assert closed is not None and dns.message.from_wire(closed).rcode() == dns.rcode.REFUSED


async def test_malformed_and_odd_queries() -> None:
    recorder = Recorder()
    assert await answer_query(b"\x12", RULES, resolve=recorder) is None
    formerr = await answer_query(
        b"\x12\x34" + b"\x01\x00" + b"\x00\x05" + b"\x00" * 6 + b"junk", RULES, resolve=recorder
    )
    assert formerr is not None
    assert formerr[:2] == b"\x12\x34"
    assert formerr[3] & 0x0F == dns.rcode.FORMERR
    response = dns.message.make_response(dns.message.make_query("www.example.test", "A"))
    assert await answer_query(response.to_wire(), RULES, resolve=recorder) is None
    notify = dns.message.make_query("www.example.test", "SOA")
    notify.set_opcode(dns.opcode.NOTIFY)
    reply = dns.message.from_wire(await answer_query(notify.to_wire(), RULES, resolve=recorder) or b"")
    assert reply.rcode() == dns.rcode.NOTIMP
    assert recorder.asked == []


async def test_large_answers_are_truncated_over_udp() -> None:
    query = dns.message.make_query("many.example.test", "A")
    wire = await answer_query(query.to_wire(), RULES, resolve=Recorder(), own_addresses=no_own, max_size=512)
    assert wire is not None
    reply = dns.message.from_wire(wire)
    assert reply.flags & dns.flags.TC
    assert len(wire) <= 512
    full = await answer_query(query.to_wire(), RULES, resolve=Recorder(), own_addresses=no_own)
    assert len(dns.message.from_wire(full or b"").answer[0]) == 100


async def test_decide_never_resolves_ip_literals_or_refused_names() -> None:
    recorder = Recorder()
    rules = AllowedHosts.parse(["203.0.113.7", "www.example.test"])
    allowed = await decide("0xcb.0.0x71.7", 443, rules, resolve=recorder, own_addresses=no_own)
    assert (allowed.verdict, allowed.addresses) == ("allowed", (ipaddress.ip_address("203.0.113.7"),))
    refused = await decide("evil.example.test", 443, rules, resolve=recorder, own_addresses=no_own)
    assert refused.verdict == "refused"
    bad = await decide("exa mple", 443, rules, resolve=recorder, own_addresses=no_own)
    assert bad.verdict == "refused"
    assert recorder.asked == []


async def test_cname_targets_are_judged_like_requested_names() -> None:
    rules = AllowedHosts.parse(
        [
            "alias-www.example.test:443",
            "www.example.test:443",
            "alias-cdn.other.test",
            "alias-metadata.google.internal",
            "alias-x.fastly.test",
        ]
    )
    ok = await decide("alias-www.example.test", 443, rules, resolve=Recorder(), own_addresses=no_own)
    assert ok.verdict == "allowed"
    refused = await decide("alias-cdn.other.test", 443, rules, resolve=Recorder(), own_addresses=no_own)
    assert refused.verdict == "refused"
    assert "alias (CNAME) of cdn.other.test" in refused.reason and "cname_targets" in refused.reason
    meta = await decide("alias-metadata.google.internal", 80, rules, resolve=Recorder(), own_addresses=no_own)
    assert meta.verdict == "refused" and "cloud metadata" in meta.reason
    # the target must be allowed on the request's port, as if the request had named it
    other_port = AllowedHosts.parse(["alias-www.example.test", "www.example.test:443"])
    assert (
        await decide("alias-www.example.test", 80, other_port, resolve=Recorder(), own_addresses=no_own)
    ).verdict == "refused"


async def test_the_policy_can_accept_cname_targets_by_pattern_or_all() -> None:
    entries = ["alias-x.fastly.test", "alias-cdn.other.test"]
    by_pattern = AllowedHosts.parse(entries, cname_targets=["*.fastly.test"])
    assert (
        await decide("alias-x.fastly.test", 443, by_pattern, resolve=Recorder(), own_addresses=no_own)
    ).verdict == "allowed"
    assert (
        await decide("alias-cdn.other.test", 443, by_pattern, resolve=Recorder(), own_addresses=no_own)
    ).verdict == "refused"
    anything = AllowedHosts.parse(entries, cname_targets=["*"])
    assert (
        await decide("alias-cdn.other.test", 443, anything, resolve=Recorder(), own_addresses=no_own)
    ).verdict == "allowed"
    # '*' never opens a metadata name, and the addresses are still judged
    meta = AllowedHosts.parse(["alias-metadata.goog", "meta.example.test"], cname_targets=["*"])
    decision = await decide("alias-metadata.goog", 80, meta, resolve=Recorder(), own_addresses=no_own)
    assert decision.verdict == "refused"


def test_cname_targets_are_names_without_ports() -> None:
    for bad in ["cdn.example:443", "203.0.113.1", "*.*.x"]:
        with pytest.raises(HostError):
            AllowedHosts.parse(["a.example"], cname_targets=[bad])


async def test_metadata_names_are_refused_before_rules_and_never_resolved() -> None:
    recorder = Recorder()
    rules = AllowedHosts.parse(["*.google.internal", "*.goog"])
    for name in ["metadata.google.internal", "METADATA.goog."]:
        decision = await decide(name, 80, rules, resolve=recorder, own_addresses=no_own)
        assert decision.verdict == "refused" and "cloud metadata" in decision.reason
    assert recorder.asked == []


async def _stub_sockets(backlog: int) -> tuple[trio.socket.SocketType, trio.socket.SocketType, int]:
    """A UDP and a listening TCP socket for a stub, on one port of 127.0.0.1."""
    udp = trio.socket.socket(type=trio.socket.SOCK_DGRAM)
    await udp.bind(("127.0.0.1", 0))
    tcp = trio.socket.socket()
    await tcp.bind(("127.0.0.1", udp.getsockname()[1]))
    tcp.listen(backlog)
    return udp, tcp, udp.getsockname()[1]


async def test_stub_serves_udp_and_tcp() -> None:
    udp, tcp, port = await _stub_sockets(backlog=8)
    recorder = Recorder()
    async with trio.open_nursery() as nursery:
        await nursery.start(
            lambda task_status: serve_dns_stub(udp, tcp, RULES, recorder, own_addresses=no_own, task_status=task_status)
        )
        query = dns.message.make_query("www.example.test", "A")
        by_udp = await trio.to_thread.run_sync(lambda: dns.query.udp(query, "127.0.0.1", port=port, timeout=5))
        by_tcp = await trio.to_thread.run_sync(lambda: dns.query.tcp(query, "127.0.0.1", port=port, timeout=5))
        refused = await trio.to_thread.run_sync(
            lambda: dns.query.udp(dns.message.make_query("evil.test", "A"), "127.0.0.1", port=port, timeout=5)
        )
        nursery.cancel_scope.cancel()
    assert by_udp.answer == by_tcp.answer
    assert [r.to_text() for s in by_udp.answer for r in s] == ["203.0.113.10"]
    assert refused.rcode() == dns.rcode.REFUSED
    assert recorder.asked == ["www.example.test", "www.example.test"]


async def test_tcp_connections_past_the_limit_wait_in_the_backlog_not_as_descriptors() -> None:
    """A worker opening TCP connections to the stub without end once made the supervisor accept them all (one
    descriptor and one task each); now a slot is taken before accepting, as the proxy does."""
    from sandbox._dns_stub import MAX_TCP_CONNECTIONS

    udp, tcp, port = await _stub_sockets(backlog=1024)
    extra = 60
    clients: list[trio.socket.SocketType] = []

    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    async with trio.open_nursery() as nursery:
        await nursery.start(
            lambda task_status: serve_dns_stub(
                udp, tcp, RULES, Recorder(), own_addresses=no_own, task_status=task_status
            )
        )
        before = fds()
        for _ in range(MAX_TCP_CONNECTIONS + extra):
            client = trio.socket.socket()
            await client.connect(("127.0.0.1", port))  # completed by the kernel's backlog, accepted or not
            clients.append(client)
        for _ in range(20):
            await trio.lowlevel.checkpoint()  # let the stub accept what it may (scheduling, not a wait for time)
        grown = fds() - before
        nursery.cancel_scope.cancel()
    for client in clients:
        client.close()
    # every client holds one descriptor; the stub holds at most one per slot
    assert grown <= len(clients) + MAX_TCP_CONNECTIONS, (grown, len(clients))


async def test_a_bridge_has_at_most_its_share_of_lookups_in_flight() -> None:
    """Slow names asked through the stub (or the proxy) hold at most ``limit`` lookups, so one worker cannot take
    trio's whole thread pool (shared by the supervisor) away from the others."""
    from sandbox import limited_resolver

    release = trio.Event()
    in_flight, most = 0, 0

    async def slow(host: str) -> Resolution:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        try:
            await release.wait()
            return Resolution((ipaddress.ip_address("203.0.113.10"),))
        finally:
            in_flight -= 1

    resolve = limited_resolver(slow, 3)
    rules = AllowedHosts.parse(["*.example.test"])
    async with trio.open_nursery() as nursery:
        for i in range(20):
            query = dns.message.make_query(f"n{i}.example.test", "A").to_wire()
            nursery.start_soon(lambda q=query: answer_query(q, rules, resolve=resolve, own_addresses=no_own))
        await trio.testing.wait_all_tasks_blocked()  # every query reached the resolver or waits for a slot
        assert (most, in_flight) == (3, 3)
        release.set()
    assert in_flight == 0 and most == 3
