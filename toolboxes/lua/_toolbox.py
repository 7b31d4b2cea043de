"""The Lua toolbox: one tool, ``lua_<Name>_execute {script, timeout?}``.

Each call runs in a fresh Lua 5.4 state (:mod:`._runtime`) with the limits of the toolbox entry: ``MaxMemoryMB``
and ``MaxExecutionTimeSeconds``; the call's ``timeout`` may only lower the latter, and so does the deadline the
supervisor put on the call. The result is ``{"values": [...], "executionTime": seconds}`` as JSON (plus
``"output"`` when the script printed), status ``passed``; a failure is ``{"error": {"kind", "message", "line"?},
"executionTime"}`` with the status of its kind (:data:`._errors.STATUS_OF_KIND`) and the message in the summary.
"""

from __future__ import annotations

from typing import Any

from .._result import ToolResult
from .._toolbox import CallContext, ToolSpec, WorkerEnv
from ._config import LuaConfig, parse_config
from ._errors import STATUS_OF_KIND
from ._host import Host
from ._http import HttpClient
from ._paths import PathGate
from ._runtime import Clock, run_script

__all__ = ["LuaToolbox", "open_toolbox"]

_MODULES_DOC = (
    "Modules (globals, also via require): json (encode, decode, encode_pretty, null, array), text (split, trim, "
    "lines, replace, startswith, endswith, contains, join, lower, upper, len), time (now, monotonic, elapsed, sleep, "
    "format, iso8601), fs (read, write, exists, list, mkdir, isdir, isfile, patch; paths limited by the file "
    "sandbox), http (get, post, request; allowed hosts only), tools (call, list; allowed tools only). "
    "Return values come back as JSON in order; print() output is returned too. No io, os.execute, debug, "
    "package, or binary chunks."
)


class LuaToolbox:
    """A Lua toolbox inside its worker. Thread-safe: calls share nothing but the immutable config."""

    def __init__(self, config: LuaConfig, env: WorkerEnv, http: HttpClient) -> None:
        self.config = config
        self.env = env
        self.http = http
        self.gate = PathGate(config.file_sandbox, config.base_dir)
        self.tool_name = f"lua_{config.name}_execute"

    def tools(self) -> list[ToolSpec]:
        schema = {
            "type": "object",
            "properties": {
                "script": {"type": "string", "description": "Lua 5.4 source; its return values are the result."},
                "timeout": {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "description": f"Seconds; may only lower the toolbox limit of {self.config.max_seconds:g} s.",
                },
            },
            "required": ["script"],
            "additionalProperties": False,
        }
        description = f"{self.config.description}. Runs a Lua script in a sandbox. {_MODULES_DOC}"
        return [ToolSpec(self.tool_name, description, schema)]

    def load_errors(self) -> list[dict[str, str]]:
        return []

    def close(self) -> None:
        """Nothing to release: every state is closed at the end of its call."""

    def time_limit(self, args: dict[str, Any], ctx: CallContext) -> float:
        """The call's time limit in seconds: the toolbox's, lowered by the call's ``timeout`` and deadline."""
        limit = self.config.max_seconds
        timeout = args.get("timeout")
        if isinstance(timeout, int | float) and not isinstance(timeout, bool) and timeout > 0:
            limit = min(limit, float(timeout))
        remaining = ctx.remaining()
        if remaining is not None:
            limit = min(limit, remaining)
        return limit

    def call(self, tool: str, args: dict[str, Any], ctx: CallContext) -> ToolResult:
        if tool != self.tool_name:
            return ToolResult.error(f"unknown tool {tool!r}; this toolbox has only {self.tool_name}")
        script = args.get("script")
        if not isinstance(script, str):
            return ToolResult.error("the argument 'script' must be a string of Lua source")
        clock = Clock(self.time_limit(args, ctx), ctx.cancelled)
        host = Host(self.config, self.gate, self.http, self.env.channel, ctx, clock)
        outcome = run_script(
            script,
            clock=clock,
            host=host,
            max_memory_bytes=self.config.max_memory_bytes,
            max_output_bytes=self.config.max_output_bytes,
        )
        seconds = round(outcome.seconds, 6)
        if outcome.ok:
            value: dict[str, Any] = {"values": outcome.values, "executionTime": seconds}
            if outcome.output:
                value["output"] = outcome.output
            return ToolResult.json(value, summary=f"Lua script returned {len(outcome.values)} value(s)")
        assert outcome.kind is not None
        error: dict[str, Any] = {"kind": outcome.kind, "message": outcome.message}
        if outcome.line is not None:
            error["line"] = outcome.line
        where = f" at line {outcome.line}" if outcome.line is not None else ""
        summary = f"Lua {outcome.kind.replace('_', ' ')} error{where}: {outcome.message}"
        return ToolResult.json(
            {"error": error, "executionTime": seconds}, status=STATUS_OF_KIND[outcome.kind], summary=summary
        )


def open_toolbox(config: dict[str, Any], env: WorkerEnv) -> LuaToolbox:
    """Open a Lua toolbox from its config entry (see :mod:`._config`); raises ``LuaConfigError`` when unusable."""
    parsed = parse_config(config, env.workdir)
    return LuaToolbox(parsed, env, HttpClient(parsed.allowed_hosts))
