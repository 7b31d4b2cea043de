"""The registry of tools: public name -> the toolbox runner and the toolbox's own name.

Public names match ``^[a-zA-Z0-9_-]{1,64}$`` (what MCP and OpenAI clients accept). A longer name is shortened
deterministically to its first 55 characters, ``_`` and 8 hex digits of its SHA-256; duplicates get ``_2``, ``_3``
in load order (the order of agents in the policy, then of toolboxes in each agent). ``agents-supervise tools``
shows every mapping that changed a name.

The registry is rebuilt whole whenever a toolbox's tool list changes, so names depend only on load order and the
current lists, never on history.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from supervisor.tools import ArgumentValidator, CompiledSchema, compile_schema, fingerprint

if TYPE_CHECKING:
    from supervisor.workers import ToolboxRunner

__all__ = ["RegisteredTool", "ToolRegistry", "public_name", "served_hints"]

NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")


def public_name(raw: str) -> str:
    """A name clients accept, derived deterministically from ``raw`` (before de-duplication)."""
    name = _UNSAFE.sub("_", raw) or "tool"
    if len(name) <= 64:
        return name
    return f"{name[:55]}_{hashlib.sha256(raw.encode()).hexdigest()[:8]}"


@dataclass
class RegisteredTool:
    """One tool as the supervisor serves it."""

    name: str
    local_name: str
    runner: ToolboxRunner
    description: str
    input_schema: dict[str, Any]
    validator: ArgumentValidator
    annotations: dict[str, Any] = field(default_factory=dict)
    #: digest of ``input_schema`` (tells a changed schema without comparing the schemas)
    fingerprint: str = ""
    #: the MCP annotations served (``readOnlyHint`` ...): the toolbox's hints with what the supervisor knows
    hints: dict[str, Any] = field(default_factory=dict)
    output_schema: dict[str, Any] | None = None
    output_validator: ArgumentValidator | None = None

    @property
    def toolbox(self) -> str:
        return self.runner.name

    @property
    def agent(self) -> str:
        return self.runner.spec.agent


def served_hints(runner: Any, hints: Any) -> dict[str, Any]:
    """The MCP annotations of a tool: the toolbox's ``hints``, with ``openWorldHint`` set from what the supervisor
    enforces: true when the worker has an egress bridge (allowed hosts), false when it has no network and calls no
    other tool through the portal (the kernel keeps it inside). See docs/MCP.md."""
    out = dict(hints) if isinstance(hints, dict) else {}
    spec = getattr(runner, "spec", None)
    if spec is None or not hasattr(spec, "allowed_hosts"):
        return out
    if spec.allowed_hosts:
        out["openWorldHint"] = True
    elif not getattr(spec, "allowed_tools", ()):
        out["openWorldHint"] = False
    return out


class ToolRegistry:
    """Public tool names of every running toolbox."""

    def __init__(self) -> None:
        self.tools: dict[str, RegisteredTool] = {}
        self.renamed: dict[str, str] = {}
        self.schema_errors: list[dict[str, str]] = []
        #: the runners of the last rebuild, also those that serve nothing (for why a name is not served)
        self.runners: list[ToolboxRunner] = []
        self._compiled: dict[tuple[str, str], CompiledSchema] = {}

    def rebuild(self, runners: list[ToolboxRunner]) -> None:
        """Recompute every name from the runners' current tool lists (in load order).

        Schemas are compiled already (by the worker's connection, on a thread) when a runner offers ``schemas``;
        the few tools of runners that do not (sub-agent loops: the supervisor's own schemas) are compiled here, once.
        """
        tools: dict[str, RegisteredTool] = {}
        renamed: dict[str, str] = {}
        schema_errors: list[dict[str, str]] = []
        # Only the schemas of the current lists are kept: a runner changing its schemas must not grow this cache.
        compiled_here: dict[tuple[str, str], CompiledSchema] = {}
        for runner in runners:
            listed = list(runner.tools)
            schemas: list[CompiledSchema] | None = getattr(runner, "schemas", None)
            if schemas is None or len(schemas) != len(listed):
                schemas = []
                for t in listed:
                    schema = t.get("input_schema") or {"type": "object"}
                    key = (runner.name, fingerprint(schema))
                    schemas.append(self._compiled.get(key) or compile_schema(schema, key[1]))
                    compiled_here[key] = schemas[-1]
            outputs: list[Any] = list(getattr(runner, "output_schemas", None) or [])
            if len(outputs) != len(listed):
                outputs = [None] * len(listed)  # compiled nowhere: served without output schemas
            for t, compiled, output in zip(listed, schemas, outputs, strict=True):
                local = t["name"]
                if compiled.validator is None:
                    schema_errors.append({"toolbox": runner.name, "tool": local,
                                          "message": compiled.error or "its input schema was not compiled"})
                    continue
                name = public_name(local)
                if name in tools:
                    n = 2
                    while f"{name[:60]}_{n}" in tools:
                        n += 1
                    name = f"{name[:60]}_{n}"
                if name != local:
                    renamed[name] = local
                tools[name] = RegisteredTool(
                    name=name,
                    local_name=local,
                    runner=runner,
                    description=str(t.get("description") or ""),
                    input_schema=t.get("input_schema") or {"type": "object"},
                    validator=compiled.validator,
                    annotations=dict(t.get("annotations") or {}),
                    fingerprint=compiled.fingerprint,
                    hints=served_hints(runner, t.get("hints")),
                    output_schema=t.get("output_schema") if output is not None and output.validator else None,
                    output_validator=output.validator if output is not None else None,
                )
        self._compiled = compiled_here
        self.runners = list(runners)
        self.tools = tools
        self.renamed = renamed
        self.schema_errors = schema_errors

    def get(self, name: str) -> RegisteredTool | None:
        return self.tools.get(name)
