"""What the HTTP frontend lets in (at a request's head, and once it is authenticated): work in flight (server-wide
and per tenant), the tenant's call rate, and request-body bytes in flight (per tenant and server-wide); how a
refusal is answered and traced.

A request past one of these bounds is answered at once, before any of its answer is written, with an HTTP status a
proxy, a load balancer or a retrying client understands, ``Retry-After`` (seconds), and a JSON-RPC error whose
message names the limit and whose ``data`` says ``{"retryAfterSeconds": n, "limit": ...}`` (the official SDK
client hands the JSON-RPC error of a non-2xx answer to its caller as it is):

- ``429``: the tenant's own limits (``calls_per_second``, ``concurrent_calls``, ``body_bytes_in_flight``, and its
  connections: :func:`connection_refused`);
- ``503``: the server's (``frontends.http.max_requests_in_flight``, ``max_body_bytes_in_flight``): load shedding,
  so that what is admitted keeps a bounded latency and the server's throughput holds past saturation.

Every request but ``initialize`` counts against the work bounds; body bytes are held from the moment they are
accepted to the end of the request's answer. While the server answers ``max_requests_in_flight`` requests, a request
that would count is shed **at its head** (:class:`HeadShed`, :func:`plan_head_shed`), before it is authenticated,
its session looked up or its body read from the connection (a small body that came with its head is parsed, to tell
a call from a notification): a refusal then costs the server little more than the head's parse and one write, so
that refusing a flood past saturation leaves the server's time to what it admitted.

Refusals are ``http_refused`` records, at most one a second per status and tenant with the number since the last
(:class:`RefusalLog`), so that shedding a flood does not cost a trace write per request.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

from ._http_head import EarlyAnswer, await_body, buffered_body, declared_length
from ._http_pacing import ShedPacing
from ._http_wire import HttpRefused, refusal_body
from ._mcp_wire import encode_message, valid_id

if TYPE_CHECKING:
    import h11

    from supervisor._face import TraceRecorder
    from supervisor.config import HttpFrontend

    from ._http_tenants import TenantState

__all__ = [
    "SMALL_BODY",
    "UNCOUNTED",
    "BodyBytes",
    "HeadShed",
    "RefusalLog",
    "RequestSlot",
    "ServerLoad",
    "ShedAtHead",
    "admit_request",
    "connection_refused",
    "plan_head_shed",
]

#: the JSON-RPC code of a load refusal (implementation-defined server error)
LOAD_REFUSED = -32000
#: Requests that do not count against the work bounds: ``initialize`` is bounded by the tenant's session limit.
UNCOUNTED = frozenset({"initialize"})
#: A body at most this large that has not come whole with its head is read by the app, which then decides (a
#: request split from its head, a notification among them); a larger one is shed at its head.
SMALL_BODY = 64 * 1024


class RefusalLog:
    """``http_refused`` records for refusals that can come in floods: at most one a second per key, each with the
    number refused since the last record of its key (``refused``)."""

    def __init__(self, trace: TraceRecorder) -> None:
        self.trace = trace
        self._unreported: dict[tuple[int, str | None], int] = {}
        self._reported_at: dict[tuple[int, str | None], float] = {}

    def record(self, status: int, why: str, *, tenant: str | None = None, path: str = "", method: str = "") -> None:
        key = (status, tenant)
        self._unreported[key] = self._unreported.get(key, 0) + 1
        now = trio.current_time()
        if now - self._reported_at.get(key, -1e9) >= 1.0:
            refused = self._unreported.pop(key)
            self._reported_at[key] = now
            self.trace.record(
                "http_refused", status=status, path=path, method=method, tenant=tenant, why=why, refused=refused
            )


@dataclass
class ServerLoad:
    """What all tenants hold at once: requests being answered and request-body bytes."""

    max_requests: int
    max_body_bytes: int
    #: the largest one body may be (``frontends.http.max_body_bytes``): no budget is smaller
    max_body: int
    requests: int = 0
    body_bytes: int = 0
    #: the Retry-After of a request shed past ``max_requests`` (``_http_pacing``)
    pacing: ShedPacing = field(default_factory=ShedPacing)

    def busy(self, req_id: Any) -> HttpRefused:
        """The 503 of a request shed past ``max_requests``, its ``Retry-After`` paced (counted as shed)."""
        return _refused(
            503,
            f"this server is answering {self.requests} requests, its limit (frontends.http.max_requests_in_flight)",
            self.pacing.shed_one(trio.current_time()),
            "max_requests_in_flight",
            req_id,
        )

    def configure(self, settings: HttpFrontend) -> None:
        """Take the bounds of ``settings`` (at a reload: what is held stays counted)."""
        self.max_requests = settings.max_requests_in_flight
        self.max_body_bytes = max(settings.max_body_bytes_in_flight, settings.max_body_bytes)
        self.max_body = settings.max_body_bytes

    @classmethod
    def of(cls, settings: HttpFrontend) -> ServerLoad:
        load = cls(0, 0, 0)
        load.configure(settings)
        return load


def _refused(status: int, why: str, retry_s: float, limit: str, req_id: Any) -> HttpRefused:
    wait = max(1, math.ceil(retry_s))
    return HttpRefused(
        status,
        f"{why}; retry in {wait} s",
        headers=[("retry-after", str(wait))],
        rpc_code=LOAD_REFUSED,
        req_id=req_id,
        data={"retryAfterSeconds": wait, "limit": limit},
        flood=True,
    )


def connection_refused(why: str) -> HttpRefused:
    """The refusal of a request that would make its connection one more of a tenant at its connection cap
    (``_http_admission.plan_tenant_connection``): 429 with ``Retry-After``, and the connection closed after the
    answer (it stays no tenant's)."""
    refused = _refused(429, why, 1, "connections", None)
    refused.headers.append(("connection", "close"))
    return refused


def _is_endpoint(target: bytes) -> bool:
    path = target.split(b"?", 1)[0]
    return path.startswith(b"/agents/") and path.endswith(b"/mcp") and path.count(b"/") == 3


@dataclass(frozen=True)
class ShedAtHead:
    """Shed this request at its head: the 503 :func:`admit_request` would give it, with its JSON-RPC id."""

    req_id: Any = None


def plan_head_shed(
    server: ServerLoad,
    *,
    method: bytes,
    target: bytes,
    length: int | None,
    body: bytes | None,
    expects_continue: bool = False,
) -> ShedAtHead | None:
    """Whether a request is shed at its head (``None``: the app serves it as always). Pure. Only while ``server``
    answers its ``max_requests_in_flight`` requests, only a ``POST`` to an MCP endpoint (never a probe, the
    metadata, a session's GET stream or DELETE), and only a request that would count:

    - its body came whole with its head (``body``): a JSON-RPC request other than ``initialize`` is shed, its id in
      the answer; a notification (a cancel frees work), a response, ``initialize`` and anything that is not such
      JSON go to the app, which answers them as it would;
    - its body is still to come (``length``: its ``Content-Length``, ``None`` when chunked): one larger than
      :data:`SMALL_BODY`, or that the client sends only when told to (``expects_continue``: ``Expect:
      100-continue``), is shed unread (no notification is that large); one larger than ``max_body_bytes`` goes to
      the app, whose 413 (also unread) says what a retry would not change; a smaller or chunked one goes to the app,
      which reads it within its bounds.
    """
    if server.requests < server.max_requests or method != b"POST" or not _is_endpoint(target):
        return None
    if body is None:
        if length is not None and length > server.max_body:
            return None  # too large ever to be served: the app answers 413, unread, which a retry cannot change
        if expects_continue or (length is not None and length > SMALL_BODY):
            return ShedAtHead()
        return None  # small, or chunked: the app reads it within its bounds and decides
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(message, dict) or "id" not in message or not valid_id(message["id"]):
        return None
    if not isinstance(message.get("method"), str) or message["method"] in UNCOUNTED:
        return None
    return ShedAtHead(message["id"])


class HeadShed:
    """The HTTP server's screen of request heads (``_http_head.Screen``), active while the server answers
    ``max_requests_in_flight`` requests: a request the work bound would refuse is answered 503 at its head
    (:func:`plan_head_shed`), before it is authenticated or its body read past :data:`SMALL_BODY`, traced as every
    load refusal is (the tenant is not known yet). A small body that did not come with its head is waited for
    first (a client may write head and body apart), so that a notification is never shed."""

    def __init__(self, server: ServerLoad, refusals: RefusalLog) -> None:
        self.server = server
        self.refusals = refusals

    def active(self) -> bool:
        return self.server.requests >= self.server.max_requests

    async def answer(
        self, request: h11.Request, conn: h11.Connection, stream: trio.abc.Stream, read_timeout_s: float
    ) -> EarlyAnswer | None:
        if request.method != b"POST" or not _is_endpoint(request.target):
            return None
        length = declared_length(request)
        body = buffered_body(request, conn)
        waits = conn.they_are_waiting_for_100_continue  # its body comes only once told to send it
        if body is None and not waits and length is not None and length <= SMALL_BODY:
            if not await await_body(stream, conn, length, read_timeout_s):
                return None  # the client went or is too slow: the app finds out and answers as always
            body = buffered_body(request, conn)
        shed = plan_head_shed(
            self.server, method=request.method, target=request.target, length=length, body=body, expects_continue=waits
        )
        if shed is None:
            return None
        refused = self.server.busy(shed.req_id)
        path = request.target.split(b"?", 1)[0].decode("latin-1")
        self.refusals.record(refused.status, refused.message, path=path, method="POST")
        headers = [(b"content-type", b"application/json"), (b"cache-control", b"no-store")]
        headers += [(name.encode(), value.encode()) for name, value in refused.headers]
        return EarlyAnswer(refused.status, headers, encode_message(refusal_body(refused)))


class RequestSlot:
    """A request's place in the tenant's and the server's work in flight; :meth:`release` gives it back (once)."""

    def __init__(self, tenant: TenantState, server: ServerLoad) -> None:
        self._calls = tenant.calls  # the limiter the slot is of (a reload may give the tenant a new one)
        self._server = server
        self._held = True
        self._calls.acquire_nowait()
        server.requests += 1
        server.pacing.admit()

    def release(self) -> None:
        if self._held:
            self._held = False
            self._calls.release()
            self._server.requests -= 1


def admit_request(tenant: TenantState, server: ServerLoad, req_id: Any) -> RequestSlot:
    """A place for one request, or the refusal that says which bound is reached (checked in this order: the
    server's work in flight, the tenant's rate, the tenant's requests in flight; a refused request spends nothing).

    Raises:
        HttpRefused: 503 past ``max_requests_in_flight``, 429 past the tenant's rate or ``concurrent_calls``.
    """
    if server.requests >= server.max_requests:
        raise server.busy(req_id)
    if tenant.calls.available_tokens == 0:
        raise _refused(
            429,
            f"the tenant has {tenant.limits.limits.concurrent_calls} requests in flight, its limit "
            "(tenants.<name>.limits.concurrent_calls; every request but initialize counts)",
            1,
            "concurrent_calls",
            req_id,
        )
    wait = tenant.take_call_token()
    if wait > 0:
        raise _refused(
            429,
            f"the tenant's rate of {tenant.limits.limits.calls_per_second} calls per second is spent (every request "
            "but initialize counts)",
            wait,
            "calls_per_second",
            req_id,
        )
    return RequestSlot(tenant, server)


class BodyBytes:
    """The request-body bytes one request holds, counted against its tenant's and the server's bounds until
    :meth:`release`."""

    def __init__(self, tenant: TenantState, server: ServerLoad) -> None:
        self.tenant = tenant
        self.server = server
        self.held = 0

    def take(self, size: int) -> None:
        """Hold ``size`` more bytes.

        Raises:
            HttpRefused: 429 past the tenant's ``body_bytes_in_flight``, 503 past the server's
                ``max_body_bytes_in_flight`` (nothing taken).
        """
        tenant_cap = max(self.tenant.limits.limits.body_bytes_in_flight, self.server.max_body)
        if self.tenant.body_bytes + size > tenant_cap:
            raise _refused(
                429,
                f"the tenant's request bodies being received and answered hold {self.tenant.body_bytes} bytes; this "
                f"one's {self.held + size} would pass its limit of {tenant_cap} "
                "(tenants.<name>.limits.body_bytes_in_flight)",
                1,
                "body_bytes_in_flight",
                None,
            )
        if self.server.body_bytes + size > self.server.max_body_bytes:
            raise _refused(
                503,
                f"this server holds {self.server.body_bytes} bytes of request bodies; this one's {self.held + size} "
                f"would pass its limit of {self.server.max_body_bytes} (frontends.http.max_body_bytes_in_flight)",
                1,
                "max_body_bytes_in_flight",
                None,
            )
        self.tenant.body_bytes += size
        self.server.body_bytes += size
        self.held += size

    def release(self) -> None:
        """Give every held byte back (safe to call twice)."""
        self.tenant.body_bytes -= self.held
        self.server.body_bytes -= self.held
        self.held = 0
