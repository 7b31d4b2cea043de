"""Sub-agents: the LLM loop that drives a sub-agent's calls, the model client, media for the model."""

from ._loop import AgentRunner, AgentService
from ._model_network import ModelAccess, ModelHttp, ceiling_refusal, literal_refusal, model_report

__all__ = [
    "AgentRunner",
    "AgentService",
    "ModelAccess",
    "ModelHttp",
    "ceiling_refusal",
    "literal_refusal",
    "model_report",
]
