"""The System toolbox's session capabilities: ``list-sessions``, ``search-sessions``, ``read-session``,
``get-session-stats``.

The worker keeps no sessions and decides nothing here: each call is a ``host`` request up the pipe
(``env.channel.host(ctx, op, args)``) and the supervisor answers from its session store, enforcing the toolbox's
``SessionIntrospectionScope``, ``SessionIntrospectionMaxResults`` and ``SessionIntrospectionIncludeToolOutputs``
from its own copy of the config (this worker's copy is not trusted for it). A refusal comes back as the
supervisor's message in an ``error`` result. These tools are never ``inline``: a host request blocks its thread until
the reply, which the worker's reader thread delivers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._result import ToolResult
from .._toolbox import CallContext, WorkerEnv

__all__ = ["SESSION_CAPABILITIES"]

Run = Callable[[WorkerEnv, dict[str, Any], CallContext], ToolResult]


def _host_call(op: str) -> Run:
    def run(env: WorkerEnv, args: dict[str, Any], ctx: CallContext) -> ToolResult:
        payload = {k: v for k, v in args.items() if k != "capability"}
        try:
            data = env.channel.host(ctx, op, payload)
        except RuntimeError as exc:
            return ToolResult.error(f"{op}: {exc}")
        if not isinstance(data, dict):
            return ToolResult.error(f"{op}: the supervisor sent no answer")
        effect = ToolResult.json(data, summary=op).with_meta("state_effect", "read")
        target = payload.get("session_id")
        return effect.with_meta("resource_id", f"session:{target}" if target else f"sessions:{op}")

    return run


#: capability -> (description, extra input properties, required properties, run)
SESSION_CAPABILITIES: dict[str, tuple[str, dict[str, Any], tuple[str, ...], Run]] = {
    "list-sessions": (
        "List the sessions this toolbox may see (its scope), most recent first.",
        {},
        (),
        _host_call("list-sessions"),
    ),
    "search-sessions": (
        "Search the turns of the sessions this toolbox may see for a text.",
        {"query": {"type": "string", "minLength": 1, "description": "the text to look for (case-insensitive)"}},
        ("query",),
        _host_call("search-sessions"),
    ),
    "read-session": (
        "Read a session's turns as condensed text.",
        {
            "session_id": {"type": "string", "minLength": 1, "description": "a sessionId from list-sessions"},
            "take_n": {"type": "integer", "minimum": 1, "description": "how many turns to return"},
            "include_thinking": {
                "type": "boolean",
                "default": False,
                "description": "also show the model's reasoning, kept for sub-agents whose model sends it",
            },
            "include_tool_responses": {
                "type": "boolean",
                "default": True,
                "description": "show tool outputs (when the toolbox's config allows it)",
            },
        },
        ("session_id",),
        _host_call("read-session"),
    ),
    "get-session-stats": (
        "Count the sessions, turns and tool calls this toolbox may see.",
        {},
        (),
        _host_call("get-session-stats"),
    ),
}
