"""The System toolbox: one tool per enabled capability, ``system_<Name>_<capability>``.

Only the capabilities listed in the config exist as tools (the original ran commands whether or not
``execute-command`` was enabled; here an unlisted capability has no tool at all, so there is nothing to call).
Every tool accepts the seed's input object, where ``capability`` may be omitted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .._names import tool_name
from .._result import ToolResult
from .._toolbox import CallContext, ToolSpec, WorkerEnv
from ._info import INFO_CAPABILITIES

__all__ = ["SystemToolbox", "open_toolbox"]

Handler = Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]


class SystemToolbox:
    """The System toolbox of one agent, inside its worker."""

    def __init__(self, config: dict[str, Any], env: WorkerEnv) -> None:
        self._config = config
        self._env = env
        name = config.get("Name") or env.toolbox_name
        self._tools: dict[str, tuple[str, ToolSpec, Handler]] = {}
        self._errors: list[dict[str, str]] = []
        for cap in config.get("Capabilities", []):
            entry = INFO_CAPABILITIES.get(cap)
            if entry is None:
                self._errors.append({"source": cap, "message": f"capability {cap!r} is not available in this build"})
                continue
            description, handler = entry
            schema = {
                "type": "object",
                "properties": {"capability": {"type": "string", "enum": [cap]}},
                "additionalProperties": False,
            }
            spec = ToolSpec(tool_name("system", name, cap), description, schema, inline=True)
            self._tools[spec.name] = (cap, spec, handler)

    def tools(self) -> list[ToolSpec]:
        return [spec for _, spec, _ in self._tools.values()]

    def load_errors(self) -> list[dict[str, str]]:
        return list(self._errors)

    def call(self, tool: str, args: dict[str, Any], ctx: CallContext) -> ToolResult:
        cap, _spec, handler = self._tools[tool]
        start = time.perf_counter()
        try:
            data = handler(args, self._config)
        except OSError as exc:
            return ToolResult.error(f"{cap}: the sandbox refused or the system failed: {exc.strerror or exc}")
        out = {"capability": cap, "data": data, "executionTime": round(time.perf_counter() - start, 6)}
        return ToolResult.json(out, summary=cap).with_meta("state_effect", "read").with_meta(
            "resource_id", f"system:{cap}")

    def close(self) -> None:
        pass


def open_toolbox(config: dict[str, Any], env: WorkerEnv) -> SystemToolbox:
    """Open the System toolbox described by ``config`` (the seed's ``SystemToolbox`` contents)."""
    return SystemToolbox(config, env)
