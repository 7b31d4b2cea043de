"""What every call asks of a registered tool is looked up once, when the registry is built
(``supervisor/calls/_registry.py``, issue 29: lookups made once per tool, not per call)."""

from __future__ import annotations

from types import SimpleNamespace

from supervisor.calls._registry import RegisteredTool
from supervisor.tools import ArgumentValidator


def test_a_registered_tools_toolbox_and_agent_are_its_runners_taken_once() -> None:
    """A call asks a tool's toolbox and agent several times: they are the runner's (which keeps both for its life,
    across reloads), taken when the registry is built."""
    spec = SimpleNamespace(agent="coder", toolbox="system")
    runner = SimpleNamespace(name="system", spec=spec)
    schema = {"type": "object"}
    tool = RegisteredTool("system_system_date", "date", runner, "", schema, ArgumentValidator(schema))  # type: ignore[arg-type]
    assert (tool.toolbox, tool.agent) == ("system", "coder")
    runner.name, spec.agent = "changed", "changed"  # read once: what the registry was built with
    assert (tool.toolbox, tool.agent) == ("system", "coder")


def test_a_tools_output_limit_and_a_names_owners_are_found_when_the_registry_is_built() -> None:
    """The toolbox's own ``limits.output_bytes`` (its plan's, else the policy's for a sub-agent's tool) and the
    agents that hold a name (an ambiguous name is refused to a caller that names no agent) are lookups."""
    from supervisor.calls import output_limit
    from supervisor.calls._registry import ToolRegistry

    def runner(agent: str, limits: dict[str, int] | None) -> SimpleNamespace:
        plan = SimpleNamespace(payload={"limits": limits}) if limits is not None else None
        spec = SimpleNamespace(agent=agent, toolbox="system", plan=plan)
        return SimpleNamespace(name="system", spec=spec, tools=[{"name": "system_system_date"}], schemas=None)

    registry = ToolRegistry()
    registry.rebuild([runner("a", {"output_bytes": 4096}), runner("b", None)])  # type: ignore[list-item]
    assert registry.agents_with("system_system_date") == ["a", "b"]
    assert registry.agents_with("nothing") == []
    own, other = registry.get("system_system_date", "a"), registry.get("system_system_date", "b")
    assert own is not None and other is not None
    assert (own.output_bytes, output_limit(own, 1 << 20)) == (4096, 4096)
    assert (other.output_bytes, output_limit(other, 1 << 20)) == (None, 1 << 20)
    registry.rebuild([runner("b", None)])  # type: ignore[list-item]
    assert registry.agents_with("system_system_date") == ["b"]  # what the last build holds
