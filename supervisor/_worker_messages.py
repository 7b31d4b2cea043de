"""What a worker sends the supervisor besides call results: events (progress, its own records, lifecycle), and
requests made from inside a call (a portal call to another tool, a host operation such as session introspection).

Both are untrusted input: an event is traced bounded (keys cut to 64 characters, at most 32 of them, strings to
2000, other values strict JSON of at most 200 characters a string); a request is answered only for a call of that
worker still in flight, with the scope and limits taken from the supervisor's copy of the toolbox's spec, never
from the message.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from supervisor.calls import media_response
from supervisor.plan import kind_plan
from supervisor.sessions import answer_host_request
from supervisor.traces import strict_json
from toolboxes import parse_progress_event

if TYPE_CHECKING:
    from collections.abc import Callable

    from supervisor.calls import CallWorker, Portal
    from supervisor.config import Introspection
    from supervisor.sessions import SessionStore
    from supervisor.traces import TraceRecorder
    from toolboxes import Attachment

__all__ = ["answer_worker_request", "record_worker_event"]


def _short_repr(value: Any) -> str:
    """At most 2000 characters describing an untrusted value (a nested one may be too deep for ``repr``)."""
    try:
        return repr(value)[:2000]
    except RecursionError:
        return f"<{type(value).__name__} nested too deeply>"


def record_worker_event(trace: TraceRecorder, worker: CallWorker, kind: str, data: dict[str, Any]) -> None:
    """Handle an event of ``worker``: a progress update goes to its call's frontend (dropped once the call ended);
    a ``worker_event`` is traced bounded; a lifecycle event is traced as it is; ``tools_changed`` is the runner's."""
    if kind == "worker_event" and (progress := parse_progress_event(data)) is not None:
        call, update = progress
        origin = worker.origins.get(call)  # a call that ended has no origin: its late updates are dropped
        if origin is not None and origin.progress is not None:
            origin.progress(update)
        return
    if kind == "worker_event":
        safe = {
            str(k)[:64]: (
                v[:2000]
                if isinstance(v, str)
                else v
                if isinstance(v, int | float | bool) or v is None
                else _short_repr(strict_json(v, string_limit=200))
            )
            for k, v in list(data.items())[:32]
        }
        trace.record("worker_event", toolbox=worker.spec.toolbox, agent=worker.spec.agent, data=safe)
    elif kind != "tools_changed":
        trace.record(kind, **{"toolbox": worker.spec.toolbox, "agent": worker.spec.agent, "pid": worker.pid, **data})


async def answer_worker_request(
    portal: Portal,
    sessions: SessionStore | None,
    introspection: Introspection,
    worker: CallWorker,
    message: dict[str, Any],
    read_attachment: Callable[[Attachment], bytes] | None = None,
) -> dict[str, Any]:
    """The answer to a portal or host request ``worker`` made from one of its calls in flight (``{"result": ...}``
    or ``{"error": why}``); never raises for a malformed request. A portal call's attachments reach the worker
    with their bytes (``calls.media_response``) when ``read_attachment`` reads the store."""
    call = message.get("call")
    origin = worker.origins.get(call) if isinstance(call, int) else None
    if origin is None:
        return {"error": "request names no call in flight; portal and host requests are made from a call"}
    if message["t"] == "portal":
        args = message.get("args")
        # The same session, conversation, turn and owner as the call that asks (only what it may call differs);
        # its names are its own agent's (AllowedTools: ["system_system_attach_file"] is that agent's tool).
        inner = replace(
            origin,
            allowed=frozenset(worker.spec.allowed_tools),
            caller=f"toolbox {worker.spec.toolbox}",
            progress=None,
            agent_scope=worker.spec.agent,
        )
        tool = message.get("tool")
        if not isinstance(tool, str):
            return {"error": "portal request needs a tool name"}
        result, trace_id = await portal.call_traced(tool, args if args is not None else {}, inner)
        if trace_id:  # the seed's ToolResult.resultTraceId (Lua's tools.call result), first of its key
            result = replace(result, metadata=[("trace_id", trace_id), *result.metadata])
        if read_attachment is not None and result.attachments:
            result = media_response(result, read_attachment)
        return {"result": result.to_wire()}
    if kind_plan(worker.spec.kind).host_requests:
        # The scope and limits come from the supervisor's copy of the toolbox's config, never the worker's.
        return answer_host_request(
            sessions,
            worker.spec.plan.payload.get("config") or {},
            origin.session_id,
            message.get("op"),
            message.get("args"),
            introspection,
        )
    return {"error": f"host operation {message.get('op')!r} is not supported by this supervisor"}
