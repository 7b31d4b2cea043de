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

What it does not do: add credentials to a CONNECT tunnel or look inside it (a tunnel's SNI may name another host
served by the same address), limit
bandwidth, or cache. The DNS stub (:mod:`sandbox._dns_stub`) uses :func:`decide` so it answers with the very
addresses this proxy would dial.
"""

from __future__ import annotations

import errno
import functools
import ipaddress
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import h11
import trio

from sandbox._credentials import (
    Credential,
    apply_credentials,
    forwarding_header_names,
    matching_credentials,
    path_refusal,
)
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
    own_host_refusal,
    shown_host,
)
from sandbox._egress_headers import HOP_BY_HOP, MAX_HEAD_BYTES
from sandbox._egress_relay import RELAY_CHUNK_BYTES, tunnel
from sandbox._errors import exception_leaves
from sandbox._hosts import AllowedHosts, HostError, IPAddress, split_host_port

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
CONNECT_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 256
#: Headers that frame a request body; kept even when the client names them in ``Connection``.
_FRAMING = frozenset({b"content-length", b"transfer-encoding"})
_REASONS = {400: b"Bad Request", 403: b"Forbidden", 502: b"Bad Gateway", 504: b"Gateway Timeout"}


class _Refusal(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def _response(status: int, reason: str) -> bytes:
    body = f"agents-supervise egress proxy: {reason}\n".encode()
    return (
        b"HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n"
        b"Connection: close\r\nX-Agents-Supervise-Egress: refused\r\n\r\n"
        % (status, _REASONS.get(status, b"Error"), len(body))
    ) + body


def _split_absolute(target: str) -> tuple[str, str, str]:
    """Split an absolute-form ``http(s)://authority/path`` target into (scheme, authority, origin-form path)."""
    scheme, sep, rest = target.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in ("http", "https"):
        raise _Refusal(
            400,
            "this is an HTTP proxy: send absolute-form requests (http://host/path or https://host/path) or "
            "CONNECT host:port",
        )
    cut = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    authority, path = rest[:cut], rest[cut:].split("#", 1)[0]
    if not path.startswith("/"):
        path = "/" + path
    return scheme, authority, path


@functools.cache
def default_upstream_tls() -> ssl.SSLContext:
    """The context the proxy verifies upstream servers with: the system CA store (``SSL_CERT_FILE`` and
    ``SSL_CERT_DIR`` as OpenSSL reads them, at the first call), host names checked, TLS 1.2 at least. One
    context for the whole process (loading the store takes milliseconds)."""
    ctx = ssl.create_default_context()
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


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
        except _Refusal as exc:
            self.record["verdict"] = "failed" if exc.status in (502, 504) else "refused"
            self.record["reason"] = exc.reason
            try:
                await self.client.send_all(_response(exc.status, exc.reason))
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
                    raise _Refusal(400, f"malformed request head: {exc}") from None
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
        raise _Refusal(400, f"no complete request head within {HEAD_TIMEOUT_S:.0f} s")

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
            raise _Refusal(400 if not authority else 403, str(exc)) from None
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
            raise _Refusal(403, decision.reason)
        if decision.verdict == "failed":
            raise _Refusal(502, decision.reason)
        if method == "CONNECT" and self.server.terminator is not None:
            await self._terminate(conn, decision, host, port)
            return
        if method != "CONNECT" and (refusal := path_refusal(self.server.credentials, scheme, host, port, path)):
            raise _Refusal(400, refusal)
        upstream: trio.abc.Stream = await self._dial(decision, port)
        try:
            if scheme == "https":
                upstream = await self._tls(upstream, host)
            self.record["verdict"] = "allowed"
            if method == "CONNECT":
                if not isinstance(upstream, trio.SocketStream):  # a tunnel carries the client's own TLS
                    raise _Refusal(502, "a CONNECT tunnel cannot run over a TLS connection the proxy made")
                await self.client.send_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                leftover, _closed = conn.trailing_data
                if leftover:
                    await upstream.send_all(bytes(leftover))
                    self.record["bytes_up"] += len(leftover)
                await tunnel(self.client, upstream, self.record)
            else:
                await self._forward(conn, request, upstream, scheme, host, port, path)
        finally:
            with trio.CancelScope(shield=True):
                await upstream.aclose()

    async def _dial(self, decision: Decision, port: int) -> trio.SocketStream:
        errors: list[str] = []
        for ip in decision.addresses:
            family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
            sock = trio.socket.socket(family, socket.SOCK_STREAM)
            try:
                with trio.move_on_after(CONNECT_TIMEOUT_S) as scope:
                    await sock.connect((str(ip), port))
                if scope.cancelled_caught:
                    raise OSError(errno.ETIMEDOUT, "connect timed out")
                if refused := own_host_refusal(sock, ip):
                    raise _Refusal(403, refused)
            except OSError as exc:
                sock.close()
                errors.append(f"{ip}: {exc.strerror or exc}")
                continue
            except BaseException:
                sock.close()
                raise
            self.record["address"] = str(ip)
            return trio.SocketStream(sock)
        raise _Refusal(502, f"cannot connect to {decision.host} port {port}: {'; '.join(errors)}")

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
            raw = await self._dial(decision, port)
            try:
                return await self._tls(raw, host)
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

    async def _tls(self, raw: trio.abc.Stream, host: str | IPAddress) -> trio.SSLStream[trio.abc.Stream]:
        """TLS to the upstream over ``raw``, its certificate verified for ``host`` (name or address)."""
        stream = trio.SSLStream(raw, self.server.upstream_tls, server_hostname=str(host), https_compatible=True)
        try:
            with trio.fail_after(CONNECT_TIMEOUT_S):
                await stream.do_handshake()
        except trio.TooSlowError:
            raise _Refusal(502, f"no TLS handshake with {shown_host(host)} within {CONNECT_TIMEOUT_S:.0f} s") from None
        except (trio.BrokenResourceError, ssl.SSLError) as exc:
            cause = exc.__cause__ if isinstance(exc, trio.BrokenResourceError) and exc.__cause__ else exc
            why = getattr(cause, "verify_message", None) or getattr(cause, "reason", None) or str(cause)
            raise _Refusal(
                502,
                f"TLS with {shown_host(host)} failed ({why}); the proxy verifies upstream "
                "certificates against the system CA store",
            ) from None
        return stream

    async def _forward(
        self,
        conn: h11.Connection,
        request: h11.Request,
        upstream: trio.abc.Stream,
        scheme: str,
        host: str | IPAddress,
        port: int,
        path: str,
    ) -> None:
        headers = [(n, v) for n, v in request.headers if n.lower() not in HOP_BY_HOP]
        # Headers the client names in Connection are hop-by-hop too, but never the body's framing: h11 has framed
        # the request body by it already, and the upstream request must carry the same framing.
        named = {
            t.strip().lower() for n, v in request.headers if n.lower() == b"connection" for t in v.split(b",")
        } - _FRAMING
        headers = [(n, v) for n, v in headers if n.lower() not in named]
        if any(n.lower() == b"transfer-encoding" for n, _ in headers):
            headers = [(n, v) for n, v in headers if n.lower() != b"content-length"]  # RFC 9112 6.3: TE wins
        creds = matching_credentials(self.server.credentials, scheme, host, port, path)
        if creds:
            if dropped := forwarding_header_names(headers):
                self.record["dropped_headers"] = dropped
            headers, path = apply_credentials(creds, headers, path)
            self.record["credentials"] = [c.name for c in creds]
        shown = shown_host(host)
        host_header = shown if port == (443 if scheme == "https" else 80) else f"{shown}:{port}"
        up = h11.Connection(h11.CLIENT)
        head = up.send(
            h11.Request(
                method=request.method,
                target=path.encode("ascii", "replace"),
                headers=[(b"Host", host_header.encode()), *headers, (b"Connection", b"close")],
            )
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._response, up, upstream, nursery.cancel_scope)
            await upstream.send_all(head or b"")
            self.record["bytes_up"] += len(head or b"")
            try:
                await self._request_body(conn, up, upstream)
            except h11.ProtocolError as exc:  # a body the upstream framing cannot carry: refuse, never crash
                raise _Refusal(400, f"request body does not match its framing: {exc}") from None

    async def _request_body(self, conn: h11.Connection, up: h11.Connection, upstream: trio.abc.Stream) -> None:
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                raise _Refusal(400, f"malformed request body: {exc}") from None
            if event is h11.NEED_DATA:
                data = await self.client.receive_some(RELAY_CHUNK_BYTES)
                if not data:
                    return
                conn.receive_data(data)
                continue
            if isinstance(event, h11.Data | h11.EndOfMessage):
                out = up.send(event)
                if out:
                    await upstream.send_all(out)
                    self.record["bytes_up"] += len(out)
                if isinstance(event, h11.EndOfMessage):
                    return
            else:
                return

    async def _response(self, up: h11.Connection, upstream: trio.abc.Stream, scope: trio.CancelScope) -> None:
        """Relay the response as it arrives; stop when h11 sees it complete (or the server closes)."""
        parsing = True
        try:
            while True:
                data = await upstream.receive_some(RELAY_CHUNK_BYTES)
                if not data:
                    break
                await self.client.send_all(data)
                self.record["bytes_down"] += len(data)
                if parsing:
                    try:
                        up.receive_data(bytes(data))
                        while (event := up.next_event()) not in (h11.NEED_DATA, h11.PAUSED):
                            if isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                                return
                    except h11.ProtocolError:
                        parsing = False
        finally:
            scope.cancel()


class _Quiet(Exception):
    """The client closed before sending a request: nothing to decide or report."""


_EXPECTED = (_Refusal, _Quiet, trio.BrokenResourceError, trio.ClosedResourceError, OSError)


def _single(group: BaseExceptionGroup) -> BaseException:
    """The one exception to handle for a group of expected connection errors (a refusal first); else the group."""
    leaves = exception_leaves(group)
    if not all(isinstance(e, _EXPECTED) for e in leaves):
        return group
    refusals = [e for e in leaves if isinstance(e, _Refusal)]
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
