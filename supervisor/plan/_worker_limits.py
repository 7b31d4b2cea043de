"""A worker's identity and limits: its uid, gid and groups, the Landlock ABI it needs, its cgroup and rlimits (pure;
one step of ``_worker_plan.plan_worker``).

- **Who it runs as**: only a supervisor running as root gives workers uids; then its own (the state dir's identity
  table, ``_identities.py``) or the policy's ``sandbox_uid``/``sandbox_gid``, plus the shared groups the policy puts
  it in. Without root every worker runs as the supervisor's uid in a user namespace of its own.
- **Landlock**: a strict policy needs at least ``landlock_min_abi`` of the kernel, and its plan says so to the
  launcher, which refuses less.
- **cgroup**: ``limits.processes``, ``memory_bytes`` and ``cpus`` need a cgroup of the worker's own, made at each
  start (``sandbox/_cgroups.py``); where none can be made (or no cpu controller) a strict policy refuses, a
  permissive one warns and enforces what rlimits can.
- **rlimits**: RLIMIT_NPROC is a backstop beside the cgroup's ``pids.max`` (it counts every process of the uid);
  RLIMIT_AS only where no cgroup bounds memory (:func:`plan_address_space`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sandbox import plan_cgroup
from supervisor._errors import PolicyRefused

if TYPE_CHECKING:
    from sandbox import CgroupLayout, CgroupPlan
    from supervisor.config import Policy, ToolboxConfig

    from ._identities import WorkerIdentity

__all__ = [
    "NPROC_BACKSTOP_FACTOR",
    "WorkerAccount",
    "WorkerLimits",
    "plan_account",
    "plan_address_space",
    "plan_limits",
]

#: With a cgroup holding each worker to ``limits.processes``, RLIMIT_NPROC (counted over every process of the sandbox
#: uid on the machine) is only a backstop: this many times the worker's own limit.
NPROC_BACKSTOP_FACTOR = 8


@dataclass(frozen=True)
class WorkerAccount:
    """Who a worker runs as: ``uid``/``gid`` ``None`` when the supervisor is not root (its own, in a user
    namespace); ``own``: a uid of its own from the identity table (not the shared ``sandbox_uid``)."""

    uid: int | None
    gid: int | None
    groups: tuple[int, ...] = ()
    own: bool = False


def plan_account(policy: Policy, tb: ToolboxConfig, identity: WorkerIdentity | None, *, root: bool) -> WorkerAccount:
    """Who ``tb``'s worker runs as (module docstring); ``identity``: its own uid and gid (``None``: the policy's
    ``sandbox_uid`` and ``sandbox_gid``)."""
    if not root:
        return WorkerAccount(None, None, (), own=identity is not None)
    uid, gid = (identity.uid, identity.gid) if identity is not None else (policy.sandbox_uid, policy.sandbox_gid)
    groups = tuple(g for g in policy.shared_gids(tb.name, tb.agent_slug) if g != gid)
    return WorkerAccount(uid, gid, groups, own=identity is not None)


def plan_address_space(address_space_bytes: int | None, cgroup: CgroupPlan | None) -> tuple[int | None, int | None]:
    """``(RLIMIT_AS of the plan, RLIMIT_AS to set if the optional cgroup cannot be made)`` (pure).

    ``limits.address_space_bytes`` bounds memory only where no cgroup does: RLIMIT_AS counts address space a
    process *reserves*, not memory it uses, so it breaks runtimes that reserve far more than they touch (V8's
    "Failed to reserve virtual memory for CodeRange", the JVM's heap reservation, Go's arenas) while the cgroup's
    ``memory.max`` bounds what is really used, the whole tree and page cache included. With a cgroup memory limit
    in force the worker gets no RLIMIT_AS; a permissive policy's optional group that cannot be made at a start
    puts the rlimit back for that start.
    """
    if cgroup is None or cgroup.memory_bytes is None or address_space_bytes is None:
        return address_space_bytes, None
    return None, (None if cgroup.required else address_space_bytes)


@dataclass(frozen=True)
class WorkerLimits:
    """What :func:`plan_limits` decided for one worker."""

    #: the Landlock ABI the launcher must find (0: any)
    min_abi: int
    cgroup: CgroupPlan | None
    #: RLIMIT_NPROC
    nproc: int | None
    #: RLIMIT_AS of the plan, and the one to set if the optional cgroup cannot be made at a start
    address_space: int | None
    address_space_fallback: int | None
    warnings: list[str] = field(default_factory=list)


def _cgroup(
    policy: Policy, tb: ToolboxConfig, layout: CgroupLayout | None, problem: str, warnings: list[str]
) -> CgroupPlan | None:
    limits = policy.effective_limits(tb.name, tb.agent_slug)
    cpus = limits.cpus
    if cpus is not None and layout is not None and not layout.cpu_base:
        if policy.strict:
            raise PolicyRefused(
                f"toolbox {tb.name} (agent {tb.agent_slug}): limits.cpus needs the cgroup cpu controller and this "
                "host offers none to the supervisor (v1: no hierarchy with cpu mounted; v2: cpu not enabled in the "
                "supervisor's cgroup); strict: true never runs a worker less confined than it says. Set limits.cpus "
                "to null, or enable the controller."
            )
        warnings.append(f"{tb.name}: no cgroup cpu controller: limits.cpus is not enforced")
        cpus = None
    if limits.processes is None and limits.memory_bytes is None and cpus is None:
        return None
    if layout is not None:
        return plan_cgroup(
            layout, pids_max=limits.processes, memory_bytes=limits.memory_bytes, required=policy.strict, cpus=cpus
        )
    if policy.strict:
        raise PolicyRefused(
            f"toolbox {tb.name} (agent {tb.agent_slug}): its processes, memory and CPU limits need a cgroup of its "
            f"own and none can be made here ({problem}); strict: true never runs a worker less confined "
            "than it says. Run the supervisor as root on a host with the pids and memory controllers, or set "
            "limits.processes, limits.memory_bytes and limits.cpus to null."
        )
    warnings.append(
        f"{tb.name}: no cgroup ({problem}): limits.memory_bytes and limits.cpus are not "
        "enforced and limits.processes is only RLIMIT_NPROC, shared by every process of the "
        "sandbox uid"
    )
    return None


def plan_limits(
    policy: Policy,
    tb: ToolboxConfig,
    *,
    kernel_abi: int,
    cgroup_layout: CgroupLayout | None,
    cgroup_problem: str = "cgroups were not looked for",
) -> WorkerLimits:
    """The Landlock ABI, cgroup and rlimits of ``tb``'s worker under its effective limits, on a host
    whose kernel has Landlock ``kernel_abi`` and where the supervisor may make cgroups in ``cgroup_layout``
    (``None``: nowhere, ``cgroup_problem`` says why).

    Raises:
        PolicyRefused: a strict policy on a kernel whose Landlock is older than it needs, or limits that need a
            cgroup (or its cpu controller) this host does not give.
    """
    if policy.strict and kernel_abi < policy.landlock_min_abi:
        raise PolicyRefused(
            f"this kernel's Landlock ABI is {kernel_abi or 'missing'}; the policy needs at least "
            f"{policy.landlock_min_abi} (strict: true never runs a worker less confined than it says)"
        )
    warnings: list[str] = []
    cgroup = _cgroup(policy, tb, cgroup_layout, cgroup_problem, warnings)
    limits = policy.effective_limits(tb.name, tb.agent_slug)
    nproc = limits.processes
    if cgroup is not None and cgroup.pids_max is not None:
        nproc = cgroup.pids_max * NPROC_BACKSTOP_FACTOR
    address_space, fallback = plan_address_space(limits.address_space_bytes, cgroup)
    return WorkerLimits(
        min_abi=policy.landlock_min_abi if policy.strict else 0,
        cgroup=cgroup,
        nproc=nproc,
        address_space=address_space,
        address_space_fallback=fallback,
        warnings=warnings,
    )
