"""The policy's ``agent_loop``: the bounds of every sub-agent loop (steps, retries, backoff, request time) and
the address classes the policy opens to model endpoints (``supervisor/agents/_model_network.py``)."""

from __future__ import annotations

from pydantic import Field, model_validator

from ._errors import problem
from ._model import StrictModel
from ._policy_fields import Cidr

__all__ = ["AgentLoop"]


class AgentLoop(StrictModel):
    """Bounds of every sub-agent loop the supervisor runs (``io_prompt_agent_<slug>``, ``agents-supervise run``)."""

    max_steps: int = Field(default=16, ge=1, description="model requests per loop before it ends with an error")
    retries: int = Field(default=3, ge=0, description="retries of one model request after a transient error")
    backoff_initial_s: float = Field(default=0.5, ge=0, description="wait before the first retry; doubles")
    backoff_max_s: float = Field(default=10.0, ge=0, description="longest wait between retries")
    request_timeout_s: float = Field(default=120.0, gt=0, description="wall time of one model request")
    # What the policy opens to model endpoints (an agent file's modelUrl opens no address class): the same address
    # rules as the egress proxy's (supervisor/agents/_model_network.py, docs/NETWORK.md "Model requests").
    allow_loopback: bool = Field(
        default=False,
        description="model endpoints on the host's loopback (modelUrl host localhost, 127.0.0.1 or ::1: a local "
        "model such as ollama) are reachable, for every agent; never the supervisor's own listening ports; bound "
        "which agents may name them with ceilings.<slug>.model_hosts",
    )
    allow_private_ranges: list[Cidr] = Field(
        default=[],
        description="private ranges (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7, ...) model endpoints may be "
        "in, for every agent; an agent file's modelUrl opens none",
    )

    @model_validator(mode="after")
    def _ordered(self) -> AgentLoop:
        if self.backoff_initial_s > self.backoff_max_s:
            raise problem("backoff_initial_s is larger than backoff_max_s", "backoff_initial_s <= backoff_max_s")
        return self
