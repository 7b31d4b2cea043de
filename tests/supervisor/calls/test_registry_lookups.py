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
