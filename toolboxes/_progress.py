"""Progress of a call in flight, from a worker to the supervisor: one ``event`` frame per update.

The supervisor asks for progress by putting ``"progress": true`` in a call's context (``CallContext.extra``) when
the frontend's client asked for it (an MCP ``progressToken``). A toolbox then reports with :func:`progress_event`
sent through ``WorkerEnv.channel.event``; the supervisor reads it back with :func:`parse_progress_event` and passes
it to the call's frontend (``notifications/progress``). Updates of a call that has ended are dropped by the
supervisor; the worker's ``event`` rate limit bounds them all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_PROGRESS_MESSAGE", "ProgressUpdate", "parse_progress_event", "progress_event", "wants_progress"]

MAX_PROGRESS_MESSAGE = 1000


@dataclass(frozen=True)
class ProgressUpdate:
    """``progress`` (increasing), ``total`` if known, and a short ``message`` for a person."""

    progress: float
    total: float | None = None
    message: str | None = None


def wants_progress(extra: dict[str, Any]) -> bool:
    """Whether the supervisor asked this call for progress (its context's ``progress`` key)."""
    return extra.get("progress") is True


def progress_event(call_id: int, update: ProgressUpdate) -> dict[str, Any]:
    """The event frame's body for one update of call ``call_id``."""
    out: dict[str, Any] = {"event": "progress", "call": call_id, "progress": update.progress}
    if update.total is not None:
        out["total"] = update.total
    if update.message is not None:
        out["message"] = update.message[:MAX_PROGRESS_MESSAGE]
    return out


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) and abs(number) < 1e15 else None


def parse_progress_event(event: Any) -> tuple[int, ProgressUpdate] | None:
    """``(call id, update)`` when ``event`` (untrusted, from a worker) is a well-formed progress event, else
    ``None``."""
    if not isinstance(event, dict) or event.get("event") != "progress":
        return None
    call, progress = event.get("call"), _number(event.get("progress"))
    if not isinstance(call, int) or isinstance(call, bool) or progress is None:
        return None
    total = _number(event.get("total")) if event.get("total") is not None else None
    message = event.get("message")
    return call, ProgressUpdate(progress, total, message[:MAX_PROGRESS_MESSAGE] if isinstance(message, str) else None)
