"""Which TCP connections the HTTP server holds, so that no unauthenticated client can take the service from the
tenants: the connection cap, the unauthenticated share, the per-peer cap, and the bound on reading a request head.

A connection is **unauthenticated** from its accept until one of its requests carries credentials the app accepts
(:meth:`ConnectionState.mark_authenticated`); from then on it is its tenant's. The rules
(:func:`plan_admission`, pure):

- at most ``max_connections`` connections at once, all together;
- at most ``unauthenticated_share`` of them unauthenticated, and at most ``max_unauthenticated_per_peer`` of
  those from one peer address (a reverse proxy's connections authenticate with their first request, so this bounds
  stalled connections, not a proxy);
- past a cap a new connection takes the place of a connection that is still waiting for or reading its request
  head (the longest waiting one of the peer that holds the most such connections, or of the new connection's own
  peer past the per-peer cap), which is closed: a client that sends its request at once always gets in, one that
  trickles a head only keeps its place while nobody needs it; with no such connection to take, the new one is
  refused (503, or 429 past the per-peer cap, with ``Retry-After``).

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
    from supervisor.config import HttpFrontend

__all__ = ["Admit", "ConnectionGate", "ConnectionState", "Refuse", "head_deadline", "plan_admission"]


@dataclass(eq=False)
class ConnectionState:
    """One open connection as the gate counts it; the connection's code sets :attr:`reading_head`, the app calls
    :meth:`mark_authenticated`."""

    peer: str
    #: cancelled to close the connection (taken by a newer one)
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    #: when the server began waiting for the current request head (trio time)
    waiting_since: float = field(default_factory=trio.current_time)
    #: waiting for or reading a request head (or a TLS handshake): a place a newer connection may take
    reading_head: bool = True
    authenticated: bool = False
    #: counted no more (taken by a newer connection, or released)
    gone: bool = False
    on_authenticated: Callable[[ConnectionState], None] | None = None

    def mark_authenticated(self) -> None:
        """A request of this connection was authenticated: it is its tenant's from now on."""
        if not self.authenticated:
            self.authenticated = True
            if self.on_authenticated is not None:
                self.on_authenticated(self)


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


def plan_admission(
    peer: str,
    *,
    open_count: int,
    unauthenticated: Mapping[str, Sequence[ConnectionState]],
    unauthenticated_count: int,
    max_connections: int,
    max_unauthenticated: int,
    per_peer: int,
) -> Admit | Refuse:
    """Whether a new connection from ``peer`` is held and whose place it takes. Pure.

    ``unauthenticated``: the unauthenticated connections open now, by peer address (``unauthenticated_count`` of
    them)."""
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

    def __init__(self, settings: HttpFrontend, trace: TraceRecorder) -> None:
        self.trace = trace
        self.open = 0
        self.refusing = 0
        self.unauthenticated: dict[str, list[ConnectionState]] = {}
        self.unauthenticated_count = 0
        self.refusals = RefusalLog(trace)
        self.configure(settings)

    def configure(self, settings: HttpFrontend) -> None:
        """Take the caps of ``settings`` (at start and at a reload: they apply to connections accepted from now)."""
        self.cap = settings.max_connections
        self.max_unauthenticated = max(1, math.ceil(settings.max_connections * settings.unauthenticated_share))
        self.per_peer = settings.max_unauthenticated_per_peer

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
        )
        if isinstance(plan, Refuse):
            self.traced(plan.status, plan.reason)
            return plan
        if plan.evict is not None:
            self.release(plan.evict)
            plan.evict.scope.cancel()
            self.traced(
                408, f"a connection that had not sent its request head gave its place to a new one ({plan.why})"
            )
        state = ConnectionState(peer, on_authenticated=self._authenticated)
        self.open += 1
        self.unauthenticated.setdefault(peer, []).append(state)
        self.unauthenticated_count += 1
        return state

    def _drop_unauthenticated(self, state: ConnectionState) -> None:
        conns = self.unauthenticated.get(state.peer)
        if conns is not None and state in conns:
            conns.remove(state)
            self.unauthenticated_count -= 1
            if not conns:
                del self.unauthenticated[state.peer]

    def _authenticated(self, state: ConnectionState) -> None:
        self._drop_unauthenticated(state)

    def release(self, state: ConnectionState) -> None:
        """The connection is closed (or taken): it is counted no more. Safe to call twice."""
        if state.gone:
            return
        state.gone = True
        self.open -= 1
        self._drop_unauthenticated(state)

    def traced(self, status: int, why: str) -> None:
        """An ``http_refused`` record for a connection refused or closed (throttled: :class:`RefusalLog`)."""
        self.refusals.record(status, why)
