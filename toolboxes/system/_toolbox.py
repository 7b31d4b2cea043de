"""The System toolbox: one tool per enabled capability, ``system_<Name>_<capability>``.

Only the capabilities listed in the config exist as tools (the original ran commands whether or not
``execute-command`` was enabled; here an unlisted capability has no tool at all, so there is nothing to call).
Every tool accepts the seed's input object, where ``capability`` may be omitted.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._hints import READ_ONLY
from .._names import CAPABILITY_PROPERTY, capability_refusal, tool_name
from .._reaper import Reaper
from .._result import ToolResult
from .._toolbox import CallContext, ToolSpec, WorkerEnv
from ._command import execute_command
from ._files import attach_file, file_gate, list_directory
from ._info import INFO_CAPABILITIES
from ._sessions import SESSION_CAPABILITIES

if TYPE_CHECKING:
    from collections.abc import Callable

    from .._paths import PathGate

__all__ = ["SystemToolbox", "open_toolbox"]


@dataclass(frozen=True)
class _Capability:
    description: str
    properties: dict[str, Any]
    required: tuple[str, ...]
    run: Callable[[SystemToolbox, dict[str, Any], CallContext], ToolResult]
    inline: bool = False
    hints: dict[str, Any] = field(default_factory=lambda: dict(READ_ONLY))


def _info(cap: str) -> _Capability:
    description, handler = INFO_CAPABILITIES[cap]

    def run(tb: SystemToolbox, args: dict[str, Any], ctx: CallContext) -> ToolResult:
        start = time.perf_counter()
        try:
            data = handler(args, tb.config)
        except OSError as exc:
            return ToolResult.error(f"{cap}: the sandbox refused or the system failed: {exc.strerror or exc}")
        out = {"capability": cap, "data": data, "executionTime": round(time.perf_counter() - start, 6)}
        return (
            ToolResult.json(out, summary=cap)
            .with_meta("state_effect", "read")
            .with_meta("resource_id", f"system:{cap}")
        )

    return _Capability(description, {}, (), run, inline=True)


_CAPABILITIES: dict[str, _Capability] = {cap: _info(cap) for cap in INFO_CAPABILITIES}
_CAPABILITIES["attach-file"] = _Capability(
    "Attach a file from the file sandbox: images, audio, PDF, video, text or any other file (the type is read from "
    "the file's bytes).",
    {
        "filepath": {
            "type": "string",
            "description": "path of the file inside the file sandbox (absolute, or "
            "relative to the agent file's folder)",
        }
    },
    ("filepath",),
    lambda tb, args, ctx: attach_file(args, tb.gate, tb.env.workdir),
)
_CAPABILITIES["list-directory"] = _Capability(
    "List a directory of the file sandbox (only the entries the sandbox allows).",
    {
        "path": {
            "type": "string",
            "description": "the directory to list (absolute, or relative to the agent file's folder)",
        },
        "recursive": {"type": "boolean", "description": "also list subdirectories", "default": False},
        "include_hidden": {"type": "boolean", "description": "include names starting with '.'", "default": False},
    },
    ("path",),
    lambda tb, args, ctx: list_directory(args, tb.gate),
)
_CAPABILITIES["execute-command"] = _Capability(
    "Run a shell command (sh -c) inside the sandbox; returns exitCode, stdout, stderr and duration.",
    {"command": {"type": "string", "description": "the shell command"}},
    ("command",),
    lambda tb, args, ctx: execute_command(args, tb.config, ctx, tb.reaper, tb.env.workdir),
    hints={},  # a shell command may do anything the sandbox allows: MCP's defaults (destructive) hold
)


def _session(
    run: Callable[[WorkerEnv, dict[str, Any], CallContext], ToolResult],
) -> Callable[[SystemToolbox, dict[str, Any], CallContext], ToolResult]:
    """A session capability (it needs only the worker's environment) as a capability's ``run``."""
    return lambda tb, args, ctx: run(tb.env, args, ctx)


for _cap, (_description, _properties, _required, _run) in SESSION_CAPABILITIES.items():
    _CAPABILITIES[_cap] = _Capability(_description, _properties, _required, _session(_run))


class SystemToolbox:
    """The System toolbox of one agent, inside its worker."""

    def __init__(self, config: dict[str, Any], env: WorkerEnv) -> None:
        self.config: dict[str, Any] = config
        self.env: WorkerEnv = env
        self.gate: PathGate = file_gate(config)
        self.reaper: Reaper = Reaper(subreaper=True)
        name = config.get("Name") or env.toolbox_name
        self._tools: dict[str, tuple[str, _Capability]] = {}
        #: capability -> its tool (for the refusal of a call naming another capability)
        self._enabled: dict[str, str] = {}
        self._specs: list[ToolSpec] = []
        self._errors: list[dict[str, str]] = []
        for cap in config.get("Capabilities", []):
            entry = _CAPABILITIES.get(cap)
            if entry is None:
                self._errors.append({"source": cap, "message": f"capability {cap!r} is not available in this build"})
                continue
            schema = {
                "type": "object",
                "properties": {"capability": CAPABILITY_PROPERTY, **entry.properties},
                "required": list(entry.required),
                "additionalProperties": False,
            }
            if not entry.required:
                del schema["required"]
            spec = ToolSpec(
                tool_name("system", name, cap), entry.description, schema, inline=entry.inline, hints=dict(entry.hints)
            )
            self._tools[spec.name] = (cap, entry)
            self._enabled[cap] = spec.name
            self._specs.append(spec)

    def tools(self) -> list[ToolSpec]:
        return list(self._specs)

    def load_errors(self) -> list[dict[str, str]]:
        return list(self._errors)

    def call(self, tool: str, args: dict[str, Any], ctx: CallContext) -> ToolResult:
        cap, entry = self._tools[tool]
        refused = capability_refusal(args.get("capability"), cap, self._enabled)
        if refused is not None:
            return ToolResult.error(refused)
        return entry.run(self, args, ctx)

    def close(self) -> None:
        self.reaper.close()


def open_toolbox(config: dict[str, Any], env: WorkerEnv) -> SystemToolbox:
    """Open the System toolbox described by ``config`` (the seed's ``SystemToolbox`` contents)."""
    return SystemToolbox(config, env)
