"""Which TCP connections the HTTP server holds, so that no unauthenticated client can take the service from the
tenants and no tenant from the others: the connection cap, the unauthenticated share, the per-peer cap, the
per-tenant cap, and the bound on reading a request head.

A connection is **unauthenticated** from its accept until one of its requests carries credentials the app accepts
(:meth:`ConnectionState.bind_tenant`); from then on it is the tenant's whose request came last on it (behind a
reverse proxy one connection carries several tenants' requests in turn). The rules (:func:`plan_admission` and
:func:`plan_tenant_connection`, pure):

- at most ``max_connections`` connections at once, all together;
- at most ``unauthenticated_share`` of them unauthenticated, and at most ``max_unauthenticated_per_peer`` of
  those from one peer address (a reverse proxy's connections authenticate with their first request, so this bounds
  stalled connections, not a proxy);
- past a cap a new connection takes the place of a connection that is still waiting for or reading its request
  head (the longest waiting one of the peer that holds the most such connections, or of the new connection's own
  peer past the per-peer cap), which is closed: a client that sends its request at once always gets in, one that
  trickles a head only keeps its place while nobody needs it; with no such connection to take, the new one is
  refused (503, or 429 past the per-peer cap, with ``Retry-After``); when the server is full and no such
  connection is left, it takes the place of the longest-idle keep-alive connection of the tenant that holds the
  most connections past its fair share (``max_connections / max(2, tenants)``), never of a tenant within it;
- a tenant holds at most its cap of connections (:func:`tenant_connection_cap`: ``tenants.<name>.limits.connections``,
  else ``frontends.http.max_connections_per_tenant``, else the fair share). A request that would make a connection
  one more of a tenant at its cap first closes that tenant's longest-idle keep-alive connections (waiting for a
  request, no byte of it come); when all of them are busy the request is refused (429 with ``Retry-After``, the key
  named, the connection closed). Another tenant's connections are never touched.

Every refusal and eviction is an ``http_refused`` trace record (at most one a second, with the number since the
last). How long a head may take is :func:`head_deadline` (pure): an unauthenticated connection has
``head_timeout_s`` from the moment the server starts waiting for its request to the end of the head, whatever it
trickles meanwhile; an authenticated one may stay idle ``keepalive_s`` between requests, then has ``head_timeout_s``
from the head's first byte.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import trio

from ._http_load import RefusalLog

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from supervisor._face import TraceRecorder
    from supervisor.config import HttpFrontend, Tenant

__all__ = [
    "Admit",
    "ConnectionGate",
    "ConnectionState",
    "Refuse",
    "fair_connection_share",
    "head_deadline",
    "plan_admission",
    "plan_tenant_connection",
    "tenant_connection_cap",
]


@dataclass(eq=False)
class ConnectionState:
    """One open connection as the gate counts it; the connection's code sets :attr:`reading_head` and
    :attr:`head_begun_at`, the app calls :meth:`bind_tenant`."""

    peer: str
    #: cancelled to close the connection (taken by a newer one)
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    #: when the server began waiting for the current request head (trio time)
    waiting_since: float = field(default_factory=trio.current_time)
    #: waiting for or reading a request head (or a TLS handshake): a place a newer connection may take
    reading_head: bool = True
    #: when the first byte of the current request head came (``None``: none yet)
    head_begun_at: float | None = None
    authenticated: bool = False
    #: the tenant whose request came last on it (``None``: none yet)
    tenant: str | None = None
    #: counted no more (taken by a newer connection, or released)
    gone: bool = False
    #: the gate's rule for a request of a tenant on this connection (:meth:`ConnectionGate.bind`)
    on_tenant: Callable[[ConnectionState, str], Refuse | None] | None = None

    @property
    def idle(self) -> bool:
        """A keep-alive connection between requests: waiting for the next one, no byte of it come."""
        return self.reading_head and self.head_begun_at is None and not self.gone

    def bind_tenant(self, tenant: str) -> Refuse | None:
        """A request of ``tenant`` was authenticated on this connection: it is the tenant's from now on
        (``None``), or the tenant is at its connection cap with no idle connection to give way (the refusal; the
        connection stays whose it was)."""
        if self.tenant == tenant:
            return None
        if self.on_tenant is not None:
            refused = self.on_tenant(self, tenant)
            if refused is not None:
                return refused
        self.tenant = tenant
        self.authenticated = True
        return None


@dataclass(frozen=True)
class Admit:
    """Hold the new connection, after closing ``evict`` when it is set."""

    evict: ConnectionState | None = None
    why: str = ""


@dataclass(frozen=True)
class Refuse:
    """Answer the new connection ``status`` with ``reason`` and close it."""

    status: int
    reason: str


def _oldest_waiting(conns: Sequence[ConnectionState]) -> ConnectionState | None:
    waiting = [c for c in conns if c.reading_head and not c.gone]
    return min(waiting, key=lambda c: c.waiting_since) if waiting else None


def _longest_idle(conns: Sequence[ConnectionState]) -> ConnectionState | None:
    idle = [c for c in conns if c.idle]
    return min(idle, key=lambda c: c.waiting_since) if idle else None


def fair_connection_share(max_connections: int, tenants: int) -> int:
    """A tenant's share of the connections: ``max_connections / max(2, tenants)``, at least 1. Pure. Two at least,
    so that one tenant alone never holds every place (a tenant added by a reload, the unauthenticated share)."""
    return max(1, max_connections // max(2, tenants))


def tenant_connection_cap(name: str, tenant: Tenant | None, settings: HttpFrontend, tenants: int) -> tuple[int, str]:
    """The connections tenant ``name`` may hold, and the policy key that says so. Pure."""
    if tenant is not None and tenant.limits.connections is not None:
        return tenant.limits.connections, f"tenants.{name}.limits.connections"
    if settings.max_connections_per_tenant is not None:
        return settings.max_connections_per_tenant, "frontends.http.max_connections_per_tenant"
    return (
        fair_connection_share(settings.max_connections, tenants),
        "frontends.http.max_connections_per_tenant, by default max_connections / max(2, tenants)",
    )


def plan_tenant_connection(
    tenant: str, held: Sequence[ConnectionState], cap: int, key: str
) -> list[ConnectionState] | Refuse:
    """Whether one more connection may be ``tenant``'s, which holds ``held``: the idle ones of its own to close
    first (longest idle first; none while it is under ``cap``), or the refusal when too few of them are idle.
    Pure."""
    over = len(held) + 1 - cap
    if over <= 0:
        return []
    idle = sorted((c for c in held if c.idle), key=lambda c: c.waiting_since)
    if len(idle) < over:
        return Refuse(
            429,
            f"tenant {tenant!r} holds {len(held)} connections, its limit of {cap} ({key}), and they are busy "
            "answering its requests; send this request on one of them once it is answered",
        )
    return idle[:over]


def plan_admission(
    peer: str,
    *,
    open_count: int,
    unauthenticated: Mapping[str, Sequence[ConnectionState]],
    unauthenticated_count: int,
    max_connections: int,
    max_unauthenticated: int,
    per_peer: int,
    tenants: Mapping[str, Sequence[ConnectionState]] | None = None,
    fair_share: int = 0,
) -> Admit | Refuse:
    """Whether a new connection from ``peer`` is held and whose place it takes. Pure.

    ``unauthenticated``: the unauthenticated connections open now, by peer address (``unauthenticated_count`` of
    them); ``tenants``: the tenants' connections, by tenant, and ``fair_share`` (:func:`fair_connection_share`)."""
    mine = unauthenticated.get(peer, ())
    if len(mine) >= per_peer:
        victim = _oldest_waiting(mine)
        if victim is None:
            return Refuse(
                429,
                f"this address holds {len(mine)} connections that have not authenticated, its limit "
                "(frontends.http.max_unauthenticated_per_peer); send a request with a token on one of them",
            )
        return Admit(victim, f"address {peer} at its {per_peer} unauthenticated connections")
    total_unauthenticated = unauthenticated_count
    if total_unauthenticated < max_unauthenticated and open_count < max_connections:
        return Admit()
    by_size = sorted(unauthenticated.values(), key=len, reverse=True)
    victim = next((v for v in map(_oldest_waiting, by_size) if v is not None), None)
    if victim is None and open_count >= max_connections and tenants:
        over = sorted((c for c in tenants.values() if len(c) > fair_share), key=len, reverse=True)
        victim = next((v for v in map(_longest_idle, over) if v is not None), None)
        if victim is not None:
            return Admit(
                victim,
                f"the server at its limit of open connections, tenant {victim.tenant!r} past its fair share of "
                f"{fair_share}",
            )
    if victim is None:
        if open_count >= max_connections:
            return Refuse(
                503,
                f"this server holds {max_connections} open connections, its limit "
                "(frontends.http.max_connections); retry shortly",
            )
        return Refuse(
            503,
            f"this server holds {total_unauthenticated} connections that have not authenticated, its limit "
            "(frontends.http.unauthenticated_share of max_connections); retry shortly",
        )
    full = "open connections" if open_count >= max_connections else "unauthenticated connections"
    return Admit(victim, f"the server at its limit of {full}")


def head_deadline(
    *, authenticated: bool, waiting_since: float, first_byte_at: float | None, keepalive_s: float, head_timeout_s: float
) -> float:
    """When the wait for the current request head ends (trio time). Pure. ``first_byte_at``: when its first byte
    came (``None``: none yet)."""
    if not authenticated:
        return waiting_since + head_timeout_s
    if first_byte_at is None:
        return waiting_since + keepalive_s
    return first_byte_at + head_timeout_s


class ConnectionGate:
    """Counts the open connections (:func:`plan_admission` decides), tracing refusals and evictions without
    flooding the trace."""

    def __init__(self, settings: HttpFrontend, tenants: Mapping[str, Tenant], trace: TraceRecorder) -> None:
        self.trace = trace
        self.open = 0
        self.refusing = 0
        self.unauthenticated: dict[str, list[ConnectionState]] = {}
        self.unauthenticated_count = 0
        #: the tenants' connections, by tenant
        self.tenants: dict[str, list[ConnectionState]] = {}
        self.refusals = RefusalLog(trace)
        self.configure(settings, tenants)

    def configure(self, settings: HttpFrontend, tenants: Mapping[str, Tenant]) -> None:
        """Take the caps of ``settings`` and ``tenants`` (at start and at a reload: they apply to connections
        accepted and requests bound from now; what a tenant holds past a lowered cap gives way as it asks for
        more)."""
        self.settings = settings
        self.cap = settings.max_connections
        self.max_unauthenticated = max(1, math.ceil(settings.max_connections * settings.unauthenticated_share))
        self.per_peer = settings.max_unauthenticated_per_peer
        self.fair_share = fair_connection_share(settings.max_connections, len(tenants))
        self.tenant_caps = {
            name: tenant_connection_cap(name, tenant, settings, len(tenants)) for name, tenant in tenants.items()
        }

    def admit(self, peer: str) -> ConnectionState | Refuse:
        """A place for a new connection from ``peer`` (closing the connection whose place it takes), or why not."""
        plan = plan_admission(
            peer,
            open_count=self.open,
            unauthenticated=self.unauthenticated,
            unauthenticated_count=self.unauthenticated_count,
            max_connections=self.cap,
            max_unauthenticated=self.max_unauthenticated,
            per_peer=self.per_peer,
            tenants=self.tenants,
            fair_share=self.fair_share,
        )
        if isinstance(plan, Refuse):
            self.traced(plan.status, plan.reason)
            return plan
        if plan.evict is not None:
            self._close(plan.evict, plan.why)
        state = ConnectionState(peer, on_tenant=self.bind)
        self.open += 1
        self.unauthenticated.setdefault(peer, []).append(state)
        self.unauthenticated_count += 1
        return state

    def bind(self, state: ConnectionState, tenant: str) -> Refuse | None:
        """A request of ``tenant`` on ``state``, a connection not yet the tenant's: its place among the tenant's
        (closing the tenant's longest-idle ones past its cap, :func:`plan_tenant_connection`), or why not."""
        held = self.tenants.get(tenant, [])
        cap, key = self.tenant_caps.get(tenant) or (self.fair_share, "frontends.http.max_connections_per_tenant")
        plan = plan_tenant_connection(tenant, held, cap, key)
        if isinstance(plan, Refuse):
            return plan
        for victim in plan:
            self._close(victim, f"tenant {tenant!r} at its limit of {cap} connections ({key})")
        self._drop(state)
        self.tenants.setdefault(tenant, []).append(state)
        return None

    def _close(self, victim: ConnectionState, why: str) -> None:
        """Close ``victim`` to make room for a new connection or request, traced."""
        self.release(victim)
        victim.scope.cancel()
        if victim.tenant is None:
            self.traced(408, f"a connection that had not sent its request head gave its place to a new one ({why})")
        else:
            self.refusals.record(
                429,
                f"an idle keep-alive connection of the tenant gave its place to a new one ({why})",
                tenant=victim.tenant,
            )

    def _drop(self, state: ConnectionState) -> None:
        """``state`` is counted neither as unauthenticated nor as its tenant's any more."""
        if state.tenant is not None:
            conns = self.tenants.get(state.tenant)
            if conns is not None and state in conns:
                conns.remove(state)
                if not conns:
                    del self.tenants[state.tenant]
            return
        conns = self.unauthenticated.get(state.peer)
        if conns is not None and state in conns:
            conns.remove(state)
            self.unauthenticated_count -= 1
            if not conns:
                del self.unauthenticated[state.peer]

    def release(self, state: ConnectionState) -> None:
        """The connection is closed (or taken): it is counted no more. Safe to call twice."""
        if state.gone:
            return
        state.gone = True
        self.open -= 1
        self._drop(state)

    def traced(self, status: int, why: str) -> None:
        """An ``http_refused`` record for a connection refused or closed (throttled: :class:`RefusalLog`)."""
        self.refusals.record(status, why)
