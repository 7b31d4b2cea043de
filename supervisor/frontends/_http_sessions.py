"""The HTTP frontend's sessions: the table of them (made, found, ended, idle ones reaped, counted per tenant), and
where a session's messages go: replies to the request waiting for them, progress to its request's stream, other
notifications to the session's GET stream (or nowhere, on the stateless revision)."""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

import trio

from ._http_wire import HEADER_MISMATCH, HttpRefused, MessageSink
from ._mcp_session import McpSession
from ._mcp_wire import INVALID_REQUEST, META_VERSION, UNSUPPORTED_VERSION, modern_envelope_problem

if TYPE_CHECKING:
    from supervisor._face import ToolService

    from ._http_auth import Principal
    from ._http_tenants import TenantState

__all__ = ["HttpSession", "SessionTable", "StatelessExchange", "check_stateless_envelope"]

_NAME_PARAMS = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
#: sessions closed by reloads whose reason is remembered
MAX_CLOSED = 10_000


class HttpSession:
    """One MCP session of the handshake revisions, bound to the tenant and agent that made it."""

    def __init__(self, sup: ToolService, principal: Principal, agent: str, version: str) -> None:
        self.id = secrets.token_urlsafe(24)
        self.principal = principal
        self.agent = agent
        self.version = version
        self.last_used = trio.current_time()
        self.mcp = McpSession(
            sup,
            self.deliver,
            session_id=f"http-{secrets.token_hex(8)}",
            agent=agent,
            tenant=principal.tenant,
            answer_cancelled=True,  # the client waits on the cancelled request's POST for its answer
        )
        self.pending: dict[Any, MessageSink] = {}
        self.progress: dict[Any, Any] = {}  # progress token -> request id
        self.stream: trio.MemorySendChannel[dict[str, Any]] | None = None
        #: the open stream's scope (each stream has its own: a cancel scope is entered once); cancelled at the end
        self.stream_scope: trio.CancelScope | None = None
        self.stream_done = trio.Event()  # set when the open stream has ended (a new one waits for it)
        self.ended = False
        self.ended_why = ""  # why the session ended (its stream's last line says it)

    async def deliver(self, message: dict[str, Any]) -> None:
        """Route what the session sends: a reply to its request, progress to its request's stream, else GET."""
        target: MessageSink | None = None
        if "method" not in message:
            target = self.pending.get(message.get("id"))
        elif message.get("method") == "notifications/progress":
            token = (message.get("params") or {}).get("progressToken")
            target = self.pending.get(self.progress.get(token))
        try:
            if target is None and "method" in message:
                if self.stream is not None:
                    # a notification nobody reads is dropped, never queued without bound
                    self.stream.send_nowait(message)
            elif target is not None:
                await target.send(message)
        except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
            pass


class SessionTable:
    """Every live session of the handshake revisions, bounded in all (``max_sessions``) and per tenant."""

    def __init__(self, sup: ToolService, tenants: dict[str, TenantState], max_sessions: int) -> None:
        self.sup = sup
        self.tenants = tenants
        self.max_sessions = max_sessions
        self.by_id: dict[str, HttpSession] = {}
        #: sessions a reload closed -> why (the most recent :data:`MAX_CLOSED`), so that naming one says why
        self.closed: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self.by_id)

    def find(self, principal: Principal, agent: str, headers: dict[str, str]) -> HttpSession:
        """The session the request names, marked used.

        Raises:
            HttpRefused: 400 without ``Mcp-Session-Id``; 404 for a session that does not exist, has ended, or is
                another tenant's or agent's (answered as if it did not exist: ids are not identities).
        """
        session_id = headers.get("mcp-session-id")
        if session_id is None:
            raise HttpRefused(
                400,
                "this request needs the Mcp-Session-Id header the initialize response gave",
                rpc_code=INVALID_REQUEST,
            )
        session = self.by_id.get(session_id)
        if session is None and session_id in self.closed:
            raise HttpRefused(
                404,
                f"this session was closed: {self.closed[session_id]}; initialize a new one",
                rpc_code=INVALID_REQUEST,
            )
        if session is None or session.principal.tenant != principal.tenant or session.agent != agent:
            raise HttpRefused(
                404, "no such session (it ended, or was never made); initialize a new one", rpc_code=INVALID_REQUEST
            )
        session.last_used = trio.current_time()
        return session

    def new(self, principal: Principal, agent: str, version: str) -> HttpSession:
        """A new session of the tenant, traced.

        Raises:
            HttpRefused: 429 past the tenant's ``sessions`` limit, 503 past the server's ``max_sessions``.
        """
        tenant = self.tenants.get(principal.tenant)
        if tenant is None:  # authenticated just before a reload removed the tenant
            raise HttpRefused(401, f"tenant {principal.tenant!r} is no longer configured on this server")
        if tenant.sessions >= tenant.limits.limits.sessions:
            raise HttpRefused(
                429,
                f"tenant {principal.tenant!r} holds {tenant.sessions} sessions, its limit; end one "
                "(DELETE) or wait for an idle one to end",
                headers=[("retry-after", "10")],
            )
        if len(self.by_id) >= self.max_sessions:
            raise HttpRefused(
                503, "this server holds as many sessions as it may; try again later", headers=[("retry-after", "10")]
            )
        session = HttpSession(self.sup, principal, agent, version)
        self.by_id[session.id] = session
        tenant.sessions += 1
        self.sup.trace.record(
            "http_session_start", tenant=principal.tenant, agent=agent, session=session.mcp.session_id, protocol=version
        )
        return session

    def end(self, session: HttpSession, why: str, *, remember: bool = False) -> None:
        """End a session (its stream and watcher stop), traced; ending an ended one does nothing. ``remember``:
        a request naming it later is told ``why`` (a reload closed it)."""
        if self.by_id.pop(session.id, None) is None:
            return
        if remember:
            self.closed[session.id] = why
            while len(self.closed) > MAX_CLOSED:
                del self.closed[next(iter(self.closed))]
        tenant = self.tenants.get(session.principal.tenant)
        if tenant is not None:
            tenant.sessions -= 1
        session.ended_why = why
        session.ended = True
        if session.stream_scope is not None:
            session.stream_scope.cancel()
        session.mcp.close()
        self.sup.trace.record(
            "http_session_end",
            tenant=session.principal.tenant,
            agent=session.agent,
            session=session.mcp.session_id,
            why=why,
        )

    def end_idle(self, idle_s: float) -> None:
        """End every session unused for ``idle_s`` seconds that has no open stream and no request running."""
        horizon = trio.current_time() - idle_s
        for session in [s for s in self.by_id.values() if s.last_used < horizon and s.stream is None and not s.pending]:
            self.end(session, "idle")


class StatelessExchange:
    """The one request of a stateless (2026-07-28) POST: where its session's messages go."""

    def __init__(self, principal: Principal) -> None:
        self.principal = principal
        self.pending: dict[Any, MessageSink] = {}
        self.progress: dict[Any, Any] = {}

    async def deliver(self, message: dict[str, Any]) -> None:
        if "method" in message and message.get("method") not in ("notifications/progress", "notifications/message"):
            return  # no server stream on this wire: only the request's own progress and log messages
        target = next(iter(self.pending.values()), None)
        if target is not None:
            try:
                await target.send(message)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass


def check_stateless_envelope(message: dict[str, Any], headers: dict[str, str]) -> None:
    """Check a stateless (2026-07-28) request's ``params._meta`` envelope
    (:func:`~._mcp_session.modern_envelope_problem`) and routing headers. Pure.

    Raises:
        HttpRefused: 400 with JSON-RPC -32602 (no envelope), -32020 (headers disagree with the body) or -32022
            (a revision not served).
    """
    req_id = message.get("id")
    params = message.get("params")
    problem = modern_envelope_problem(params)
    if problem is not None and problem[0] != UNSUPPORTED_VERSION:
        raise HttpRefused(400, problem[1], rpc_code=problem[0], req_id=req_id)
    meta: dict[str, Any] = params["_meta"]  # type: ignore[index]  # the envelope is there (checked just above)
    method = message.get("method")
    if meta[META_VERSION] != headers.get("mcp-protocol-version") or headers.get("mcp-method") != method:
        raise HttpRefused(
            400,
            "the MCP-Protocol-Version and Mcp-Method headers must match the request body",
            rpc_code=HEADER_MISMATCH,
            req_id=req_id,
        )
    name_key = _NAME_PARAMS.get(method) if isinstance(method, str) else None
    if (
        name_key is not None
        and isinstance(params, dict)
        and params.get(name_key) is not None
        and headers.get("mcp-name") != params.get(name_key)
    ):
        raise HttpRefused(
            400, f"the Mcp-Name header must match the request's {name_key!r}", rpc_code=HEADER_MISMATCH, req_id=req_id
        )
    if problem is not None:
        raise HttpRefused(400, problem[1], rpc_code=problem[0], req_id=req_id)
