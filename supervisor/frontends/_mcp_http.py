"""MCP over Streamable HTTP: one endpoint per agent, every request authenticated, sessions and stateless requests.

Served by hypercorn's trio worker (:func:`serve_mcp_http`) as an ASGI app, :class:`McpHttpApp`:

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

Before anything is served: the ``Origin`` header, when sent, must be one the policy allows or this server's own
(403); the body at most ``max_body_bytes`` (413); ``Content-Type`` JSON (415); then the bearer token
(:mod:`._http_auth`: 401/403 with ``WWW-Authenticate``). Every refusal is traced (``http_refused``) with the
tenant when known. Bounded: sessions in all and per tenant, SSE streams per tenant, calls in flight and calls per
second per tenant (429 with ``Retry-After``), idle sessions ended after ``session_idle_s``. A client that stops
reading costs its own session only: writes to its stream wait for it, nothing else does.
"""

from __future__ import annotations

import json
import math
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from supervisor._supervisor import Supervisor
from supervisor.config import HttpFrontend, OAuthResourceServer, Tenant, normalise_origin, parse_listen, public_url_for

from ._http_auth import Authenticator, AuthRefusal, Principal
from ._http_sessions import HttpSession, StatelessExchange, check_stateless_envelope
from ._http_tenants import TenantState
from ._http_wire import (
    HttpRefused,
    Receive,
    Scope,
    Send,
    cancel_on_disconnect,
    lifespan,
    read_body,
    request_headers,
    rpc_status,
    send_empty,
    send_json,
    send_refusal,
    send_start,
    sse_event,
)
from ._mcp_session import (
    INVALID_REQUEST,
    MODERN_VERSIONS,
    PARSE_ERROR,
    SUPPORTED_VERSIONS,
    McpSession,
    valid_id,
)

__all__ = ["McpHttpApp", "serve_mcp_http"]

#: Messages queued for a session's GET stream; past it notifications are dropped (list_changed is idempotent).
_STREAM_QUEUE = 64
_PREFIX = "/agents/"
_SUFFIX = "/mcp"
_METADATA = "/.well-known/oauth-protected-resource"



class McpHttpApp:
    """The ASGI application; :meth:`run` must be running (it holds the sessions' tasks and ends idle ones)."""

    def __init__(self, sup: Supervisor, settings: HttpFrontend, tenants: dict[str, Tenant],
                 oauth: OAuthResourceServer | None, auth: Authenticator) -> None:
        self.sup = sup
        self.settings = settings
        self.oauth = oauth
        self.auth = auth
        self.base_url = public_url_for(settings.listen, tls=settings.tls is not None, public_url=settings.public_url)
        self.origins = {*settings.allowed_origins, normalise_origin(self.base_url)}
        self.tenants = {name: TenantState(t) for name, t in tenants.items()}
        self.sessions: dict[str, HttpSession] = {}
        self._nursery: trio.Nursery | None = None

    # -- lifecycle -------------------------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Hold the sessions' background tasks and end idle sessions; runs until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            while True:
                await trio.sleep(min(self.settings.session_idle_s / 4, 30.0))
                horizon = trio.current_time() - self.settings.session_idle_s
                for session in [s for s in self.sessions.values() if s.last_used < horizon and s.stream is None]:
                    self._end(session, "idle")

    def _end(self, session: HttpSession, why: str) -> None:
        if self.sessions.pop(session.id, None) is None:
            return
        self.tenants[session.principal.tenant].sessions -= 1
        session.scope.cancel()
        self.sup.trace.record("http_session_end", tenant=session.principal.tenant, agent=session.agent,
                              session=session.mcp.session_id, why=why)

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
            self.sup.trace.record("http_refused", status=refused.status, path=scope.get("path", ""),
                                  method=scope.get("method", ""), tenant=refused.tenant, why=refused.message)
            await send_refusal(send, refused)

    async def _route(self, scope: Scope, headers: dict[str, str], receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        method: str = scope["method"]
        origin = headers.get("origin")
        if origin is not None and not self._origin_ok(origin):
            raise HttpRefused(403, f"Origin {origin!r} is not allowed; the policy's frontends.http.allowed_origins "
                                "lists the browser origins this server answers")
        if path == _METADATA or path.startswith(_METADATA + "/"):
            await self._metadata(path[len(_METADATA):] or None, method, send)
            return
        if not (path.startswith(_PREFIX) and path.endswith(_SUFFIX)):
            raise HttpRefused(404, f"no MCP endpoint at {path}; endpoints are {_PREFIX}<agent-slug>{_SUFFIX}")
        agent = path[len(_PREFIX):-len(_SUFFIX)]
        if "/" in agent or not agent:
            raise HttpRefused(404, f"no MCP endpoint at {path}")
        principal = self._authenticate(headers, agent, path)
        try:
            await self._serve(principal, agent, method, headers, receive, send)
        except HttpRefused as refused:
            refused.tenant = principal.tenant
            raise

    async def _serve(self, principal: Principal, agent: str, method: str, headers: dict[str, str],
                     receive: Receive, send: Send) -> None:
        if agent not in self.sup.agent_slugs():
            raise HttpRefused(404, f"no agent {agent!r} is served here")
        if method == "POST":
            await self._post(principal, agent, headers, receive, send)
        elif method == "GET":
            await self._get(principal, agent, headers, receive, send)
        elif method == "DELETE":
            session = self._session(principal, agent, headers)
            self._end(session, "deleted by the client")
            await send_empty(send, 204)
        else:
            raise HttpRefused(405, f"method {method} is not served; POST, GET and DELETE are",
                           headers=[("allow", "POST, GET, DELETE")])

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
        checked = self.auth.authenticate(headers.get("authorization"), agent=agent,
                                         resources=(self._resource(path), self.base_url))
        if isinstance(checked, AuthRefusal):
            raise HttpRefused(checked.status, checked.description,
                           headers=[("www-authenticate", checked.www_authenticate(self._metadata_url(path)))])
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

    # -- sessions ---------------------------------------------------------------------------------------------------

    def _session(self, principal: Principal, agent: str, headers: dict[str, str]) -> HttpSession:
        session_id = headers.get("mcp-session-id")
        if session_id is None:
            raise HttpRefused(400, "this request needs the Mcp-Session-Id header the initialize response gave",
                           rpc_code=INVALID_REQUEST)
        session = self.sessions.get(session_id)
        # Another tenant's or agent's session is answered as if it did not exist: ids are not identities.
        if session is None or session.principal.tenant != principal.tenant or session.agent != agent:
            raise HttpRefused(404, "no such session (it ended, or was never made); initialize a new one",
                           rpc_code=INVALID_REQUEST)
        session.last_used = trio.current_time()
        return session

    def _new_session(self, principal: Principal, agent: str, version: str) -> HttpSession:
        tenant = self.tenants[principal.tenant]
        if tenant.sessions >= tenant.limits.limits.sessions:
            raise HttpRefused(429, f"tenant {principal.tenant!r} holds {tenant.sessions} sessions, its limit; end one "
                                "(DELETE) or wait for an idle one to end", headers=[("retry-after", "10")])
        if len(self.sessions) >= self.settings.max_sessions:
            raise HttpRefused(503, "this server holds as many sessions as it may; try again later",
                           headers=[("retry-after", "10")])
        session = HttpSession(self.sup, principal, agent, version)
        self.sessions[session.id] = session
        tenant.sessions += 1
        self.sup.trace.record("http_session_start", tenant=principal.tenant, agent=agent,
                              session=session.mcp.session_id, protocol=version)
        return session

    # -- POST -------------------------------------------------------------------------------------------------------

    async def _post(self, principal: Principal, agent: str, headers: dict[str, str], receive: Receive,
                    send: Send) -> None:
        if not headers.get("content-type", "").split(";")[0].strip().lower() == "application/json":
            raise HttpRefused(415, "the body must be one JSON-RPC message with Content-Type: application/json")
        body = await read_body(receive, self.settings.max_body_bytes)
        try:
            message = json.loads(body)
        except RecursionError:
            raise HttpRefused(400, "parse error: the JSON is nested too deeply", rpc_code=PARSE_ERROR) from None
        except ValueError as exc:
            raise HttpRefused(400, f"parse error: {str(exc)[:200]}", rpc_code=PARSE_ERROR) from None
        if not isinstance(message, dict):
            raise HttpRefused(400, "expected one JSON-RPC object (batches are not part of this transport)",
                           rpc_code=INVALID_REQUEST)
        version = headers.get("mcp-protocol-version")
        if version in MODERN_VERSIONS:
            await self._post_modern(principal, agent, headers, message, receive, send)
            return
        if version is not None and version not in SUPPORTED_VERSIONS:
            raise HttpRefused(400, f"MCP-Protocol-Version {version!r} is not served; this server speaks "
                                f"{', '.join((*MODERN_VERSIONS, *SUPPORTED_VERSIONS))}",
                           rpc_code=INVALID_REQUEST, req_id=message.get("id"))
        is_request = "method" in message and "id" in message
        if message.get("method") == "initialize" and is_request:
            params = message.get("params")
            asked = params.get("protocolVersion") if isinstance(params, dict) else None
            session = self._new_session(principal, agent, asked if asked in SUPPORTED_VERSIONS
                                        else SUPPORTED_VERSIONS[0])
            await self._answer(session, session.mcp, message, headers, send,
                               extra_headers=[("mcp-session-id", session.id)])
            return
        session = self._session(principal, agent, headers)  # no header: 2025-03-26, which serves the same here
        if not is_request:
            job = session.mcp.handle_message(message)  # notifications (cancel) act at once; responses are ignored
            if job is not None:
                await job()  # an invalid message: its error has nowhere to go on this wire but the log
            await send_empty(send, 202)
            return
        await self._answer(session, session.mcp, message, headers, send)

    async def _post_modern(self, principal: Principal, agent: str, headers: dict[str, str],
                           message: dict[str, Any], receive: Receive, send: Send) -> None:
        """A self-contained request of the stateless revision: checked, answered, forgotten."""
        if "method" not in message or "id" not in message:
            await send_empty(send, 202)  # the stateless wire defines no client notification to act on
            return
        check_stateless_envelope(message, headers)
        exchange = StatelessExchange(principal)
        mcp = McpSession(self.sup, exchange.deliver, session_id=f"http-{secrets.token_hex(8)}", modern=True,
                         agent=agent, tenant=principal.tenant)
        # On this wire closing the response is how a client cancels.
        await self._answer(exchange, mcp, message, headers, send, cancel_on=receive)

    async def _answer(self, holder: HttpSession | StatelessExchange, mcp: McpSession, message: dict[str, Any],
                      headers: dict[str, str], send: Send, extra_headers: list[tuple[str, str]] | None = None,
                      cancel_on: Receive | None = None) -> None:
        """Run one request and write its answer: JSON, or an SSE stream when it reports progress.

        ``cancel_on``: the request's receive channel; the client going away cancels the request."""
        req_id = message.get("id")
        if not valid_id(req_id):
            raise HttpRefused(400, "the id must be a string or a number", rpc_code=INVALID_REQUEST)
        if req_id in holder.pending:
            raise HttpRefused(400, f"a request with id {json.dumps(req_id)} is already running; ids must be unique",
                           rpc_code=INVALID_REQUEST, req_id=req_id)
        is_call = message.get("method") == "tools/call"
        tenant = self.tenants[holder.principal.tenant]
        params = message.get("params")
        token = ((params.get("_meta") or {}).get("progressToken") if isinstance(params, dict)
                 and isinstance(params.get("_meta"), dict) else None)
        stream = token is not None and "text/event-stream" in headers.get("accept", "")
        out_send, out_receive = trio.open_memory_channel[dict[str, Any]](_STREAM_QUEUE)
        holder.pending[req_id] = out_send
        if token is not None:
            holder.progress[token] = req_id
        job = mcp.handle_message(message)
        try:
            async with trio.open_nursery() as nursery:
                if cancel_on is not None:
                    nursery.start_soon(cancel_on_disconnect, cancel_on, nursery.cancel_scope)
                if job is not None:
                    nursery.start_soon(self._run, job, tenant if is_call else None, holder, req_id)
                if stream:
                    await send_start(send, 200, "text/event-stream", extra_headers)
                    async for reply in out_receive:
                        await send({"type": "http.response.body", "body": sse_event(reply), "more_body": True})
                        if "method" not in reply:
                            break
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                else:
                    async for reply in out_receive:
                        if "method" not in reply:
                            await send_json(send, rpc_status(reply) if mcp.modern else 200, reply, extra_headers)
                            break
                nursery.cancel_scope.cancel()  # the answer is out: stop watching for the client going away
        finally:
            holder.pending.pop(req_id, None)
            holder.progress.pop(token, None)

    async def _run(self, job: Callable[[], Awaitable[None]], tenant: TenantState | None,
                   holder: HttpSession | StatelessExchange, req_id: Any) -> None:
        if tenant is None:
            await job()
            return
        wait = tenant.take_call_token()
        if wait > 0 or tenant.calls.available_tokens == 0:
            why = (f"the tenant's rate of {tenant.limits.limits.calls_per_second} calls per second is spent; "
                   f"retry in {math.ceil(wait)} s") if wait > 0 else (
                f"the tenant has {tenant.limits.limits.concurrent_calls} calls in flight, its limit; retry later")
            await holder.deliver({"jsonrpc": "2.0", "id": req_id, "error": {"code": -32000, "message": why}})
            return
        async with tenant.calls:
            await job()

    # -- GET --------------------------------------------------------------------------------------------------------

    async def _get(self, principal: Principal, agent: str, headers: dict[str, str], receive: Receive,
                   send: Send) -> None:
        if "text/event-stream" not in headers.get("accept", ""):
            raise HttpRefused(406, "GET opens the session's event stream: Accept: text/event-stream")
        if headers.get("mcp-protocol-version") in MODERN_VERSIONS:
            raise HttpRefused(405, "the stateless revision has no server stream", headers=[("allow", "POST")])
        session = self._session(principal, agent, headers)
        tenant = self.tenants[principal.tenant]
        if session.stream is not None:
            raise HttpRefused(409, "this session's event stream is already open")
        if tenant.streams >= tenant.limits.limits.sse_streams:
            raise HttpRefused(429, f"tenant {principal.tenant!r} has {tenant.streams} event streams open, its limit",
                           headers=[("retry-after", "10")])
        stream_send, stream_receive = trio.open_memory_channel[dict[str, Any]](_STREAM_QUEUE)
        session.stream = stream_send
        tenant.streams += 1
        try:
            with session.scope:
                await send_start(send, 200, "text/event-stream")
                async with trio.open_nursery() as nursery:
                    await nursery.start(session.mcp.watch_tools)
                    nursery.start_soon(cancel_on_disconnect, receive, nursery.cancel_scope)
                    if session.mcp.changed_since_listed():  # changed while no stream was open to say so
                        stream_send.send_nowait({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
                    while True:
                        with trio.move_on_after(self.settings.sse_keepalive_s):
                            message = await stream_receive.receive()
                            await send({"type": "http.response.body", "body": sse_event(message), "more_body": True})
                            continue
                        await send({"type": "http.response.body", "body": b": keepalive\n\n", "more_body": True})
        finally:
            session.stream = None
            tenant.streams -= 1
            session.last_used = trio.current_time()


async def serve_mcp_http(sup: Supervisor, settings: HttpFrontend, auth: Authenticator, *,
                         task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve MCP over HTTP until cancelled; ``task_status.started`` gets the address it listens at."""
    from hypercorn.config import Config
    from hypercorn.trio import serve

    policy = sup.compiled.config.policy
    app = McpHttpApp(sup, settings, dict(policy.tenants), policy.oauth, auth)
    config = Config()
    host, port = parse_listen(settings.listen)
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    if settings.tls is not None:
        config.certfile = settings.tls.cert
        config.keyfile = settings.tls.key
    config.accesslog = None
    config.errorlog = None
    config.include_server_header = False
    config.keep_alive_timeout = 30
    config.h11_max_incomplete_size = 64 * 1024
    async with trio.open_nursery() as nursery:
        await nursery.start(app.run)

        async def started(task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
            await serve(app, config, shutdown_trigger=trio.sleep_forever,  # type: ignore[arg-type]  # an ASGI app;
                        task_status=task_status)  # hypercorn's Protocol types are narrower than the ASGI spec

        binds = await nursery.start(started)
        if settings.public_url is None and binds:
            app.base_url = binds[0].rstrip("/")  # the port the system chose for :0
            app.origins.add(normalise_origin(app.base_url))
        task_status.started(app.base_url)
