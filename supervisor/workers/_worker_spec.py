"""How to start one toolbox's worker: a :class:`WorkerSpec`, made by the plan (``supervisor/plan/_worker_plan.py``)
and started by :class:`~supervisor.workers._worker.Worker`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sandbox import CgroupPlan, ConfinementPlan, Credential, Terminator

__all__ = ["WorkerSpec"]


@dataclass
class WorkerSpec:
    """How to start one toolbox's worker (built by ``_compile.py``)."""

    toolbox: str
    kind: str
    argv: list[str]
    env: dict[str, str]
    cwd: str
    plan: ConfinementPlan
    wall_time_s: float
    start_timeout_s: float = 30.0
    shutdown_grace_s: float = 2.0
    pass_fds: tuple[int, ...] = ()
    agent: str = ""
    #: public tool names this toolbox may call through the portal (Lua AllowedTools); empty: none
    allowed_tools: tuple[str, ...] = ()
    #: AllowedHosts of the egress bridge (empty: the worker gets no bridge and no network at all)
    allowed_hosts: tuple[str, ...] = ()
    #: private ranges the egress proxy may dial for this worker (the policy's network.allow_private_ranges and the
    #: toolbox's allow_private_ranges)
    private_networks: tuple[str, ...] = ()
    #: the policy opens the host's loopback to this worker's loopback entries (allow_loopback)
    loopback: bool = False
    #: where the policy opens this toolbox's address classes (``toolboxes.<agent>/<name>``), for refusals to name
    policy_key: str = ""
    #: names an allowed host may be a CNAME of without being allowed itself (the policy's cname_targets)
    cname_targets: tuple[str, ...] = ()
    #: credentials its egress proxy adds to requests their bindings match (values: never sent to the worker)
    credentials: tuple[Credential, ...] = ()
    #: the supervisor's CA when the toolbox's TLS is terminated by its proxy (tls_termination); None: tunnels
    terminator: Terminator | None = None
    #: the worker's cgroup (pids.max, memory), made at each start; None: no cgroup
    cgroup: CgroupPlan | None = None
    #: RLIMIT_AS to set after all when the (optional) cgroup that was to bound the worker's memory cannot be made
    #: at a start; the plan carries none while a cgroup memory limit is in force (docs/CONFINEMENT.md)
    address_space_fallback: int | None = None
    #: ``start: lazy``: the worker starts on the first call; its tools are listed before from ``tool_cache``
    #: (``_tool_cache.py``), or from one start at supervisor start when that holds no list for this payload
    lazy: bool = False
    #: the supervisor's own file with the last tool list of a lazy toolbox
    tool_cache: str | None = None
    #: always spawned by the launcher, a fresh exec (the policy's ``toolboxes.<name>.spawn: launcher``), never
    #: forked by the zygote: the worker gets its own address layout, stack-canary seed and Python hash seed
    fresh_exec: bool = False
    warnings: list[str] = field(default_factory=list)
    #: what ``agents-supervise check`` shows about this worker (rules, exactness, hosts)
    report: dict[str, Any] = field(default_factory=dict)
