"""The records of a call: ``call_start`` before it is dispatched; ``call_end``, the session store's row and what a
skill action changed in its session's tool list after; and their commit before a frontend's answer goes.

A frontend's call (depth 0) is answered once its records (and those of the calls it made, queued before it) are
written and committed (:attr:`CallRecords.group`, a :class:`~supervisor.calls._group_commit.GroupCommit`: calls
that end together share one flush), so a ``kill -9`` right after an answer loses neither. A nested call's records
go with its caller's (its answer goes to a worker or an agent loop, not to a client): they are buffered.

Arguments are encoded as JSON once (:func:`args_json`) for the trace and the store; those larger than
:data:`MAX_TRACED_ARGS_CHARS` are not copied into the trace (their size is).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ._group_commit import GroupCommit

if TYPE_CHECKING:
    from supervisor.sessions import SessionStore, SessionToolViews
    from supervisor.traces import TraceRecorder
    from toolboxes import ToolResult

    from ._frontend_sessions import FrontendSessions
    from ._origin import CallOrigin
    from ._registry import RegisteredTool

__all__ = ["MAX_TRACED_ARGS_CHARS", "CallRecords", "args_json", "traced_args"]

#: Arguments larger than this (as JSON) are not copied into the trace; their size is recorded instead.
MAX_TRACED_ARGS_CHARS = 16 * 1024

_ARGS_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def args_json(args: Any) -> str | None:
    """Checked arguments as compact JSON text, encoded once for the trace and the session store; ``None`` when
    they are not JSON or not valid Unicode (the trace's own cleaning handles those)."""
    if not args and type(args) is dict:  # a call without arguments, the most common: no encoder
        return "{}"
    try:
        text = _ARGS_ENCODER.encode(args)
        if not text.isascii():  # O(1) for str; only text beyond ASCII can hold a lone surrogate
            text.encode("utf-8")
    except (TypeError, ValueError, RecursionError, UnicodeEncodeError):
        return None
    return text


def traced_args(args: Any) -> Any:
    """``args`` for a ``call_start`` record: as given when small, else a note of their size.

    Path-like fields of small inputs stay available to the trace report's redundant-read detection.
    """
    try:
        size = len(json.dumps(args, default=repr))
    except (TypeError, ValueError, RecursionError):
        return {"_omitted": "arguments that are not JSON"}
    if size <= MAX_TRACED_ARGS_CHARS:
        return args
    return {"_omitted": f"{size} characters of arguments (more than {MAX_TRACED_ARGS_CHARS} are not traced)"}


class CallRecords:
    """Writes the records of every call of one supervisor (long-lived: a reload keeps it).

    ``sessions``: the session store (``None``: calls are not recorded there); ``session_tools``: the per-session
    tool views a skill action changes; ``frontends``: the frontends' names of root sessions (whose waiters a
    changed tool list wakes).
    """

    def __init__(
        self,
        trace: TraceRecorder,
        sessions: SessionStore | None,
        session_tools: SessionToolViews,
        frontends: FrontendSessions,
    ) -> None:
        self.trace = trace
        self.sessions = sessions
        self.session_tools = session_tools
        self.frontends = frontends
        #: the commit a frontend's call awaits before its answer goes (``commit(alone=...)``)
        self.group = GroupCommit(self.flush)

    def start(
        self, call_id: str, name: str, tool: RegisteredTool, origin: CallOrigin, depth: int, args: Any, text: str | None
    ) -> None:
        """``call_start`` of the call ``call_id`` of ``tool`` (by ``name``) at ``depth``; ``text``: the arguments as
        JSON (:func:`args_json`), spliced in when small."""
        fields = {
            "call_id": call_id,
            "parent_call_id": origin.parent_call_id,
            "tool": name,
            "toolbox": tool.toolbox,
            "agent": tool.agent,
            "namespace": tool.namespace,
            "session": origin.session_id,
            "conversation": origin.conversation_id,
            "turn": origin.turn_id,
            "depth": depth,
            "caller": origin.caller,
        }
        if text is not None and len(text) <= MAX_TRACED_ARGS_CHARS:
            self.trace.record_raw("call_start", {"args": text}, **fields)
        else:
            self.trace.record("call_start", **fields, args=traced_args(args))

    def end(
        self,
        call_id: str,
        name: str,
        tool: RegisteredTool,
        origin: CallOrigin,
        result: ToolResult | None,
        *,
        args: Any,
        text: str | None,
        started: float,
        duration_s: float,
        buffered: bool,
    ) -> None:
        """``call_end`` (``result`` ``None``: cancelled), what a skill action changed, the session store's row.
        ``buffered``: the trace record waits for the commit (a frontend's call, :attr:`group` commits it). Never
        raises for a store that cannot write (it counts its errors)."""
        (self.trace.record_buffered if buffered else self.trace.record)(
            "call_end",
            call_id=call_id,
            tool=name,
            toolbox=tool.toolbox,
            agent=tool.agent,
            status=result.status if result else "error",
            summary=result.summary if result else "cancelled",
            duration_s=round(duration_s, 6),
            session=origin.session_id,
            metadata=[list(p) for p in result.metadata] if result else [],
        )
        if (
            result is not None
            and tool.annotations.get("skill_action")
            and self.session_tools.observe(
                origin.session_id, tool.agent, tool.toolbox, tool.annotations, result.status, result.structured
            )
        ):
            self.session_tools.wake(self.frontends.name_of(origin.session_id))
        if self.sessions is None:
            return
        self.sessions.record_call(
            origin.session_id,
            call_id=call_id,
            parent_call_id=origin.parent_call_id,
            tool=tool.name,
            args=args,
            args_json=text,
            status=result.status if result else "error",
            summary=result.summary if result else "cancelled",
            output=result.data if result else None,
            started=started,
            duration_s=duration_s,
            conversation_id=origin.conversation_id,
            turn_id=origin.turn_id,
        )

    def flush(self) -> None:
        """Write the buffered trace records and make the session store's queued writes durable (its journal; the
        sessions' modified times are left to the flusher, within its interval)."""
        self.trace.flush()
        if self.sessions is not None:
            self.sessions.commit()
