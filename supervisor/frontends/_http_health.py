"""The HTTP frontend's probes for load balancers and Kubernetes: liveness (``/healthz``) and readiness
(``/readyz``). Pure: what to answer, from what the service says of itself.

- ``GET /healthz``: ``200 {"status": "ok"}`` whenever the server answers at all (the event loop runs, the
  listener accepts). No authentication, and nothing about tenants, agents or toolboxes.
- ``GET /readyz``: ``200 {"status": "ready"}`` once the policy's workers are started and the server accepts calls;
  ``503 {"status": "not ready", "reason": ...}`` with ``Retry-After`` while it starts or after a SIGTERM, during
  ``frontends.http.drain_s`` (the server still serves what reaches it, so that a load balancer's last requests are
  answered while it takes the instance out).

``HEAD`` is answered like ``GET`` without the body. Probes are not traced (a probe every few seconds would fill the
trace) and count against no tenant.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["HEALTH_PATHS", "HealthAnswer", "health_answer"]

HEALTHZ = "/healthz"
READYZ = "/readyz"
HEALTH_PATHS = frozenset({HEALTHZ, READYZ})


@dataclass(frozen=True)
class HealthAnswer:
    """What a probe is answered: the status, the JSON body, extra headers."""

    status: int
    body: dict[str, Any]
    headers: tuple[tuple[str, str], ...] = ()


def health_answer(path: str, method: str, *, started: bool, draining: bool) -> HealthAnswer:
    """The answer to a probe of ``path`` (one of :data:`HEALTH_PATHS`). Pure.

    ``started``: the supervisor started the policy's workers and the server listens; ``draining``: a SIGTERM came
    and the server is about to stop."""
    if method not in ("GET", "HEAD"):
        return HealthAnswer(
            405, {"status": "error", "reason": f"{path} is read with GET or HEAD"}, (("allow", "GET, HEAD"),)
        )
    if path == HEALTHZ:
        return HealthAnswer(200, {"status": "ok"})
    if draining:
        why = "shutting down (SIGTERM); send new work elsewhere"
        return HealthAnswer(503, {"status": "not ready", "reason": why}, (("retry-after", "5"),))
    if not started:
        why = "starting: the workers are not all started yet"
        return HealthAnswer(503, {"status": "not ready", "reason": why}, (("retry-after", "1"),))
    return HealthAnswer(200, {"status": "ready"})
