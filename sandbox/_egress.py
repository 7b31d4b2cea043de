"""The egress proxy the supervisor serves on a worker's bridge: CONNECT and absolute-form HTTP, nothing else.

Each request's host is normalised and matched against the toolbox's ``AllowedHosts`` (:mod:`sandbox._hosts`);
cloud metadata names are refused before any rule (:mod:`sandbox._metadata`). The supervisor resolves the name
itself, as an absolute name (no search list; ``localhost`` is always 127.0.0.1 and ::1, never looked up), refuses
a CNAME target the rules do not allow, drops every address :func:`~sandbox._addresses.address_verdict` refuses
(metadata first), and dials a checked address, by number, with no second lookup. Refusals answer ``403`` with
the reason in the body (``400`` for requests that are not proxy requests, ``502`` when an allowed host cannot be
resolved or reached). Every decision is reported once, when the
connection ends, to ``on_decision`` with toolbox, method, host, port, verdict, reason, address, bytes up/down.

* CONNECT: after ``200`` the bytes are relayed opaquely in both directions (TLS stays end to end). Whatever the
  client sends inside the tunnel, a second CONNECT included, only reaches the address already checked. With a
  ``terminator`` (the TLS-terminating mode a toolbox opts into), the proxy instead speaks TLS to the client with a
  leaf for the CONNECT host and relays each request in the tunnel itself (:mod:`sandbox._egress_tls`).
* Absolute-form (``GET http://host/path``, and ``GET https://host/path``: then the proxy originates TLS to the
  upstream, verified against the system CA store, or the ``upstream_tls`` context given): one request per client
  connection. The request head is rewritten to origin form with ``Host`` set from the checked URL (a different
  ``Host`` header could pick another virtual host on the same address), hop-by-hop and ``Proxy-*`` headers dropped
  and ``Connection: close``; the credentials bound to the URL (:mod:`sandbox._credentials`) are added; the body is
  re-framed with h11 as it streams (never buffered whole); the response is relayed as it comes and the
  connection closes when it is complete.

Its parts: the decision :mod:`sandbox._egress_decide`, the upstream's connection and TLS
:mod:`sandbox._egress_upstream`, an absolute-form request :mod:`sandbox._egress_forward` (its head:
:mod:`sandbox._egress_headers`), a CONNECT tunnel :mod:`sandbox._egress_relay`, the TLS-terminating mode
:mod:`sandbox._egress_tls`.

What it does not do: add credentials to a CONNECT tunnel or look inside it (a tunnel's SNI may name another host
served by the same address), limit
bandwidth, or cache. The DNS stub (:mod:`sandbox._dns_stub`) uses :func:`decide` so it answers with the very
addresses this proxy would dial.
"""

from __future__ import annotations

import errno
import ipaddress
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import h11
import trio

from sandbox._credentials import Credential, path_refusal
from sandbox._egress_decide import (
    Decision,
    Resolution,
    ResolveError,
    Resolver,
    decide,
    default_resolve,
    limited_resolver,
    local_addresses,
    no_own_ports,
    shown_host,
)
from sandbox._egress_forward import forward
from sandbox._egress_headers import MAX_HEAD_BYTES, Refusal, refusal_response
from sandbox._egress_relay import tunnel
from sandbox._egress_upstream import default_upstream_tls, dial, upstream_tls
from sandbox._errors import exception_leaves
from sandbox._host_names import HostError, IPAddress, split_host_port

if TYPE_CHECKING:
    import ssl

    from sandbox._hosts import AllowedHosts

__all__ = [
    "Decision",
    "OnDecision",
    "Resolution",
    "ResolveError",
    "Resolver",
    "Terminator",
    "decide",
    "default_resolve",
    "default_upstream_tls",
    "limited_resolver",
    "local_addresses",
    "serve_egress",
]


class Terminator(Protocol):
    """What the TLS-terminating mode needs of the supervisor's CA: a server context for an allowed host."""

    def server_context(self, host: str) -> ssl.SSLContext: ...


OnDecision = Callable[[dict[str, Any]], None]

HEAD_TIMEOUT_S = 30.0
MAX_CONNECTIONS = 256


def _split_absolute(target: str) -> tuple[str, str, str]:
    """Split an absolute-form ``http(s)://authority/path`` target into (scheme, authority, origin-form path)."""
    scheme, sep, rest = target.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in ("http", "https"):
        raise Refusal(
            400,
            "this is an HTTP proxy: send absolute-form requests (http://host/path or https://host/path) or "
            "CONNECT host:port",
        )
    cut = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    authority, path = rest[:cut], rest[cut:].split("#", 1)[0]
    if not path.startswith("/"):
        path = "/" + path
    return scheme, authority, path


class _Connection:
    """One client connection of the proxy: read the head, decide, dial, relay, report."""

    def __init__(self, stream: trio.SocketStream, server: _Server) -> None:
        self.client = stream
        self.server = server
        self.record: dict[str, Any] = {
            "toolbox": server.toolbox,
            "method": "",
            "host": "",
            "port": None,
            "verdict": "refused",
            "reason": "",
            "address": None,
            "bytes_up": 0,
            "bytes_down": 0,
            "scheme": "",
        }
        self.started = time.monotonic()

    async def run(self) -> None:
        try:
            try:
                await self._serve()
            except BaseExceptionGroup as group:  # from the relay nurseries
                raise _single(group) from None
        except Refusal as exc:
            self.record["verdict"] = "failed" if exc.status in (502, 504) else "refused"
            self.record["reason"] = exc.reason
            try:
                await self.client.send_all(refusal_response(exc.status, exc.reason))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            if not self.record["reason"]:
                self.record["reason"] = f"connection broken: {exc}"
        except _Quiet:
            return  # the client left before sending a request: nothing was decided
        except Exception as exc:  # a bug of ours: this connection fails, never the supervisor
            self.record["verdict"] = "failed"
            self.record["reason"] = f"internal error: {type(exc).__name__}: {str(exc)[:200]}"
        finally:
            with trio.CancelScope(shield=True):
                await self.client.aclose()
        self.record["duration_s"] = round(time.monotonic() - self.started, 6)
        self.server.on_decision(dict(self.record))

    async def _read_head(self) -> tuple[h11.Connection, h11.Request]:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        with trio.move_on_after(HEAD_TIMEOUT_S) as scope:
            while True:
                try:
                    event = conn.next_event()
                except h11.RemoteProtocolError as exc:
                    raise Refusal(400, f"malformed request head: {exc}") from None
                if isinstance(event, h11.Request):
                    return conn, event
                if event is h11.NEED_DATA:
                    data = await self.client.receive_some(65536)
                    if not data:
                        raise _Quiet
                    conn.receive_data(data)
                else:
                    raise _Quiet
        assert scope.cancelled_caught
        raise Refusal(400, f"no complete request head within {HEAD_TIMEOUT_S:.0f} s")

    async def _serve(self) -> None:
        conn, request = await self._read_head()
        method = request.method.decode("ascii", "replace")
        target = request.target.decode("ascii", "replace")
        self.record["method"] = method
        if method == "CONNECT":
            scheme, authority, path = "", target, ""
            default_port = None
        else:
            scheme, authority, path = _split_absolute(target)
            default_port = 443 if scheme == "https" else 80
        self.record["scheme"] = scheme or "connect"
        try:
            host, port = split_host_port(authority, default_port=default_port)
        except HostError as exc:
            self.record["host"] = authority[:255]
            raise Refusal(400 if not authority else 403, str(exc)) from None
        self.record["host"], self.record["port"] = shown_host(host), port
        decision = await decide(
            str(host) if not isinstance(host, ipaddress.IPv6Address) else f"[{host}]",
            port,
            self.server.rules,
            resolve=self.server.resolve,
            own_addresses=self.server.own_addresses,
            own_ports=self.server.own_ports,
        )
        if decision.verdict == "refused":
            raise Refusal(403, decision.reason)
        if decision.verdict == "failed":
            raise Refusal(502, decision.reason)
        if method == "CONNECT" and self.server.terminator is not None:
            await self._terminate(conn, decision, host, port)
            return
        if method != "CONNECT" and (refusal := path_refusal(self.server.credentials, scheme, host, port, path)):
            raise Refusal(400, refusal)
        upstream: trio.abc.Stream = await dial(decision, port, self.record)
        try:
            if scheme == "https":
                upstream = await upstream_tls(upstream, host, self.server.upstream_tls)
            self.record["verdict"] = "allowed"
            if method == "CONNECT":
                if not isinstance(upstream, trio.SocketStream):  # a tunnel carries the client's own TLS
                    raise Refusal(502, "a CONNECT tunnel cannot run over a TLS connection the proxy made")
                await self.client.send_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                leftover, _closed = conn.trailing_data
                if leftover:
                    await upstream.send_all(bytes(leftover))
                    self.record["bytes_up"] += len(leftover)
                await tunnel(self.client, upstream, self.record)
            else:
                await forward(
                    self.client,
                    conn,
                    request,
                    upstream,
                    scheme=scheme,
                    host=host,
                    port=port,
                    path=path,
                    credentials=self.server.credentials,
                    record=self.record,
                )
        finally:
            with trio.CancelScope(shield=True):
                await upstream.aclose()

    async def _terminate(self, conn: h11.Connection, decision: Decision, host: str | IPAddress, port: int) -> None:
        """TLS-terminating mode (:mod:`sandbox._egress_tls`): a leaf for the allowed host, then each request in
        the tunnel judged, given its credentials and sent upstream over verified TLS."""
        from sandbox._egress_tls import Prefixed, relay_terminated

        assert self.server.terminator is not None
        server_ctx = self.server.terminator.server_context(str(host))
        self.record["verdict"] = "allowed"
        await self.client.send_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        leftover, _closed = conn.trailing_data

        async def open_upstream() -> trio.abc.Stream:
            raw = await dial(decision, port, self.record)
            try:
                return await upstream_tls(raw, host, self.server.upstream_tls)
            except BaseException:
                with trio.CancelScope(shield=True):
                    await raw.aclose()
                raise

        await relay_terminated(
            Prefixed(self.client, bytes(leftover)),
            host=host,
            port=port,
            server_ctx=server_ctx,
            open_upstream=open_upstream,
            credentials=self.server.credentials,
            record=self.record,
        )


class _Quiet(Exception):
    """The client closed before sending a request: nothing to decide or report."""


_EXPECTED = (Refusal, _Quiet, trio.BrokenResourceError, trio.ClosedResourceError, OSError)


def _single(group: BaseExceptionGroup) -> BaseException:
    """The one exception to handle for a group of expected connection errors (a refusal first); else the group."""
    leaves = exception_leaves(group)
    if not all(isinstance(e, _EXPECTED) for e in leaves):
        return group
    refusals = [e for e in leaves if isinstance(e, Refusal)]
    return refusals[0] if refusals else leaves[0]


@dataclass
class _Server:
    rules: AllowedHosts
    toolbox: str
    on_decision: OnDecision
    resolve: Resolver
    own_addresses: Callable[[], frozenset[IPAddress]]
    limiter: trio.CapacityLimiter
    credentials: tuple[Credential, ...] = ()
    upstream_tls: ssl.SSLContext = field(default_factory=lambda: default_upstream_tls())
    terminator: Terminator | None = None
    own_ports: Callable[[], frozenset[int]] = no_own_ports


async def serve_egress(
    listener_sock: trio.socket.SocketType,
    rules: AllowedHosts,
    *,
    on_decision: OnDecision,
    toolbox: str = "",
    resolve: Resolver = default_resolve,
    own_addresses: Callable[[], frozenset[IPAddress]] = local_addresses,
    credentials: tuple[Credential, ...] = (),
    upstream_tls: ssl.SSLContext | None = None,
    terminator: Terminator | None = None,
    own_ports: Callable[[], frozenset[int]] = no_own_ports,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the proxy on ``listener_sock`` (a listening trio TCP socket) until cancelled.

    For ``nursery.start``: ``task_status.started()`` once accepting. Connections beyond ``MAX_CONNECTIONS``
    wait in the listen backlog, not accepted. A broken client or server ends its own connection only;
    ``on_decision`` is called once per request (not for connections closed before a request), from the trio
    thread, and exceptions it raises propagate.
    The listener is closed when this returns. ``credentials`` are added to the absolute-form requests their
    bindings match (``on_decision`` records then name them, never their values); ``upstream_tls`` verifies the
    upstreams of ``https://`` requests (default: :func:`default_upstream_tls`, the system store; tests pass a
    context trusting their own CA, never one that skips verification). ``terminator`` (the supervisor's CA,
    :class:`sandbox._tls_ca.SupervisorCA`) turns on the TLS-terminating mode for CONNECT. ``own_ports``: the
    supervisor's own listening ports (:class:`sandbox._egress_decide.OwnListeners`), never dialled on loopback.
    """
    server = _Server(
        rules,
        toolbox,
        on_decision,
        resolve,
        own_addresses,
        trio.CapacityLimiter(MAX_CONNECTIONS),
        tuple(credentials),
        upstream_tls or default_upstream_tls(),
        terminator,
        own_ports,
    )
    listener = trio.SocketListener(listener_sock)

    async def handle(stream: trio.SocketStream, token: object) -> None:
        try:
            await _Connection(stream, server).run()
        finally:
            server.limiter.release_on_behalf_of(token)

    try:
        async with trio.open_nursery() as nursery:
            task_status.started()
            while True:
                # A slot is taken before accepting: connections beyond the limit wait in the kernel's backlog,
                # not as descriptors and tasks of the supervisor (a worker cannot exhaust its descriptors).
                token = object()
                await server.limiter.acquire_on_behalf_of(token)
                try:
                    stream = await listener.accept()
                except OSError as exc:
                    server.limiter.release_on_behalf_of(token)
                    if exc.errno not in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                        raise
                    await trio.sleep(0.1)  # back off until descriptors free up; not a synchronisation
                    continue
                except BaseException:
                    server.limiter.release_on_behalf_of(token)
                    raise
                nursery.start_soon(handle, stream, token)
    finally:
        with trio.CancelScope(shield=True):
            await listener.aclose()
