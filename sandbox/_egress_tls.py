"""The egress proxy's TLS-terminating mode: HTTP inside a worker's CONNECT tunnel, read, judged and re-originated.

For a toolbox that opted in, an allowed ``CONNECT host:port`` is answered ``200`` and then the proxy speaks TLS to
the worker itself, presenting a leaf certificate for exactly ``host`` minted by the supervisor's CA
(:mod:`sandbox._tls_ca`; the worker trusts that CA and nothing else). :func:`relay_terminated` then reads HTTP/1.1
requests from the tunnel one after the other (keep-alive works), and for each one:

- the request must be for the tunnel's host and port (``Host``, or an absolute ``https://`` target): another name
  is ``421 Misdirected Request`` and the tunnel ends, so a second request in one tunnel can never ride on the
  first one's decision or credential; ``CONNECT`` and ``Upgrade`` inside are refused (``501``);
- the credentials whose bindings match (``https``, host, port, path) are added (:mod:`sandbox._credentials`);
- it is sent over a new upstream connection (``open_upstream``: the checked address, TLS verified for the host),
  ``Connection: close``, and the response is re-framed to the worker by h11 as it streams.

Nothing else passes: a tunnel that does not start with a TLS handshake the worker completes is closed.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import h11
import trio

from sandbox._credentials import Credential, path_refusal
from sandbox._egress_headers import HOP_BY_HOP, MAX_HEAD_BYTES, upstream_head
from sandbox._host_names import Host, HostError, normalize_host, split_host_port

__all__ = ["Prefixed", "relay_terminated"]

HANDSHAKE_TIMEOUT_S = 30.0
IDLE_TIMEOUT_S = 60.0
CHUNK = 256 * 1024
#: inside a terminated tunnel ``Expect`` is not relayed either: the relay answers no interim ``100 Continue``
_HOP = HOP_BY_HOP | {b"expect"}
_RESPONSE_DROP = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"trailer", b"upgrade"}
)

OpenUpstream = Callable[[], Awaitable[trio.abc.Stream]]


class Prefixed(trio.abc.Stream):
    """``stream`` whose first bytes received are ``prefix`` (what the worker sent right after its CONNECT head)."""

    def __init__(self, stream: trio.abc.Stream, prefix: bytes) -> None:
        self.stream = stream
        self.prefix = prefix

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.stream.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        if self.prefix:
            out, self.prefix = self.prefix, b""
            return out
        return await self.stream.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.stream.aclose()


class _End(Exception):
    """The tunnel ends here (the worker closed it, or a refusal was answered)."""


class _Tunnel:
    def __init__(
        self,
        tls: trio.SSLStream[Any],
        host: Host,
        port: int,
        open_upstream: OpenUpstream,
        credentials: Sequence[Credential],
        record: dict[str, Any],
    ) -> None:
        self.tls = tls
        self.host = host
        self.port = port
        self.open_upstream = open_upstream
        self.credentials = credentials
        self.record = record
        self.conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)

    async def _next(self) -> Any:
        while True:
            try:
                event = self.conn.next_event()
            except h11.RemoteProtocolError as exc:
                await self._refuse(400, f"malformed request: {exc}")
            if event is not h11.NEED_DATA:
                return event
            with trio.move_on_after(IDLE_TIMEOUT_S) as scope:
                data = await self.tls.receive_some(CHUNK)
            if scope.cancelled_caught:
                raise _End
            self.conn.receive_data(bytes(data))
            self.record["bytes_up"] += len(data)

    async def _send(self, event: Any) -> None:
        out = self.conn.send(event)
        if out:
            await self.tls.send_all(out)
            self.record["bytes_down"] += len(out)

    async def _refuse(self, status: int, reason: str) -> None:
        body = f"agents-supervise egress proxy: {reason}\n".encode()
        self.record.setdefault("refused_requests", []).append(reason[:300])
        if self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            try:
                await self._send(
                    h11.Response(
                        status_code=status,
                        headers=[
                            (b"Content-Type", b"text/plain; charset=utf-8"),
                            (b"Content-Length", str(len(body)).encode()),
                            (b"Connection", b"close"),
                            (b"X-Agents-Supervise-Egress", b"refused"),
                        ],
                    )
                )
                await self._send(h11.Data(data=body))
                await self._send(h11.EndOfMessage())
            except (h11.LocalProtocolError, trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        raise _End

    def _target(self, request: h11.Request) -> tuple[str, str]:
        """(problem or "", origin-form path) of a request in the tunnel."""
        target = request.target.decode("ascii", "replace")
        host_header = next((v.decode("ascii", "replace") for n, v in request.headers if n == b"host"), "")
        authority = host_header
        if target[:8].lower() == "https://":
            rest = target[8:]
            cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
            authority, target = rest[:cut], rest[cut:] or "/"
        if not target.startswith("/"):
            return f"the request target {target[:100]!r} is not a path", ""
        try:
            host, port = split_host_port(authority, default_port=443)
        except HostError as exc:
            return f"the request's host is not valid: {exc}", ""
        if host != self.host or port != self.port:
            return (
                f"this tunnel is for {self.record['host']} port {self.port}; a request for {authority[:100]!r} "
                "needs its own CONNECT"
            ), ""
        return "", target.split("#", 1)[0]

    async def serve(self) -> None:
        while True:
            event = await self._next()
            if not isinstance(event, h11.Request):
                raise _End  # ConnectionClosed, or data after a closed cycle
            self.record["requests"] = self.record.get("requests", 0) + 1
            if event.method == b"CONNECT" or any(n == b"upgrade" for n, _ in event.headers):
                await self._refuse(501, "CONNECT and protocol upgrades are not relayed inside a terminated tunnel")
            problem, path = self._target(event)
            if problem:
                await self._refuse(421, problem)
            if refusal := path_refusal(self.credentials, "https", self.host, self.port, path):
                await self._refuse(400, refusal)
            await self._forward(event, path)
            if self.conn.our_state is h11.MUST_CLOSE or self.conn.their_state is h11.MUST_CLOSE:
                raise _End
            try:
                self.conn.start_next_cycle()
            except h11.LocalProtocolError:
                raise _End from None

    async def _forward(self, request: h11.Request, path: str) -> None:
        headers, path = upstream_head(
            request.headers,
            scheme="https",
            host=self.host,
            port=self.port,
            path=path,
            shown=self.record["host"],
            credentials=self.credentials,
            record=self.record,
            drop=_HOP,
        )
        try:
            upstream = await self.open_upstream()
        except Exception as exc:  # the upstream's refusal or failure, with the proxy's reason
            await self._refuse(502, str(getattr(exc, "reason", None) or exc))
        try:
            up = h11.Connection(h11.CLIENT)
            await upstream.send_all(
                up.send(h11.Request(method=request.method, target=path.encode("ascii", "replace"), headers=headers))
                or b""
            )
            if self.conn.they_are_waiting_for_100_continue:
                await self._send(h11.InformationalResponse(status_code=100, headers=[]))
            while True:
                event = await self._next()
                if isinstance(event, h11.Data | h11.EndOfMessage):
                    await upstream.send_all(up.send(event) or b"")
                    if isinstance(event, h11.EndOfMessage):
                        break
                else:
                    raise _End
            await self._response(up, upstream)
        finally:
            with trio.CancelScope(shield=True):
                await upstream.aclose()

    async def _response(self, up: h11.Connection, upstream: trio.abc.Stream) -> None:
        while True:
            try:
                event = up.next_event()
            except h11.RemoteProtocolError as exc:
                await self._refuse(502, f"the upstream's response is malformed: {exc}")
            if event is h11.NEED_DATA:
                data = await upstream.receive_some(CHUNK)
                up.receive_data(bytes(data))
                continue
            if isinstance(event, h11.InformationalResponse):
                continue  # its 100 Continue was for us
            if isinstance(event, h11.Response):
                headers = [(n, v) for n, v in event.headers if n not in _RESPONSE_DROP]
                await self._send(h11.Response(status_code=event.status_code, headers=headers, reason=event.reason))
            elif isinstance(event, h11.Data):
                await self._send(event)
            elif isinstance(event, h11.EndOfMessage):
                await self._send(h11.EndOfMessage())
                return
            else:  # the upstream closed before the response was complete
                raise _End


async def relay_terminated(
    client: trio.abc.Stream,
    *,
    host: Host | str,
    port: int,
    server_ctx: ssl.SSLContext,
    open_upstream: OpenUpstream,
    credentials: Sequence[Credential],
    record: dict[str, Any],
) -> None:
    """Terminate the worker's TLS on ``client`` (the tunnel, after ``200``) with ``server_ctx`` and relay its
    requests for ``host``:``port`` as the module docstring says. Updates ``record`` (``terminated``, ``requests``,
    ``credentials``, ``refused_requests``, bytes); returns when the tunnel ends, never raising for what the worker
    or the upstream does."""
    if isinstance(host, str):
        host = normalize_host(host)
    record["terminated"] = True
    tls = trio.SSLStream(client, server_ctx, server_side=True, https_compatible=True)
    try:
        with trio.fail_after(HANDSHAKE_TIMEOUT_S):
            await tls.do_handshake()
    except (trio.TooSlowError, trio.BrokenResourceError, ssl.SSLError) as exc:
        record["reason"] = f"the worker did not complete a TLS handshake with the proxy: {type(exc).__name__}"
        return
    try:
        await _Tunnel(tls, host, port, open_upstream, credentials, record).serve()
    except (_End, trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError):
        pass
    finally:
        with trio.CancelScope(shield=True):
            try:
                await tls.aclose()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
