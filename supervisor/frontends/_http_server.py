"""The HTTP server under :class:`~supervisor.frontends._mcp_http.McpHttpApp`: where it listens, TLS, and how many
connections it holds.

HTTP/1.1 on trio with h11 (``_http_conn.py``), optionally TLS from ``frontends.http.tls`` (ALPN ``http/1.1``). At
most ``frontends.http.max_connections`` connections are open at once (TLS handshakes included): one more is
answered ``503`` with ``Retry-After`` and a reason, then closed, and the refusal is traced (``http_refused``, at
most one record a second, with the number refused since the last). An idle connection is closed after
``keepalive_s``.
"""

from __future__ import annotations

import errno
import ssl
from typing import TYPE_CHECKING, Any

import trio

from supervisor.config import HttpFrontend, normalise_origin, parse_listen, public_url_for

from ._http_conn import App, serve_connection, simple_response
from ._mcp_http import McpHttpApp

if TYPE_CHECKING:
    from supervisor._supervisor import Supervisor
    from supervisor.traces import TraceRecorder

    from ._http_auth import Authenticator

__all__ = ["ConnectionGate", "serve_mcp_http"]

#: the largest request head (request line and headers) read
MAX_HEAD_BYTES = 64 * 1024
#: refusals being written at once past the cap; past this a connection over the cap is closed without a word
_MAX_REFUSING = 64
_ACCEPT_ERRORS = (errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS)


class ConnectionGate:
    """Counts the open connections and refuses those past the cap, tracing the refusals without flooding."""

    def __init__(self, cap: int, trace: TraceRecorder) -> None:
        self.cap = cap
        self.trace = trace
        self.open = 0
        self.refusing = 0
        self._unreported = 0
        self._reported_at = -1e9

    def admit(self) -> bool:
        """Take a place for a new connection; ``False`` when all ``cap`` are taken."""
        if self.open >= self.cap:
            return False
        self.open += 1
        return True

    def release(self) -> None:
        self.open -= 1

    def reason(self) -> str:
        return (
            f"this server holds {self.cap} open connections, its limit (frontends.http.max_connections); retry shortly"
        )

    def _traced(self) -> None:
        self._unreported += 1
        now = trio.current_time()
        if now - self._reported_at >= 1.0:
            self.trace.record(
                "http_refused", status=503, path="", method="", tenant=None, why=self.reason(), refused=self._unreported
            )
            self._unreported = 0
            self._reported_at = now

    async def refuse(self, stream: trio.SocketStream) -> None:
        """Answer 503 and close; what the client sent is read and dropped first so the answer is not reset."""
        self._traced()
        self.refusing += 1
        try:
            with trio.move_on_after(2):
                await stream.send_all(simple_response(503, self.reason(), [("retry-after", "5")]))
                await stream.send_eof()
                while await stream.receive_some(65536):
                    pass
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            self.refusing -= 1
            await trio.aclose_forcefully(stream)


async def _connection(
    stream: trio.SocketStream,
    app: App,
    gate: ConnectionGate,
    settings: HttpFrontend,
    ssl_context: ssl.SSLContext | None,
    trace: TraceRecorder,
) -> None:
    try:
        peer: Any = stream.socket.getpeername()
        here: Any = stream.socket.getsockname()
    except OSError:
        peer = here = None
    try:
        served: trio.abc.Stream = stream
        if ssl_context is not None:
            served = trio.SSLStream(stream, ssl_context, server_side=True, https_compatible=True)
            with trio.move_on_after(settings.keepalive_s) as handshake:
                try:
                    await served.do_handshake()
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return
            if handshake.cancelled_caught:
                return

        def on_error(exc: BaseException) -> None:
            trace.record("internal_error", where="http", error=f"{type(exc).__name__}: {exc}"[:2000])

        await serve_connection(
            served,
            app,
            scheme="https" if ssl_context else "http",
            max_head_bytes=MAX_HEAD_BYTES,
            read_timeout_s=settings.keepalive_s,
            on_error=on_error,
            server=tuple(here[:2]) if here else None,
            client=tuple(peer[:2]) if peer else None,
        )
    finally:
        gate.release()
        await trio.aclose_forcefully(stream)


async def _accept(
    listener: trio.SocketListener,
    nursery: trio.Nursery,
    app: App,
    gate: ConnectionGate,
    settings: HttpFrontend,
    ssl_context: ssl.SSLContext | None,
    trace: TraceRecorder,
) -> None:
    async with listener:  # closed when the server stops (cancelled)
        await _accept_loop(listener, nursery, app, gate, settings, ssl_context, trace)


async def _accept_loop(
    listener: trio.SocketListener,
    nursery: trio.Nursery,
    app: App,
    gate: ConnectionGate,
    settings: HttpFrontend,
    ssl_context: ssl.SSLContext | None,
    trace: TraceRecorder,
) -> None:
    while True:
        try:
            stream = await listener.accept()
        except OSError as exc:
            if exc.errno not in _ACCEPT_ERRORS:
                raise
            trace.record("http_accept_failed", error=f"{type(exc).__name__}: {exc}")
            await trio.sleep(0.1)  # out of descriptors or memory: back off, connections that end free some
            continue
        if gate.admit():
            nursery.start_soon(_connection, stream, app, gate, settings, ssl_context, trace)
        elif gate.refusing < _MAX_REFUSING:
            nursery.start_soon(gate.refuse, stream)
        else:
            gate._traced()
            await trio.aclose_forcefully(stream)


def _ssl_context(settings: HttpFrontend) -> ssl.SSLContext | None:
    if settings.tls is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(settings.tls.cert, settings.tls.key)
    context.set_alpn_protocols(["http/1.1"])
    return context


async def serve_mcp_http(
    sup: Supervisor,
    settings: HttpFrontend,
    auth: Authenticator,
    *,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve MCP over HTTP until cancelled; ``task_status.started`` gets the address it listens at."""
    policy = sup.compiled.config.policy
    app = McpHttpApp(sup, settings, dict(policy.tenants), policy.oauth, auth)
    host, port = parse_listen(settings.listen)
    ssl_context = _ssl_context(settings)
    listeners = await trio.open_tcp_listeners(port, host=host)
    gate = ConnectionGate(settings.max_connections, sup.trace)
    async with trio.open_nursery() as nursery:
        await nursery.start(app.run)
        for listener in listeners:
            nursery.start_soon(_accept, listener, nursery, app, gate, settings, ssl_context, sup.trace)
        if settings.public_url is None:
            bound = listeners[0].socket.getsockname()[1]  # the port the system chose for :0
            app.base_url = public_url_for(
                f"[{host}]:{bound}" if ":" in host else f"{host}:{bound}", tls=ssl_context is not None, public_url=None
            )
            app.origins.add(normalise_origin(app.base_url))
        task_status.started(app.base_url)
