"""What each tenant of the HTTP frontend holds at once (sessions, streams, calls in flight, body bytes) and its call
rate."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from supervisor.config import Tenant

__all__ = ["TenantState"]


@dataclass
class TenantState:
    """What one tenant holds at once, and its call-rate bucket."""

    limits: Tenant
    sessions: int = 0
    streams: int = 0
    #: request-body bytes its requests hold now (``_http_load.BodyBytes``)
    body_bytes: int = 0
    calls: trio.CapacityLimiter = field(init=False)
    tokens: float = 0.0
    refilled: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.calls = trio.CapacityLimiter(self.limits.limits.concurrent_calls)
        self.tokens = self._burst()

    def update(self, limits: Tenant) -> None:
        """Take a reloaded policy's settings of this tenant: what it holds stays counted, the new limits apply
        to what it asks from now on (a lower cap refuses new sessions, streams and calls until it is under)."""
        unlimited = self.limits.limits.calls_per_second is None
        self.limits = limits
        self.calls.total_tokens = limits.limits.concurrent_calls
        self.tokens = self._burst() if unlimited else min(self.tokens, self._burst())

    def _burst(self) -> float:
        """The bucket's size: a second's worth of calls, and never less than one (a rate below 1/s still allows
        a call now and then)."""
        rate = self.limits.limits.calls_per_second
        return max(rate, 1.0) if rate is not None else 0.0

    def take_call_token(self) -> float:
        """Spend one call of the rate; 0 when allowed, else the seconds until one is available."""
        rate = self.limits.limits.calls_per_second
        if rate is None:
            return 0.0
        now = time.monotonic()
        self.tokens = min(self._burst(), self.tokens + (now - self.refilled) * rate)
        self.refilled = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / rate
