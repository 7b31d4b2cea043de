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

__all__ = ["RegisteredTool", "ToolRegistry", "public_name"]

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

    @property
    def toolbox(self) -> str:
        return self.runner.name

    @property
    def agent(self) -> str:
        return self.runner.spec.agent


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
                )
        self._validators = validators
        self.tools = tools
        self.renamed = renamed
        self.schema_errors = schema_errors
        self.version += 1

    def get(self, name: str) -> RegisteredTool | None:
        return self.tools.get(name)
