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

from ._validation import ArgumentValidator, SchemaError

if TYPE_CHECKING:
    from ._runner import ToolboxRunner

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
        self.version = 0
        self._validators: dict[tuple[str, str, str], ArgumentValidator] = {}

    def rebuild(self, runners: list[ToolboxRunner]) -> None:
        """Recompute every name from the runners' current tool lists (in load order)."""
        tools: dict[str, RegisteredTool] = {}
        renamed: dict[str, str] = {}
        schema_errors: list[dict[str, str]] = []
        # Only the validators of the current lists are kept: a worker changing its schemas again and again must not
        # grow this cache.
        validators: dict[tuple[str, str, str], ArgumentValidator] = {}
        for runner in runners:
            for t in runner.tools:
                local = t["name"]
                schema = t.get("input_schema") or {"type": "object"}
                key = (runner.name, local, repr(schema))
                validator = self._validators.get(key)
                if validator is None:
                    try:
                        validator = ArgumentValidator(schema)
                    except SchemaError as exc:
                        schema_errors.append({"toolbox": runner.name, "tool": local, "message": str(exc)})
                        continue
                    except Exception as exc:  # ArgumentValidator promises SchemaError only; a slip costs one tool
                        schema_errors.append({"toolbox": runner.name, "tool": local,
                                              "message": f"its input schema could not be compiled "
                                                         f"({type(exc).__name__})"})
                        continue
                validators[key] = validator
                output_schema = t.get("output_schema")
                output_validator = None
                if isinstance(output_schema, dict):
                    okey = (runner.name, local, "output " + repr(output_schema))
                    output_validator = self._validators.get(okey)
                    if output_validator is None:
                        try:
                            output_validator = ArgumentValidator(output_schema)
                        except Exception as exc:  # the tool is served without an output schema
                            schema_errors.append({"toolbox": runner.name, "tool": local,
                                                  "message": f"its output schema was left out: {exc}"[:600]})
                            output_schema = None
                    if output_validator is not None:
                        validators[okey] = output_validator
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
                    input_schema=schema,
                    validator=validator,
                    annotations=dict(t.get("annotations") or {}),
                    hints=served_hints(runner, t.get("hints")),
                    output_schema=output_schema if output_validator is not None else None,
                    output_validator=output_validator,
                )
        self._validators = validators
        self.tools = tools
        self.renamed = renamed
        self.schema_errors = schema_errors
        self.version += 1

    def get(self, name: str) -> RegisteredTool | None:
        return self.tools.get(name)
