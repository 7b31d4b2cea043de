"""The policy's ``limits`` (every toolbox's) and a toolbox's overrides of them (``toolboxes.<key>.limits``):
rlimits, the worker's cgroup, a call's wall time and output. Applied by ``plan/_worker_limits.py``."""

from __future__ import annotations

from pydantic import Field

from ._model import Override, StrictModel, overrides
from ._policy_fields import MAX_SIZE, Size

__all__ = ["Limits", "LimitsOverride"]


class Limits(StrictModel):
    """Per-toolbox limits. ``None`` = no limit of that kind (the inherited one stays)."""

    address_space_bytes: Size | None = Field(
        default=1024**3,
        description="RLIMIT_AS of the worker and children, only where no cgroup memory limit "
        "(memory_bytes) is in force",
    )
    cpu_seconds: int | None = Field(
        default=600, ge=1, le=MAX_SIZE, description="RLIMIT_CPU: CPU seconds per process, over its whole life"
    )
    wall_time_s: float = Field(default=60.0, gt=0, description="wall-clock limit of one call")
    open_files: int | None = Field(
        default=1024,
        ge=16,
        le=1 << 20,
        description="RLIMIT_NOFILE per process (at most fs.nr_open); 1024 fits Node and Python MCP servers "
        "(docs/DECISIONS.md, 'open_files')",
    )
    file_size_bytes: Size | None = Field(default=256 * 1024**2, description="RLIMIT_FSIZE: largest file written")
    processes: int | None = Field(
        default=64,
        ge=1,
        le=1 << 22,
        description="pids.max of the worker's cgroup: processes and threads of its whole tree",
    )
    memory_bytes: Size | None = Field(
        default=1024**3, ge=1, description="memory limit of the worker's cgroup: its whole tree, page cache included"
    )
    cpus: float | None = Field(
        default=None,
        ge=0.01,
        le=4096,
        description="CPU bandwidth of the worker's cgroup, its whole tree, in CPUs (0.5 = half of one CPU); "
        "null = none",
    )
    output_bytes: Size = Field(default=1024**2, ge=1, description="cap on a call's output; more is cut, truncated set")
    max_concurrent_calls: int = Field(default=8, ge=1, le=4096, description="calls in flight in one worker")


@overrides(Limits)
class LimitsOverride(Override):
    """Per-toolbox overrides: only the keys written replace the defaults (``null`` = no limit)."""
