"""The host side of one Lua call: what the prelude's ``host(op, ...)`` reaches.

Convention of every answer (a tuple lupa unpacks into Lua values): ``(True, value...)`` on success,
``(False, "fail", message)`` for an outcome a script handles (Lua gets ``nil, message``), or ``(False, kind,
message)`` with ``kind`` ``sandbox`` or ``tool_invocation`` for a Lua error of that kind. Arguments arrive as Lua
strings (``bytes``), numbers, booleans or ``None``; answers carry only ``bytes``, numbers, booleans and ``None``
(:func:`_lua_safe` converts ``str`` and refuses anything else), so no Python object is handed to the state.

Nothing here raises into Lua: an unexpected exception becomes a ``runtime`` answer naming the operation, without a
traceback.
"""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING, Any

from ._fs import FileOps
from ._http import DEFAULT_HTTP_TIMEOUT_S, HttpClient

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._toolbox import CallContext, HostChannel
    from ._config import LuaConfig
    from ._paths import PathGate
    from ._runtime import Clock

__all__ = ["Host"]

Answer = tuple[Any, ...]


def _lua_safe(answer: Answer) -> Answer:
    out: list[Any] = []
    for v in answer:
        if isinstance(v, str):
            out.append(v.encode("utf-8", errors="surrogateescape"))
        elif v is None or isinstance(v, bool | int | float | bytes):
            out.append(v)
        else:
            raise TypeError(f"a host answer may not carry a {type(v).__name__}")
    return tuple(out)


def _text(value: Any, what: str) -> str:
    if not isinstance(value, bytes):
        raise TypeError(f"{what} must be a string")
    return os.fsdecode(value)


class Host:
    """The operations of one call (``ctx``) of a toolbox (``config``)."""

    def __init__(
        self,
        config: LuaConfig,
        gate: PathGate,
        http: HttpClient,
        channel: HostChannel | None,
        ctx: CallContext,
        clock: Clock,
    ) -> None:
        self.config = config
        self.http = http
        self.channel = channel
        self.ctx = ctx
        self.clock = clock
        self.fs = FileOps(gate, config.max_memory_bytes)

    def __call__(self, op: bytes, *args: Any) -> Answer:
        name = op.decode("ascii", errors="replace") if isinstance(op, bytes) else repr(op)
        try:
            return _lua_safe(self._dispatch(name, args))
        except Exception as exc:  # the script must get a message, never a Python traceback
            return _lua_safe((False, "runtime", f"{name}: internal error: {type(exc).__name__}: {exc}"))

    def _dispatch(self, op: str, args: tuple[Any, ...]) -> Answer:
        if op == "time.now":
            return (True, time.time())
        if op == "time.monotonic":
            return (True, time.monotonic())
        if op == "time.elapsed":
            return (True, time.monotonic() - self.clock.start)
        if op == "time.sleep":
            self.ctx.cancelled.wait(min(float(args[0]), self.clock.remaining()))
            return (True,)
        if op.startswith("fs."):
            return self._fs(op[3:], args)
        if op == "http":
            method, url, headers, body, timeout = args
            limit = min(float(timeout) if timeout else DEFAULT_HTTP_TIMEOUT_S, self.clock.remaining())
            return self.http.request(
                _text(method, "method"),
                _text(url, "url"),
                _text(headers, "headers"),
                body,
                limit,
                self.config.max_memory_bytes,
            )
        if op == "tools.call":
            return self._tool_call(_text(args[0], "the tool name"), _text(args[1], "the arguments"))
        if op == "tools.list":
            return (True, json.dumps(list(self.config.allowed_tools)))
        if op == "tools.context":  # the call's ids, as the bash toolbox's AGENT_* variables carry them
            ctx = self.ctx
            return (True, ctx.session_id, ctx.conversation_id, ctx.turn_id, ctx.agent_id)
        raise ValueError(f"unknown host operation {op!r}")

    def _fs(self, op: str, args: tuple[Any, ...]) -> Answer:
        path = _text(args[0], "the path")
        if op in ("read", "exists", "isdir", "isfile", "list", "mkdir"):
            read: Callable[[str], Answer] = getattr(self.fs, op)
            return read(path)
        if op in ("write", "patch"):
            if not isinstance(args[1], bytes):
                raise TypeError("the content must be a string")
            write: Callable[[str, bytes], Answer] = getattr(self.fs, op)
            return write(path, args[1])
        raise ValueError(f"unknown fs operation {op!r}")

    def _tool_call(self, tool: str, args_json: str) -> Answer:
        """Ask the supervisor's portal to run ``tool``; answers the fields of the Lua result table:
        ``status`` (ok | error | not-allowed), ``result_txt``, ``duration`` (seconds), ``trace_id`` (the portal's
        call id, ``""`` when the portal refused before dispatching), ``error``, and whether ``result_txt`` is JSON
        (the prelude then decodes it into ``data`` inside the state, under its limits)."""
        if tool not in self.config.allowed_tools:
            allowed = ", ".join(self.config.allowed_tools) or "none"
            return (
                True,
                "not-allowed",
                "",
                0.0,
                "",
                f"tool {tool!r} is not in this toolbox's AllowedTools ({allowed})",
                False,
            )
        try:
            args = json.loads(args_json)
        except ValueError as exc:
            return (False, "tool_invocation", f"tools.call: the arguments are not valid JSON: {exc}")
        if not isinstance(args, dict):
            return (False, "tool_invocation", "tools.call: the arguments must be a table with named fields")
        if self.channel is None:
            return (False, "tool_invocation", "tools.call: no tool portal is available in this worker")
        started = time.monotonic()
        try:
            result = self.channel.portal(self.ctx, tool, args)
        except Exception as exc:
            return (False, "tool_invocation", f"tools.call({tool!r}): the portal failed: {exc}")
        duration = time.monotonic() - started
        text = result.data if result.data is not None else (result.summary or "")
        trace_id = result.meta("trace_id") or ""
        is_json = result.data is not None and (result.structured is not None or _is_json_document(result.data))
        if result.status == "passed":
            return (True, "ok", text, duration, trace_id, None, is_json)
        status = "not-allowed" if result.meta("portal_error") == "PortalToolNotAllowed" else "error"
        return (True, status, text, duration, trace_id, result.summary or text or f"{tool} failed", is_json)


def _is_json_document(text: str) -> bool:
    """A result text is JSON when it parses as a JSON object or array (a bare word or number stays text)."""
    stripped = text.lstrip()
    if not stripped.startswith(("{", "[")):
        return False
    try:
        json.loads(stripped)
    except ValueError:
        return False
    return True
