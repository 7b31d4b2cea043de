"""The registry of tools: (agent, public name) -> the toolbox runner and the toolbox's own name.

Names are per agent: each agent of the policy has a name space of its own, holding its own toolboxes' tools and
one ``io_prompt_agent_<slug>`` per sub-agent it names (the tools the agent may call). Two agents that both have a
``system`` toolbox both have ``system_system_date``, each its own; a caller bound to one agent (a frontend session,
a worker's portal request, a sub-agent's loop) finds names in that agent's space only, so a Lua toolbox's
``AllowedTools: ["system_system_attach_file"]`` means its own agent's tool. A caller bound to none (the Python
API without ``agent_scope``) finds a name in the first agent's space (load order) that has it
(:attr:`ToolRegistry.tools`).

Public names match ``^[a-zA-Z0-9_-]{1,64}$`` (what MCP and OpenAI clients accept). A longer name is shortened
deterministically to its first 55 characters, ``_`` and 8 hex digits of its SHA-256; duplicates within one agent's
space get ``_2``, ``_3`` in load order (of toolboxes in the agent, then its sub-agents). ``agents-supervise tools``
shows every mapping that changed a name.

The registry is rebuilt whole whenever a toolbox's tool list changes, so names depend only on load order and the
current lists, never on history.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from supervisor.tools import ArgumentValidator, CompiledSchema, compile_schema, fingerprint

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ._origin import CallRunner

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
    runner: CallRunner
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
    #: the agent whose name space holds this name (the agent a frontend acts as when it calls it); for a
    #: sub-agent's tool the agent that names the sub-agent, for every other tool its toolbox's agent
    namespace: str = ""
    #: its toolbox's name (its runner's, which a reload keeps), looked up once: every call asks
    toolbox: str = field(init=False)
    #: the agent whose toolbox (or, for ``io_prompt_agent_<slug>``, whose loop) runs the tool (its runner's, which
    #: a reload keeps), looked up once
    agent: str = field(init=False)
    #: its toolbox's own ``limits.output_bytes`` (its worker's plan; ``None``: it has none, a sub-agent's tool),
    #: looked up once (a reload that changes it makes a new runner, and the registry is rebuilt)
    output_bytes: int | None = field(init=False)
    #: a call dispatched to its runner returns within this many seconds (``inf``: no bound is known, a sub-agent's
    #: loop), looked up once
    ends_within_s: float = field(init=False)

    def __post_init__(self) -> None:
        self.toolbox = self.runner.name
        self.agent = self.runner.spec.agent
        plan = getattr(self.runner.spec, "plan", None)
        limits = plan.payload.get("limits") if plan is not None else None
        value = limits.get("output_bytes") if isinstance(limits, dict) else None
        self.output_bytes = value if isinstance(value, int) and value > 0 else None
        self.ends_within_s = getattr(self.runner, "ends_within_s", math.inf)


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


def _description(tool: Mapping[str, Any], down: str | None) -> str:
    """A tool's description as served: its toolbox's, led by why it is not served now (a crash loop's cool-down:
    until when) when its toolbox is down, so that a client listing tools sees it before calling."""
    own = str(tool.get("description") or "")
    return f"Not available now: {down}\n\n{own}" if down else own


def _spaces(runners: list[Any], guests: Mapping[str, Sequence[Any]]) -> dict[str, list[Any]]:
    """Each agent's runners in load order: its own toolboxes', then its guests (sub-agents it names)."""
    spaces: dict[str, list[Any]] = {}
    for runner in runners:
        spaces.setdefault(str(runner.spec.agent), []).append(runner)
    for agent, extra in guests.items():
        spaces.setdefault(agent, []).extend(extra)
    return spaces


class ToolRegistry:
    """Public tool names of every running toolbox, per agent."""

    def __init__(self) -> None:
        #: agent -> public name -> tool, agents in load order
        self.namespaces: dict[str, dict[str, RegisteredTool]] = {}
        #: what a caller bound to no agent finds: each name of the first agent (load order) that has it
        self.tools: dict[str, RegisteredTool] = {}
        self.renamed: dict[str, str] = {}
        self.schema_errors: list[dict[str, str]] = []
        #: the runners of the last rebuild, also those that serve nothing (for why a name is not served)
        self.runners: list[CallRunner] = []
        #: load errors of the toolboxes that got no runner at all (the plan's, with their ``kind``), kept by the
        #: supervisor: also why a name is not served
        self.unloaded: list[dict[str, str]] = []
        self._compiled: dict[tuple[str, str], CompiledSchema] = {}
        self._owners: dict[str, list[str]] = {}  # a name -> the agents whose space holds it (agents_with)
        #: how many times it was rebuilt: what is derived from its tools (the listings of ``ServedTools``) is
        #: current while this number is the one it was derived at
        self.version = 0

    def rebuild(self, runners: list[CallRunner], *, guests: Mapping[str, Sequence[Any]] | None = None) -> None:
        """Recompute every name from the runners' current tool lists (in load order).

        Each runner serves in its own agent's space (``runner.spec.agent``); ``guests`` adds runners to an agent's
        space after its own (the sub-agents it names: ``io_prompt_agent_<slug>``).

        Schemas are compiled already (by the worker's connection, on a thread) when a runner offers ``schemas``;
        the few tools of runners that do not (sub-agent loops: the supervisor's own schemas) are compiled here, once.
        """
        namespaces: dict[str, dict[str, RegisteredTool]] = {}
        renamed: dict[str, str] = {}
        schema_errors: list[dict[str, str]] = []
        # Only the schemas of the current lists are kept: a runner changing its schemas must not grow this cache.
        compiled_here: dict[tuple[str, str], CompiledSchema] = {}
        for agent, members in _spaces(list(runners), guests or {}).items():
            tools = namespaces[agent] = {}
            self._register(agent, members, tools, renamed, schema_errors, compiled_here)
        flat: dict[str, RegisteredTool] = {}
        for tools in namespaces.values():
            for name, tool in tools.items():
                flat.setdefault(name, tool)
        owners: dict[str, list[str]] = {}
        for agent, tools in namespaces.items():
            for name in tools:
                owners.setdefault(name, []).append(agent)
        self._compiled = compiled_here
        self.runners = list(runners)
        self.namespaces = namespaces
        self.tools = flat
        self._owners = owners
        self.renamed = renamed
        self.schema_errors = schema_errors
        self.version += 1

    def _register(
        self,
        agent: str,
        members: list[Any],
        tools: dict[str, RegisteredTool],
        renamed: dict[str, str],
        schema_errors: list[dict[str, str]],
        compiled_here: dict[tuple[str, str], CompiledSchema],
    ) -> None:
        for runner in members:
            listed = list(runner.tools)
            down = getattr(runner, "failed_reason", None)  # sub-agent runners have none: they never go down
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
                    schema_errors.append(
                        {
                            "toolbox": runner.name,
                            "agent": agent,
                            "tool": local,
                            "message": compiled.error or "its input schema was not compiled",
                        }
                    )
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
                    description=_description(t, down),
                    input_schema=t.get("input_schema") or {"type": "object"},
                    validator=compiled.validator,
                    annotations=dict(t.get("annotations") or {}),
                    fingerprint=compiled.fingerprint,
                    hints=served_hints(runner, t.get("hints")),
                    output_schema=t.get("output_schema") if output is not None and output.validator else None,
                    output_validator=output.validator if output is not None else None,
                    namespace=agent,
                )

    def get(self, name: str, agent: str | None = None) -> RegisteredTool | None:
        """The tool ``name`` in ``agent``'s space (``None``: of the first agent that has it)."""
        if agent is None:
            return self.tools.get(name)
        return self.namespaces.get(agent, {}).get(name)

    def agents_with(self, name: str) -> list[str]:
        """The agents (load order) whose space holds a tool ``name``: more than one makes the name ambiguous for a
        caller that names no agent."""
        return list(self._owners.get(name, ()))  # found when the registry was built

    def names(self, agent: str | None = None) -> list[str]:
        """The names served in ``agent``'s space (``None``: what a caller bound to no agent finds)."""
        return list(self.tools if agent is None else self.namespaces.get(agent, {}))

    def all(self, agent: str | None = None) -> list[RegisteredTool]:
        """Every registered tool of ``agent``'s space (``None``: of every space, agents in load order); a
        sub-agent's tool is in the space of each agent that names it."""
        spaces = self.namespaces.values() if agent is None else [self.namespaces.get(agent, {})]
        return [tool for tools in spaces for tool in tools.values()]
