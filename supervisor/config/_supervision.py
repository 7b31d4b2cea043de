"""The policy's ``supervision``: how workers are started (zygote or launcher, how many at once) and restarted
(backoff, crash loops, grace at shutdown)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ._errors import problem
from ._model import StrictModel

__all__ = ["Supervision"]


class Supervision(StrictModel):
    """How workers are started and restarted (the policy's ``supervision``; the restarts: ``workers/_runner.py``)."""

    restart_backoff_initial_s: float = Field(default=0.1, gt=0)
    restart_backoff_max_s: float = Field(default=30.0, gt=0)
    crash_loop_max_restarts: int = Field(default=5, ge=0)
    crash_loop_window_s: float = Field(default=60.0, gt=0)
    #: how long a toolbox stays down after a crash loop before it is started afresh
    crash_loop_cooldown_s: float = Field(default=300.0, gt=0, le=86400 * 7)
    shutdown_grace_s: float = Field(default=2.0, ge=0)
    parallel_starts: int | None = Field(
        default=None,
        ge=1,
        le=4096,
        description="workers started at once when the supervisor starts (the rest wait for a place); null = 4 per "
        "CPU for launchers, 32 per CPU when the zygote forks them",
    )
    spawn: Literal["zygote", "launcher"] = Field(
        default="zygote",
        description=(
            "who makes a worker's process: zygote (forked by the supervisor's fork server, which has the worker "
            "code imported; the launcher when the zygote cannot run) or launcher (a fresh interpreter each)"
        ),
    )

    @model_validator(mode="after")
    def _ordered(self) -> Supervision:
        if self.restart_backoff_initial_s > self.restart_backoff_max_s:
            raise problem(
                "restart_backoff_initial_s is larger than restart_backoff_max_s",
                "restart_backoff_initial_s <= restart_backoff_max_s",
            )
        return self
