"""The HTTP server under :class:`~supervisor.frontends._mcp_http.McpHttpApp`: where it listens, TLS, and how many
connections it holds.

HTTP/1.1 on trio with h11 (``_http_conn.py``), optionally TLS from ``frontends.http.tls`` (ALPN ``http/1.1``). Which
connections are held is ``_http_admission.py``'s (``max_connections`` in all, a bounded share of them and a cap per
peer address for connections that have not authenticated, TLS handshakes included, a cap per tenant, each request
head bounded as a whole): a refused one is answered ``503`` (``429`` past the per-peer cap) with ``Retry-After``
and a reason, then closed, and the refusal is traced (``http_refused``, at most one record a second, with the number
refused since the last). An idle connection is closed after ``keepalive_s``.

A policy reload (:meth:`HttpService.prepare_reload`, ``_http_reload.py``) changes it in place: the settings and
the TLS files (read again) apply to connections accepted from then on; a new ``listen`` address is bound while
preparing (a bind that fails refuses the whole reload) and the old listeners are closed at the swap (connections
they accepted are served to their end).
"""

from __future__ import annotations

import errno
import hashlib
import ssl
from typing import TYPE_CHECKING, Any

import trio

from supervisor.config import HttpFrontend, normalise_origin, parse_listen, public_url_for, served_host_names

from ._http_admission import ConnectionGate, ConnectionState, Refuse
from ._http_conn import App, serve_connection
from ._http_head import Screen, answer_and_close
from ._http_load import HeadShed
from ._http_response import simple_response
from ._mcp_http import McpHttpApp

if TYPE_CHECKING:
    from supervisor._face import PreparedChange, ToolService, TraceRecorder
    from supervisor.config import LoadedConfig

    from ._http_auth import Authenticator

__all__ = ["HttpService", "bind", "serve_mcp_http", "ssl_context_for", "tls_digest"]

#: the largest request head (request line and headers) read
MAX_HEAD_BYTES = 64 * 1024
#: refusals being written at once past a cap; past this a refused connection is closed without a word
_MAX_REFUSING = 64
_ACCEPT_ERRORS = (errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS)


async def _refuse(gate: ConnectionGate, stream: trio.SocketStream, refusal: Refuse) -> None:
    """Answer ``refusal`` and close; what the client sent is read and dropped first so the answer is not reset."""
    gate.refusing += 1
    try:
        await answer_and_close(stream, simple_response(refusal.status, refusal.reason, [("retry-after", "5")]))
    finally:
        gate.refusing -= 1
        await trio.aclose_forcefully(stream)


async def _connection(
    stream: trio.SocketStream,
    state: ConnectionState,
    peer: Any,
    app: App,
    gate: ConnectionGate,
    settings: HttpFrontend,
    ssl_context: ssl.SSLContext | None,
    trace: TraceRecorder,
    screen: Screen,
) -> None:
    try:
        here: Any = stream.socket.getsockname()
    except OSError:
        here = None
    try:
        with state.scope:  # cancelled when a newer connection takes this one's place
            served: trio.abc.Stream = stream
            if ssl_context is not None:
                served = trio.SSLStream(stream, ssl_context, server_side=True, https_compatible=True)
                with trio.move_on_at(state.waiting_since + settings.head_timeout_s) as handshake:
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
                head_timeout_s=settings.head_timeout_s,
                on_error=on_error,
                server=tuple(here[:2]) if here else None,
                client=tuple(peer[:2]) if peer else None,
                state=state,
                screen=screen,
            )
    finally:
        gate.release(state)
        await trio.aclose_forcefully(stream)


class HttpService:
    """The HTTP frontend of one supervisor: its listeners, connection gate, TLS context and app (:meth:`run`)."""

    def __init__(self, sup: ToolService, settings: HttpFrontend, auth: Authenticator, listen: str | None) -> None:
        policy = sup.policy
        self.sup = sup
        self.settings = settings
        #: ``--http HOST:PORT`` (it wins over the policy's ``listen``, at start and at every reload)
        self.listen_override = listen
        self.app = McpHttpApp(sup, settings, dict(policy.tenants), policy.oauth, auth)
        #: past the server's work bound a request is shed at its head, before the app reads it (``_http_load``)
        self.screen = HeadShed(self.app.load, self.app.refusals)
        self.gate = ConnectionGate(settings, policy.tenants, sup.trace)
        self.ssl_context = ssl_context_for(settings)
        #: a digest of the TLS files as last loaded (a reload tells a renewed certificate by it)
        self.tls_files = tls_digest(settings)
        self.listening: list[tuple[trio.SocketListener, trio.CancelScope]] = []
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; ``task_status.started`` gets the address it listens at. Registered with the
        supervisor's reload while it runs."""
        listeners = await bind(self.settings.listen)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await nursery.start(self.app.run)
                self.listen_on(listeners, self.settings)
                self.sup.join_reloads(self)
                self.app.started = True  # Supervisor.open started the workers before the server was made
                task_status.started(self.app.base_url)
        finally:
            self.sup.leave_reloads(self)

    async def drain(self) -> None:
        """The start of a shutdown (SIGTERM): ``/readyz`` answers 503 from now on while everything else is served
        as before, for ``frontends.http.drain_s`` seconds; the caller then stops the server."""
        self.app.draining = True
        self.sup.trace.record("http_draining", drain_s=self.settings.drain_s)
        await trio.sleep(self.settings.drain_s)

    def listen_on(self, listeners: list[trio.SocketListener], settings: HttpFrontend) -> None:
        """Accept on ``listeners`` (bound for ``settings.listen``), closing those accepted on so far (the
        connections they accepted go on); the app's URL and own origin follow the address."""
        if self._nursery is None:
            raise RuntimeError("listen_on before run")
        for old, scope in self.listening:
            scope.cancel()
            old.socket.close()  # the port is free at once; connections it accepted go on
        self.listening = []
        for listener in listeners:
            scope = trio.CancelScope()
            self.listening.append((listener, scope))
            self._nursery.start_soon(self._accept, listener, scope)
        # no worker's egress proxy dials these ports on loopback, whatever the policy opens (docs/NETWORK.md)
        self.sup.set_own_ports("http", [lst.socket.getsockname()[1] for lst in listeners])
        self.refresh_url(settings)

    def refresh_url(self, settings: HttpFrontend) -> None:
        """The app's URL and the origins it answers, from ``settings`` and the address listened at."""
        tls = settings.tls is not None
        if settings.public_url is None:
            host, _ = parse_listen(settings.listen)
            bound = self.listening[0][0].socket.getsockname()[1]  # the port the system chose for :0
            address = f"[{host}]:{bound}" if ":" in host else f"{host}:{bound}"
            self.app.base_url = public_url_for(address, tls=tls, public_url=None)
        else:
            self.app.base_url = public_url_for(settings.listen, tls=tls, public_url=settings.public_url)
        self.app.origins = {*settings.allowed_origins, normalise_origin(self.app.base_url)}
        self.app.host_names = served_host_names(settings.listen, settings.public_url, settings.server_names)

    async def _accept(self, listener: trio.SocketListener, scope: trio.CancelScope) -> None:
        nursery = self._nursery
        if nursery is None:
            raise RuntimeError("_accept before run")
        with scope:
            async with listener:  # closed when the server stops (cancelled) or a reload moves it
                while True:
                    try:
                        stream = await listener.accept()
                    except trio.ClosedResourceError:
                        return
                    except OSError as exc:
                        if exc.errno not in _ACCEPT_ERRORS:
                            raise
                        self.sup.trace.record("http_accept_failed", error=f"{type(exc).__name__}: {exc}")
                        await trio.sleep(0.1)  # out of descriptors or memory: back off, connections that end free some
                        continue
                    gate = self.gate
                    try:
                        peer: Any = stream.socket.getpeername()
                    except OSError:  # reset before it was looked at
                        await trio.aclose_forcefully(stream)
                        continue
                    admitted = gate.admit(str(peer[0]))
                    if isinstance(admitted, ConnectionState):
                        nursery.start_soon(
                            _connection,
                            stream,
                            admitted,
                            peer,
                            self.app,
                            gate,
                            self.settings,
                            self.ssl_context,
                            self.sup.trace,
                            self.screen,
                        )
                    elif gate.refusing < _MAX_REFUSING:
                        nursery.start_soon(_refuse, gate, stream, admitted)
                    else:
                        await trio.aclose_forcefully(stream)

    async def prepare_reload(self, config: LoadedConfig) -> PreparedChange:
        """This frontend's part of a policy reload (``_http_reload.py``)."""
        from ._http_reload import prepare_http_reload

        return await prepare_http_reload(self, config)


async def bind(listen: str) -> list[trio.SocketListener]:
    """Listeners bound at ``listen`` (``HOST:PORT``); raises ``OSError``."""
    host, port = parse_listen(listen)
    return await trio.open_tcp_listeners(port, host=host)


def ssl_context_for(settings: HttpFrontend) -> ssl.SSLContext | None:
    """The server's TLS context from ``settings.tls`` (``None``: plain HTTP); raises ``OSError``/``ssl.SSLError``."""
    if settings.tls is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(settings.tls.cert, settings.tls.key)
    context.set_alpn_protocols(["http/1.1"])
    return context


def tls_digest(settings: HttpFrontend) -> str | None:
    """A digest of what the TLS files hold (``None``: plain HTTP); raises ``OSError``."""
    if settings.tls is None:
        return None
    digest = hashlib.sha256()
    for path in (settings.tls.cert, settings.tls.key):
        with open(path, "rb") as file:  # the operator's files, named by the policy, as the TLS context reads them
            digest.update(file.read(1 << 20))
    return digest.hexdigest()


async def serve_mcp_http(
    sup: ToolService,
    settings: HttpFrontend,
    auth: Authenticator,
    *,
    listen: str | None = None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve MCP over HTTP until cancelled; ``task_status.started`` gets the address it listens at. ``listen``:
    the command line's address, kept over the policy's at a reload."""
    await HttpService(sup, settings, auth, listen).run(task_status=task_status)
