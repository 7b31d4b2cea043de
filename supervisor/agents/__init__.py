"""Sub-agents: the LLM loop that drives a sub-agent's calls, the model client, media for the model."""

from ._loop import AgentRunner, AgentService

__all__ = [
    "AgentRunner",
    "AgentService",
]
