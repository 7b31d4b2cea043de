"""MCP over Streamable HTTP: one endpoint per agent, every request authenticated, sessions and stateless requests.

Served as an ASGI app, :class:`McpHttpApp`, by our HTTP/1.1 server on h11 (``_http_server.serve_mcp_http``):

- ``POST /agents/<slug>/mcp``: one JSON-RPC message. A request is answered with ``application/json`` (one
  response), or with ``text/event-stream`` when the client asked for progress (``_meta.progressToken``) and accepts
  it: the progress notifications, then the response. A notification or a response is acknowledged with 202.
- Revisions with a handshake (2025-11-25 and earlier): ``initialize`` makes a session, its id returned in
  ``Mcp-Session-Id``; every later request names it (400 without, 404 for one that does not exist, has ended, or is
  another tenant's or agent's: a session id is bound to the tenant and agent that made it). ``MCP-Protocol-Version``
  must be a revision served (400 otherwise; absent means 2025-03-26, as the spec says).
  ``GET`` opens the session's stream of server notifications (``notifications/tools/list_changed``), ``DELETE``
  ends the session.
- The stateless revision (2026-07-28): ``MCP-Protocol-Version: 2026-07-28``, no session; each request carries its
  protocol version and client capabilities in ``params._meta`` and names its method (and tool) in ``Mcp-Method``
  (``Mcp-Name``) headers, which must agree with the body; ``server/discover`` says what is served. Each request
  is a session of its own.
- ``GET /.well-known/oauth-protected-resource[/agents/<slug>/mcp]``: the RFC 9728 metadata, unauthenticated.
- ``GET /healthz``, ``GET /readyz``: liveness and readiness probes, unauthenticated (``_http_health``).

Before anything is served: the ``Host`` header must name this server (421: DNS rebinding), the ``Origin`` header, when
sent, must be one the policy allows or this server's own (403); the body at most ``max_body_bytes`` (413) and within
the tenant's and the server's body-byte budgets; ``Content-Type`` JSON (415); then the bearer token
(:mod:`._http_auth`: 401/403 with ``WWW-Authenticate``). Every refusal is traced (``http_refused``) with the tenant
when known. Bounded: sessions in all and per tenant, SSE streams per tenant, requests in flight server-wide (503) and
calls in flight and calls per second per tenant (429), each with ``Retry-After`` (``_http_load``), idle sessions ended
after ``session_idle_s``. A client that stops reading costs its own session only: writes to its stream wait for it,
nothing else does.

This module routes; the jobs are elsewhere: the session table (``_http_sessions``), a POST's message read
(``_http_message``), answering a request (``_http_answer``), a session's GET stream (``_http_stream``), the server
(``_http_server``), the ASGI plumbing (``_http_wire``), tokens and tenants (``_http_auth``, ``_http_tenants``).
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

import trio

from supervisor.config import (
    HttpFrontend,
    OAuthResourceServer,
    Tenant,
    host_is_served,
    normalise_origin,
    public_url_for,
    served_host_names,
)

from ._http_answer import answer_request
from ._http_auth import Authenticator, AuthRefusal, Principal
from ._http_conn import CONNECTION_EXTENSION
from ._http_health import HEALTH_PATHS, health_answer
from ._http_load import BodyBytes, RefusalLog, ServerLoad, connection_refused
from ._http_message import read_message
from ._http_sessions import SessionTable, StatelessExchange, check_stateless_envelope
from ._http_stream import serve_event_stream
from ._http_tenants import TenantState
from ._http_wire import (
    HttpRefused,
    Receive,
    Scope,
    Send,
    drop_body,
    lifespan,
    request_headers,
    send_empty,
    send_json,
    send_refusal,
)
from ._mcp_session import McpSession
from ._mcp_wire import INVALID_REQUEST, MODERN_VERSIONS, SUPPORTED_VERSIONS

if TYPE_CHECKING:
    from collections.abc import Mapping

    from supervisor._face import ToolService

__all__ = ["McpHttpApp"]

_PREFIX = "/agents/"
_SUFFIX = "/mcp"
_METADATA = "/.well-known/oauth-protected-resource"


class McpHttpApp:
    """The ASGI application; :meth:`run` must be running (it holds the sessions' tasks and ends idle ones)."""

    def __init__(
        self,
        sup: ToolService,
        settings: HttpFrontend,
        tenants: dict[str, Tenant],
        oauth: OAuthResourceServer | None,
        auth: Authenticator,
    ) -> None:
        self.sup = sup
        self.settings = settings
        self.oauth = oauth
        self.auth = auth
        self.base_url = public_url_for(settings.listen, tls=settings.tls is not None, public_url=settings.public_url)
        self.origins = {*settings.allowed_origins, normalise_origin(self.base_url)}
        #: the names a request's ``Host`` may give (IP addresses besides; DNS rebinding)
        self.host_names = served_host_names(settings.listen, settings.public_url, settings.server_names)
        self.tenants = {name: TenantState(t) for name, t in tenants.items()}
        self.sessions = SessionTable(sup, self.tenants, settings.max_sessions)
        #: work and body bytes in flight, all tenants together (``_http_load``), and how their refusals are traced
        self.load = ServerLoad.of(settings)
        self.refusals = RefusalLog(sup.trace)
        #: the supervisor's workers are started and the server listens (``/readyz``; set by the server)
        self.started = False
        #: a SIGTERM came: ``/readyz`` says not ready while the server drains (``HttpService.drain``)
        self.draining = False

    def _tenant(self, principal: Principal) -> TenantState:
        """The tenant's counts; 401 when a reload removed the tenant since its request was authenticated."""
        state = self.tenants.get(principal.tenant)
        if state is None:
            raise HttpRefused(401, f"tenant {principal.tenant!r} is no longer configured on this server")
        return state

    def set_tenants(self, tenants: Mapping[str, Tenant]) -> None:
        """Take a reloaded policy's tenants: removed ones are forgotten (their sessions are the caller's to end
        first), new ones start from nothing, the others keep what they hold under their new limits."""
        for name in [n for n in self.tenants if n not in tenants]:
            del self.tenants[name]
        for name, tenant in tenants.items():
            state = self.tenants.get(name)
            if state is None:
                self.tenants[name] = TenantState(tenant)
            else:
                state.update(tenant)

    # -- lifecycle -------------------------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """End idle sessions; runs until cancelled."""
        task_status.started()
        while True:
            await trio.sleep(min(self.settings.session_idle_s / 4, 30.0))
            self.sessions.end_idle(self.settings.session_idle_s)

    # -- ASGI ------------------------------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        headers = request_headers(scope)
        try:
            await self._route(scope, headers, receive, send)
        except HttpRefused as refused:
            if refused.flood:
                path, method = scope.get("path", ""), scope.get("method", "")
                self.refusals.record(refused.status, refused.message, tenant=refused.tenant, path=path, method=method)
                await send_refusal(send, refused)
                return
            self.sup.trace.record(
                "http_refused",
                status=refused.status,
                path=scope.get("path", ""),
                method=scope.get("method", ""),
                tenant=refused.tenant,
                why=refused.message,
            )
            await send_refusal(send, refused)

    async def _route(self, scope: Scope, headers: dict[str, str], receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        method: str = scope["method"]
        if not host_is_served(headers.get("host"), self.host_names):
            raise HttpRefused(
                421,
                f"Host {headers.get('host', '')[:200]!r} is not a name of this server; it answers "
                f"{', '.join(sorted(self.host_names))} and IP addresses (more names: frontends.http.server_names)",
            )
        origin = headers.get("origin")
        if origin is not None and not self._origin_ok(origin):
            raise HttpRefused(
                403,
                f"Origin {origin!r} is not allowed; the policy's frontends.http.allowed_origins "
                "lists the browser origins this server answers",
            )
        if path in HEALTH_PATHS:
            probe = health_answer(path, method, started=self.started, draining=self.draining)
            await send_json(send, probe.status, probe.body, list(probe.headers))
            return
        if path == _METADATA or path.startswith(_METADATA + "/"):
            await self._metadata(path[len(_METADATA) :] or None, method, send)
            return
        if not (path.startswith(_PREFIX) and path.endswith(_SUFFIX)):
            raise HttpRefused(404, f"no MCP endpoint at {path}; endpoints are {_PREFIX}<agent-slug>{_SUFFIX}")
        agent = path[len(_PREFIX) : -len(_SUFFIX)]
        if "/" in agent or not agent:
            raise HttpRefused(404, f"no MCP endpoint at {path}")
        principal = self._authenticate(headers, agent, path)
        connection = scope.get("extensions", {}).get(CONNECTION_EXTENSION)
        if connection is not None:  # the connection is the tenant's now, within its cap (``_http_admission``)
            over_cap = connection.bind_tenant(principal.tenant)
            if over_cap is not None:
                await drop_body(receive, self.settings.max_body_bytes)
                refused = connection_refused(over_cap.reason)
                refused.tenant = principal.tenant
                raise refused
        try:
            await self._serve(principal, agent, method, headers, receive, send)
        except HttpRefused as refused:
            refused.tenant = principal.tenant
            raise

    async def _serve(
        self, principal: Principal, agent: str, method: str, headers: dict[str, str], receive: Receive, send: Send
    ) -> None:
        if agent not in self.sup.agent_slugs():
            raise HttpRefused(404, f"no agent {agent!r} is served here")
        if method == "POST":
            await self._post(principal, agent, headers, receive, send)
        elif method == "GET":
            await self._get(principal, agent, headers, receive, send)
        elif method == "DELETE":
            self.sessions.end(self.sessions.find(principal, agent, headers), "deleted by the client")
            await send_empty(send, 204)
        else:
            raise HttpRefused(
                405,
                f"method {method} is not served; POST, GET and DELETE are",
                headers=[("allow", "POST, GET, DELETE")],
            )

    def _origin_ok(self, origin: str) -> bool:
        try:
            return normalise_origin(origin) in self.origins
        except ValueError:
            return False

    def _resource(self, path: str) -> str:
        return f"{self.base_url}{path}"

    def _metadata_url(self, path: str) -> str:
        return f"{self.base_url}{_METADATA}{path}"

    def _authenticate(self, headers: dict[str, str], agent: str, path: str) -> Principal:
        checked = self.auth.authenticate(
            headers.get("authorization"), agent=agent, resources=(self._resource(path), self.base_url)
        )
        if isinstance(checked, AuthRefusal):
            raise HttpRefused(
                checked.status,
                checked.description,
                headers=[("www-authenticate", checked.www_authenticate(self._metadata_url(path)))],
            )
        return checked

    async def _metadata(self, path: str | None, method: str, send: Send) -> None:
        if method != "GET":
            raise HttpRefused(405, "the protected-resource metadata is read with GET", headers=[("allow", "GET")])
        document: dict[str, Any] = {
            "resource": self._resource(path) if path else self.base_url,
            "bearer_methods_supported": ["header"],
            "resource_name": "agents-supervise",
        }
        if self.oauth is not None:
            document["authorization_servers"] = self.oauth.authorization_servers or [self.oauth.issuer]
            if self.oauth.required_scopes:
                document["scopes_supported"] = list(self.oauth.required_scopes)
        await send_json(send, 200, document)

    # -- POST -------------------------------------------------------------------------------------------------------

    async def _post(
        self, principal: Principal, agent: str, headers: dict[str, str], receive: Receive, send: Send
    ) -> None:
        if not headers.get("content-type", "").split(";")[0].strip().lower() == "application/json":
            raise HttpRefused(415, "the body must be one JSON-RPC message with Content-Type: application/json")
        held = BodyBytes(self._tenant(principal), self.load)  # the body's bytes, until the request is answered
        try:
            message = await read_message(headers, receive, self.settings.max_body_bytes, held)
            await self._post_message(principal, agent, headers, message, receive, send)
        finally:
            held.release()

    async def _post_message(
        self,
        principal: Principal,
        agent: str,
        headers: dict[str, str],
        message: dict[str, Any],
        receive: Receive,
        send: Send,
    ) -> None:
        version = headers.get("mcp-protocol-version")
        if version in MODERN_VERSIONS:
            await self._post_modern(principal, agent, headers, message, receive, send)
            return
        if version is not None and version not in SUPPORTED_VERSIONS:
            raise HttpRefused(
                400,
                f"MCP-Protocol-Version {version!r} is not served; this server speaks "
                f"{', '.join((*MODERN_VERSIONS, *SUPPORTED_VERSIONS))}",
                rpc_code=INVALID_REQUEST,
                req_id=message.get("id"),
            )
        is_request = "method" in message and "id" in message
        if message.get("method") == "initialize" and is_request:
            params = message.get("params")
            asked = params.get("protocolVersion") if isinstance(params, dict) else None
            session = self.sessions.new(
                principal, agent, asked if asked in SUPPORTED_VERSIONS else SUPPORTED_VERSIONS[0]
            )
            await answer_request(
                session,
                session.mcp,
                self._tenant(principal),
                self.load,
                message,
                headers,
                send,
                extra_headers=[("mcp-session-id", session.id)],
            )
            return
        session = self.sessions.find(principal, agent, headers)  # no header: 2025-03-26, which serves the same here
        if not is_request:
            job = session.mcp.handle_message(message)  # notifications (cancel) act at once; responses are ignored
            if job is not None:
                await job()  # an invalid message: its error has nowhere to go on this wire but the log
            await send_empty(send, 202)
            return
        await answer_request(session, session.mcp, self._tenant(principal), self.load, message, headers, send)

    async def _post_modern(
        self,
        principal: Principal,
        agent: str,
        headers: dict[str, str],
        message: dict[str, Any],
        receive: Receive,
        send: Send,
    ) -> None:
        """A self-contained request of the stateless revision: checked, answered, forgotten."""
        if "method" not in message or "id" not in message:
            await send_empty(send, 202)  # the stateless wire defines no client notification to act on
            return
        check_stateless_envelope(message, headers)
        exchange = StatelessExchange(principal)
        mcp = McpSession(
            self.sup,
            exchange.deliver,
            session_id=f"http-{secrets.token_hex(8)}",
            modern=True,
            agent=agent,
            tenant=principal.tenant,
            every_skill=True,  # a session of one request: skills it enabled could not last into the next
        )
        # Its _meta logLevel opts it in to log messages (the session's revision gate sees to it). On this wire
        # closing the response is how a client cancels.
        try:
            tenant = self._tenant(principal)
            await answer_request(exchange, mcp, tenant, self.load, message, headers, send, cancel_on=receive)
        finally:
            mcp.close()  # a logging/setLevel of this request's session must not outlive it, nor its state

    # -- GET --------------------------------------------------------------------------------------------------------

    async def _get(
        self, principal: Principal, agent: str, headers: dict[str, str], receive: Receive, send: Send
    ) -> None:
        if "text/event-stream" not in headers.get("accept", ""):
            raise HttpRefused(406, "GET opens the session's event stream: Accept: text/event-stream")
        if headers.get("mcp-protocol-version") in MODERN_VERSIONS:
            raise HttpRefused(405, "the stateless revision has no server stream", headers=[("allow", "POST")])
        session = self.sessions.find(principal, agent, headers)
        await serve_event_stream(session, self._tenant(principal), self.settings.sse_keepalive_s, receive, send)
