"""The DNS stub the supervisor serves on a worker's bridge (UDP and TCP on the worker's 127.0.0.1:53).

It answers ``A``/``AAAA`` questions for names the toolbox's ``AllowedHosts`` allow, with exactly the addresses
the egress proxy would dial (:func:`sandbox._egress.decide`, any port), TTL 0 so that a client never keeps an
answer the proxy would no longer give. Everything else gets ``REFUSED``: names no rule matches, other types
(``TXT``, ``MX``, ``PTR``...), other classes; other opcodes get ``NOTIMP``, malformed queries ``FORMERR``. A
refused name is never sent to any resolver, so lookups cannot carry data out (no exfiltration by DNS).
An allowed name that does not exist answers ``NXDOMAIN``; a resolver failure ``SERVFAIL``.

What it does not do: recurse on its own (it asks the supervisor's resolver, and only for allowed names),
cache, sign or validate (no DNSSEC), or answer for the host's ``/etc/hosts`` beyond ``localhost``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import dns.exception
import dns.flags
import dns.message
import dns.opcode
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset
import trio

from sandbox._egress import Resolver, decide, default_resolve, local_addresses

if TYPE_CHECKING:
    from collections.abc import Callable

    from sandbox._host_names import IPAddress
    from sandbox._hosts import AllowedHosts

__all__ = ["answer_query", "serve_dns_stub"]

MAX_IN_FLIGHT = 64
TCP_IDLE_TIMEOUT_S = 10.0
MAX_TCP_CONNECTIONS = 32
_UDP_LIMIT = 512


def _reply(query: dns.message.Message, rcode: dns.rcode.Rcode) -> dns.message.Message:
    response = dns.message.make_response(query)
    response.flags |= dns.flags.RA
    response.set_rcode(rcode)
    return response


def _formerr(wire: bytes) -> bytes | None:
    """A FORMERR for a query that does not parse, echoing its id; ``None`` when not even a header arrived."""
    if len(wire) < 12:
        return None
    flags = 0x8000 | (wire[2] & 0x78) << 8 | dns.rcode.FORMERR  # QR, the opcode, FORMERR
    return wire[:2] + flags.to_bytes(2, "big") + b"\x00" * 8


async def answer_query(
    wire: bytes,
    rules: AllowedHosts,
    *,
    resolve: Resolver = default_resolve,
    own_addresses: Callable[[], frozenset[IPAddress]] = local_addresses,
    max_size: int = 65535,
) -> bytes | None:
    """Answer one DNS query in wire form; ``None`` means send nothing (not even a header arrived).

    A checkpoint when it resolves; the resolver is called only for an ``A``/``AAAA`` question about a name a
    rule allows. Answers larger than ``max_size`` (or the client's EDNS size) are sent truncated (TC set).
    """
    try:
        query = dns.message.from_wire(wire)
    except (dns.exception.DNSException, ValueError, IndexError):
        return _formerr(wire)
    if query.flags & dns.flags.QR:
        return None  # a response sent to us: never answer one (no reflection loops)
    if query.opcode() != dns.opcode.QUERY:
        response = _reply(query, dns.rcode.NOTIMP)
    elif len(query.question) != 1:
        response = _reply(query, dns.rcode.FORMERR)
    else:
        response = await _answer(query, rules, resolve, own_addresses)
    limit = max_size
    if query.edns >= 0:
        limit = min(max_size, max(_UDP_LIMIT, query.payload))
        response.use_edns(0, payload=limit)
    try:
        return response.to_wire(max_size=limit)
    except dns.exception.TooBig:
        truncated = _reply(query, response.rcode())
        truncated.flags |= dns.flags.TC
        return truncated.to_wire()


async def _answer(
    query: dns.message.Message,
    rules: AllowedHosts,
    resolve: Resolver,
    own_addresses: Callable[[], frozenset[IPAddress]],
) -> dns.message.Message:
    question = query.question[0]
    if question.rdclass != dns.rdataclass.IN or question.rdtype not in (dns.rdatatype.A, dns.rdatatype.AAAA):
        return _reply(query, dns.rcode.REFUSED)
    name = question.name.to_text(omit_final_dot=True)
    decision = await decide(name, None, rules, resolve=resolve, own_addresses=own_addresses)
    if decision.verdict == "refused":
        return _reply(query, dns.rcode.REFUSED)
    if decision.verdict == "failed":
        return _reply(query, dns.rcode.NXDOMAIN if decision.not_found else dns.rcode.SERVFAIL)
    version = 4 if question.rdtype == dns.rdatatype.A else 6
    addresses = [str(ip) for ip in decision.addresses if ip.version == version]
    response = _reply(query, dns.rcode.NOERROR)
    if addresses:
        response.answer.append(
            dns.rrset.from_text_list(question.name, 0, dns.rdataclass.IN, question.rdtype, addresses)
        )
    return response


async def serve_dns_stub(
    udp_sock: trio.socket.SocketType,
    tcp_sock: trio.socket.SocketType,
    rules: AllowedHosts,
    resolve: Resolver = default_resolve,
    *,
    own_addresses: Callable[[], frozenset[IPAddress]] = local_addresses,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve DNS on a bound UDP socket and a listening TCP socket until cancelled; closes both on return.

    For ``nursery.start``: ``task_status.started()`` once both are served. At most ``MAX_IN_FLIGHT`` UDP
    queries are answered at once (more are dropped, as a busy resolver would) and ``MAX_TCP_CONNECTIONS`` TCP
    connections are served (more wait); a TCP connection idle for ``TCP_IDLE_TIMEOUT_S`` is closed.
    """
    in_flight = trio.CapacityLimiter(MAX_IN_FLIGHT)
    tcp_limit = trio.CapacityLimiter(MAX_TCP_CONNECTIONS)
    listener = trio.SocketListener(tcp_sock)

    async def udp_one(wire: bytes, addr: object, token: object) -> None:
        try:
            reply = await answer_query(wire, rules, resolve=resolve, own_addresses=own_addresses, max_size=_UDP_LIMIT)
            if reply is not None:
                await udp_sock.sendto(reply, addr)  # type: ignore[call-overload]  # trio types addr as object
        except OSError:
            pass  # the client went away; UDP has no one to tell
        finally:
            in_flight.release_on_behalf_of(token)

    async def serve_udp(nursery: trio.Nursery) -> None:
        while True:
            try:
                wire, addr = await udp_sock.recvfrom(65535)
            except OSError:
                continue  # e.g. ECONNREFUSED reported for an earlier reply; the socket is still fine
            token = object()
            try:
                in_flight.acquire_on_behalf_of_nowait(token)
            except trio.WouldBlock:
                continue
            nursery.start_soon(udp_one, wire, addr, token)

    async def tcp_one(stream: trio.SocketStream, token: object) -> None:
        try:
            buffer = bytearray()
            try:
                while True:
                    with trio.move_on_after(TCP_IDLE_TIMEOUT_S) as idle:
                        while len(buffer) < 2 or len(buffer) < 2 + int.from_bytes(buffer[:2], "big"):
                            data = await stream.receive_some(65536)
                            if not data:
                                return
                            buffer += data
                    if idle.cancelled_caught:
                        return
                    size = int.from_bytes(buffer[:2], "big")
                    wire, buffer = bytes(buffer[2 : 2 + size]), buffer[2 + size :]
                    reply = await answer_query(wire, rules, resolve=resolve, own_addresses=own_addresses)
                    if reply is not None:
                        await stream.send_all(len(reply).to_bytes(2, "big") + reply)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                return
            finally:
                with trio.CancelScope(shield=True):
                    await stream.aclose()
        finally:
            tcp_limit.release_on_behalf_of(token)

    async def serve_tcp(nursery: trio.Nursery) -> None:
        while True:
            # A slot is taken before accepting (as the proxy does): connections beyond the limit wait in the
            # kernel's backlog, not as descriptors and tasks of the supervisor.
            token = object()
            await tcp_limit.acquire_on_behalf_of(token)
            try:
                stream = await listener.accept()
            except OSError:
                tcp_limit.release_on_behalf_of(token)
                await trio.sleep(0.1)  # out of descriptors: back off (not a synchronisation)
                continue
            except BaseException:
                tcp_limit.release_on_behalf_of(token)
                raise
            nursery.start_soon(tcp_one, stream, token)

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_udp, nursery)
            nursery.start_soon(serve_tcp, nursery)
            task_status.started()
    finally:
        udp_sock.close()
        with trio.CancelScope(shield=True):
            await listener.aclose()
