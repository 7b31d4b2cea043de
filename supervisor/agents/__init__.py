"""Sub-agents: the LLM loop that drives a sub-agent's calls, the model client, media for the model."""

from ._loop import AgentRunner, AgentService
from ._model_network import ModelHttp

__all__ = [
    "AgentRunner",
    "AgentService",
    "ModelHttp",
]
