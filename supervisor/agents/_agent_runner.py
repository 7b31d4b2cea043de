"""A sub-agent as the registry sees it: a runner with one tool, ``io_prompt_agent_<slug> {what}``, and no worker
behind it (it duck-types a toolbox runner: ``name``, ``spec.agent``, ``spec.toolbox``, ``tools``, ``call``); its
calls run the agent's loop (:class:`~supervisor.agents._loop.AgentService`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from supervisor.calls import CallOrigin

from ._subagent_tool import subagent_tool

if TYPE_CHECKING:
    from toolboxes import ToolResult

    from ._loop import AgentService

__all__ = ["AgentRunner"]


@dataclass(frozen=True)
class _RunnerSpec:
    agent: str
    toolbox: str


class AgentRunner:
    """The registry's view of one sub-agent: one tool, ``io_prompt_agent_<slug> {what}``, run by the service."""

    is_agent = True

    def __init__(self, service: AgentService, slug: str) -> None:
        self.service = service
        self.slug = slug
        self.name = f"agent:{slug}"
        self.spec = _RunnerSpec(agent=slug, toolbox=self.name)
        self.load_errors: list[dict[str, Any]] = []
        self.tools = [subagent_tool(slug, service.tree.config.agent(slug).description.announce)]

    async def call(
        self,
        tool: str,
        args: dict[str, Any],
        ctx: dict[str, Any],
        wall_time_s: float | None = None,
        origin: CallOrigin | None = None,
    ) -> ToolResult:
        """Run the sub-agent on ``args["what"]`` as the portal's call ``origin`` (depth and stack included)."""
        if origin is None:
            origin = CallOrigin(session_id=str(ctx.get("session_id") or "default"))
        return await self.service.run(self.slug, str(args.get("what", "")), origin)
