"""Compile a loaded policy into one worker spec per toolbox (what ``agents-supervise check`` shows).

Pure decisions first (:func:`plan_worker`: rules, limits, environment, warnings from a policy and a toolbox
config), then :func:`compile_policy` does the little I/O it needs: stage the worker code, create the work and state
folders owned by the sandbox uid, and check that the sandbox uid can read the interpreter. A policy that cannot be
enforced raises :class:`~supervisor._errors.PolicyRefused` before anything starts.

Anything else that goes wrong for one toolbox (an unexpected exception while planning its worker, its folders that
cannot be made, the worker code that cannot be staged) is a load error of that toolbox
(:attr:`CompiledPolicy.load_errors`): it gets no worker and the others compile.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sandbox import (
    NEUTRAL_HOSTNAME,
    READ,
    WRITE,
    AllowedHosts,
    BridgePorts,
    CgroupLayout,
    CgroupPlan,
    ConfinementPlan,
    FsRule,
    HostError,
    Rlimits,
    ViewSpec,
    ensure_dir,
    ensure_path,
    landlock_abi,
    open_anchor,
    plan_cgroup,
    python_runtime_paths,
    read_layout,
    reown_tree,
    supervisor_ca,
    uid_can_read,
    worker_network_env,
)
from supervisor._errors import PolicyRefused
from supervisor.config import ConfigError, ConfigProblem, LoadedConfig, Supervision, ToolboxConfig, display_path
from supervisor.workers import (
    WorkerSpec,
    explained_limits,
    launcher_argv,
    preload_modules,
    stage_worker_code,
    tool_cache_path,
)

from ._agent_bindings import agent_file_or_path
from ._ceilings import (
    Bound,
    ToolboxRefused,
    agent_bounds,
    caps_report,
    ceiling_refusals,
    class_refusals,
    subagent_slugs,
    tenant_reach,
)
from ._credential_grants import grant_credentials
from ._credential_values import load_credentials
from ._host_view import HostView
from ._identities import WorkerIdentity, assign_identities
from ._kinds import kind_plan
from ._tls_termination import ca_file_path, termination_env, write_ca_file
from ._writable_agents import file_writers, writers_text

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from sandbox import Credential

    from ._skill_sources import GitSource

__all__ = [
    "ROOTLESS_WARNING",
    "WORKER_ENTRY",
    "WORKER_PROCESS_ENV",
    "CompiledPolicy",
    "StagedCode",
    "compile_policy",
    "plan_address_space",
    "plan_worker",
    "stage_code",
    "worker_modules",
]

#: With a cgroup holding each worker to ``limits.processes``, RLIMIT_NPROC (counted over every process of the sandbox
#: uid on the machine) is only a backstop: this many times the worker's own limit.
NPROC_BACKSTOP_FACTOR = 8
#: Workers started at once per CPU by the launcher when ``supervision.parallel_starts`` is not set: a launcher's
#: start is mostly the worker's own CPU (a fresh interpreter, its imports, confinement: about 200 ms), so more at once
#: only shares the CPUs thinner and brings every one of them nearer its ``start_timeout_s``; a few per CPU keep the
#: CPUs busy while others wait on I/O.
STARTS_PER_CPU = 4
#: The same, for starts the zygote forks: each is about 12 ms of the worker's CPU and 5 ms of the supervisor's, and
#: much of a start's time is waiting in the kernel (namespace, mount and cgroup changes wait for RCU grace periods,
#: which concurrent waiters share), so more at once finish sooner: 100 toolboxes were ready about 1.5x sooner with
#: 32 a CPU than with 4. At this many a start is still well within its ``start_timeout_s`` on a loaded machine
#: (docs/DECISIONS.md, "Start to ready (issue 18)").
ZYGOTE_STARTS_PER_CPU = 32
#: Said at every start and by ``check`` when the supervisor is not root (docs/CONFINEMENT.md, "Without root").
ROOTLESS_WARNING = (
    "the supervisor is not root: every worker runs as its uid {uid} in a user namespace of its own (Landlock, the "
    "private view, the network namespace and seccomp hold as with root); what needs root is off: a uid per worker "
    "(workers' files are apart only by Landlock, not by file modes), shared_groups, cgroup limits (memory_bytes, "
    "cpus; processes is only RLIMIT_NPROC), the kernel's audit records, and inodes of a worker's own for /dev nodes"
)
#: What every worker's process runs after its confinement (``module:function``)
WORKER_ENTRY = "toolboxes._worker:main"
#: The environment of every worker's launcher (or zygote) process; the worker's own is its plan's ``env``
WORKER_PROCESS_ENV = {"LANG": "C.UTF-8", "MALLOC_ARENA_MAX": "2"}


@dataclass
class CompiledPolicy:
    """Everything the supervisor needs to start, derived once from the loaded config."""

    config: LoadedConfig
    specs: list[WorkerSpec]
    state_dir: str
    trace_path: str | None
    max_call_depth: int
    session_max_calls: int | None
    session_max_concurrent: int | None
    media_limits: dict[str, int]
    #: the policy's ``supervision`` (the runners' restart settings)
    supervision: Supervision
    landlock_abi: int
    #: workers started at once by the launcher (``supervision.parallel_starts``, default :data:`STARTS_PER_CPU` a CPU)
    parallel_starts: int = 8
    #: workers started at once when the zygote forks them (``supervision.parallel_starts``, default
    #: :data:`ZYGOTE_STARTS_PER_CPU` a CPU)
    zygote_parallel_starts: int = 32
    warnings: list[str] = field(default_factory=list)
    #: SkillGitRepo sources to clone at start (their worker configs already name the clones' folders)
    git_sources: list[GitSource] = field(default_factory=list)
    #: toolboxes left out because they could not be compiled (``{"toolbox", "agent", "kind", "source", "message"}``)
    load_errors: list[dict[str, str]] = field(default_factory=list)
    #: the staged worker code every spec's launcher command puts first on ``sys.path`` (``None``: not staged)
    runtime_dir: str | None = None
    #: the interpreter of every spec's launcher command
    python: str = ""
    #: ``(registry directory, state id)`` where this state dir's uids are claimed host-wide (``None``: no uids, or
    #: not prepared): a running supervisor holds it (``_uid_registry.UidHold``) so ``uids release`` refuses
    uid_claim: tuple[str, str] | None = None


def _load_error(tb: ToolboxConfig, source: str, exc: BaseException) -> dict[str, str]:
    message = (
        f"toolbox {tb.name} (agent {tb.agent_slug}) did not load ({source}): {type(exc).__name__}: {exc}"[:2000]
        + ". It serves nothing; fix the cause and restart the supervisor."
    )
    return {"toolbox": tb.name, "agent": tb.agent_slug, "kind": tb.kind, "source": source, "message": message}


def plan_worker(
    config: LoadedConfig,
    tb: ToolboxConfig,
    *,
    python: str,
    runtime_dir: str,
    state_dir: str,
    running_as_root: bool,
    kernel_abi: int,
    cgroup_layout: CgroupLayout | None = None,
    cgroup_problem: str = "cgroups were not looked for",
    identity: WorkerIdentity | None = None,
    credentials: Mapping[str, Credential] | None = None,
    host: HostView | None = None,
    bounds: Sequence[Bound] = (),
) -> WorkerSpec:
    """Decide what the worker of ``tb`` gets (pure: no file is touched). Raises :class:`PolicyRefused`, or its
    :class:`ToolboxRefused` for what only this toolbox asks past the policy (``_ceilings.py``).

    ``identity``: the uid and gid of its own this worker runs as (the policy's ``worker_uids``, from the state
    dir's identity table, ``_identities.py``); ``None``: the policy's ``sandbox_uid`` and ``sandbox_gid``.
    ``credentials``: the policy's credentials with their values (``_credential_values.load_credentials``).
    ``host``: what the host says of the rules' paths, shared by every toolbox of one compile (``_host_view.py``;
    ``None``: asked afresh). ``bounds``: the ceilings that bound its agent (``_ceilings.agent_bounds``).
    """
    host = host if host is not None else HostView()
    policy = config.policy
    limits = policy.effective_limits(tb.name, tb.agent_slug)
    overrides = policy.toolbox_policy(tb.name, tb.agent_slug)
    warnings: list[str] = []
    workdir = os.path.join(state_dir, "work", tb.agent_slug, tb.name)
    tb_state = os.path.join(state_dir, "toolbox-state", tb.agent_slug, tb.name)

    rules: list[FsRule] = []
    rules += [FsRule(p, READ) for p in policy.system_paths]
    rules += [FsRule(p, READ) for p in python_runtime_paths()]
    rules.append(FsRule(runtime_dir, READ))
    rules += [FsRule(p, WRITE) for p in policy.device_paths]
    rules += [FsRule(workdir, WRITE), FsRule(tb_state, WRITE)]
    rules += [FsRule(p, READ) for p in tb.read_paths]
    rules += [FsRule(p, READ) for p in overrides.read_paths]  # the policy's grant to this toolbox alone
    kind = kind_plan(tb.kind)
    grants = kind.grants(tb, kind.worker_config(tb.worker_config()), state_dir, policy, warnings)
    cfg = grants.cfg
    rules += grants.rules
    rules += [FsRule(p, WRITE) for p in tb.write_paths]

    fs_report: dict[str, Any] | None = None
    if tb.file_sandbox is not None:
        from sandbox import compile_predicate

        mode = WRITE if kind.writes_files(cfg) else READ
        comp = compile_predicate(tb.file_sandbox.predicate, mode)
        rules += list(comp.rules)
        fs_report = {
            "mode": mode,
            "exact": comp.exact,
            "residual": comp.residual,
            "rules": [{"path": r.path, "mode": r.mode} for r in comp.rules],
            "lines": comp.describe(),
            "missing": list(comp.missing),
        }
        if comp.unbounded:
            if policy.strict:
                raise PolicyRefused(
                    f"toolbox {tb.name} (agent {tb.agent_slug}): its FileSandbox reaches the whole filesystem "
                    "(AlwaysAllow, or a pattern/extension/size/Not without a directory around it); a strict policy "
                    "refuses it. Intersect it with DirectoryRecursive of the trees the toolbox needs."
                )
            warnings.append(
                f"{tb.name}: its FileSandbox reaches the whole filesystem; the kernel grants '/' "
                "read-only (never read-write) and the in-worker check does the rest"
            )
        warnings += [
            f"{tb.name}: FileSandbox path {p} does not exist; nothing is granted there until restart"
            for p in comp.missing
        ]
        if not comp.exact and kind.runs_code(cfg):
            message = (
                f"toolbox {tb.name} (agent {tb.agent_slug}) runs arbitrary code but its FileSandbox cannot be "
                f"enforced exactly by the kernel ({comp.residual}); code it runs could reach more than the "
                "predicate allows"
            )
            if policy.inexact_predicates == "refuse":
                raise PolicyRefused(message + ". The policy says inexact_predicates: refuse.")
            warnings.append(message)

    missing = [
        r.path
        for r in rules
        if not host.exists(r.path) and r.path not in (workdir, tb_state, runtime_dir, *grants.made_at_start)
    ]
    if missing:
        warnings += [f"{tb.name}: {p} does not exist and is not granted" for p in sorted(set(missing))]
        rules = [r for r in rules if r.path not in missing]
    # One rule per path, the widest mode wins.
    merged: dict[str, str] = {}
    for r in rules:
        merged[r.path] = WRITE if WRITE in (merged.get(r.path), r.mode) else READ
    rules = [FsRule(p, m) for p, m in merged.items()]

    env = policy.worker_env_for(tb.name, tb.agent_slug)
    env.update({"HOME": workdir, "TMPDIR": os.path.join(workdir, "tmp")})
    # bash sets SHELL from the account database when it is missing: an NSS lookup (nscd socket, nsswitch.conf,
    # passwd) on every start of every script, about 60 us here. A policy's own SHELL wins.
    env.setdefault("SHELL", "/bin/sh")

    tb_hosts = tb.allowed_hosts if kind.worker_hosts else ()
    hosts = tuple(dict.fromkeys([*tb_hosts, *overrides.allowed_hosts]))
    private = policy.private_ranges_for(tb.name, tb.agent_slug)
    loopback = policy.loopback_for(tb.name, tb.agent_slug)
    policy_key = f"toolboxes.{tb.agent_slug}/{tb.name}"
    cname_targets = tuple(overrides.cname_targets)
    try:
        AllowedHosts.parse(hosts, private_networks=private, cname_targets=cname_targets)
    except HostError as exc:
        raise PolicyRefused(f"toolbox {tb.name} (agent {tb.agent_slug}): AllowedHosts: {exc}") from exc
    capabilities = cfg.get("Capabilities") or () if tb.kind in ("system", "developer") else ()
    past = ceiling_refusals(tb.allowed_hosts, capabilities, bounds)
    if past:
        raise ToolboxRefused("; ".join(past))
    closed = class_refusals(
        dict.fromkeys([*tb.allowed_hosts, *overrides.allowed_hosts]),
        loopback=loopback,
        private_ranges=private,
        policy_key=policy_key,
    )
    if closed and policy.strict:
        raise ToolboxRefused("; ".join(closed) + ". A strict policy refuses a setting that cannot hold.")
    warnings += [f"{tb.name}: {c}; it reaches nothing" for c in closed]
    if kind.no_network is not None and hosts:
        message = f"toolbox {tb.name} (agent {tb.agent_slug}): AllowedHosts gives {kind.no_network}"
        if policy.strict:
            raise PolicyRefused(message + " A strict policy refuses a setting that cannot hold.")
        warnings.append(message)
    ports = BridgePorts()
    if hosts:
        env.update(worker_network_env(ports))
    grant = grant_credentials(
        cfg,
        granted=overrides.credentials,
        credential_env=overrides.credential_env,
        loaded=credentials or {},
        hosts=hosts if kind.worker_hosts else tuple(tb.allowed_hosts),
        toolbox=tb.name,
        agent=tb.agent_slug,
    )  # a skills toolbox's: its git clones
    env.update(grant.env or {})
    warnings += grant.warnings
    terminator = None
    if overrides.tls_termination and hosts:
        terminator = supervisor_ca()
        ca_path = ca_file_path(state_dir, terminator)
        env.update(termination_env(ca_path))
        rules.append(FsRule(ca_path, READ))
    elif overrides.tls_termination:
        warnings.append(f"{tb.name}: tls_termination has no effect: the toolbox has no AllowedHosts")

    uid = gid = None
    groups: tuple[int, ...] = ()
    if running_as_root:
        uid, gid = policy.sandbox_uid, policy.sandbox_gid
        if identity is not None:
            uid, gid = identity.uid, identity.gid
        groups = tuple(g for g in policy.shared_gids(tb.name, tb.agent_slug) if g != gid)
    min_abi = policy.landlock_min_abi if policy.strict else 0
    if policy.strict and kernel_abi < policy.landlock_min_abi:
        raise PolicyRefused(
            f"this kernel's Landlock ABI is {kernel_abi or 'missing'}; the policy needs at least "
            f"{policy.landlock_min_abi} (strict: true never runs a worker less confined than it says)"
        )

    cgroup: CgroupPlan | None = None
    cpus = limits.cpus
    if cpus is not None and cgroup_layout is not None and not cgroup_layout.cpu_base:
        if policy.strict:
            raise PolicyRefused(
                f"toolbox {tb.name} (agent {tb.agent_slug}): limits.cpus needs the cgroup cpu controller and this "
                "host offers none to the supervisor (v1: no hierarchy with cpu mounted; v2: cpu not enabled in the "
                "supervisor's cgroup); strict: true never runs a worker less confined than it says. Set limits.cpus "
                "to null, or enable the controller."
            )
        warnings.append(f"{tb.name}: no cgroup cpu controller: limits.cpus is not enforced")
        cpus = None
    if limits.processes is not None or limits.memory_bytes is not None or cpus is not None:
        if cgroup_layout is not None:
            cgroup = plan_cgroup(
                cgroup_layout,
                pids_max=limits.processes,
                memory_bytes=limits.memory_bytes,
                required=policy.strict,
                cpus=cpus,
            )
        elif policy.strict:
            raise PolicyRefused(
                f"toolbox {tb.name} (agent {tb.agent_slug}): its processes, memory and CPU limits need a cgroup of its "
                f"own and none can be made here ({cgroup_problem}); strict: true never runs a worker less confined "
                "than it says. Run the supervisor as root on a host with the pids and memory controllers, or set "
                "limits.processes, limits.memory_bytes and limits.cpus to null."
            )
        else:
            warnings.append(
                f"{tb.name}: no cgroup ({cgroup_problem}): limits.memory_bytes and limits.cpus are not "
                "enforced and limits.processes is only RLIMIT_NPROC, shared by every process of the "
                "sandbox uid"
            )
    nproc = limits.processes
    if cgroup is not None and cgroup.pids_max is not None:
        nproc = cgroup.pids_max * NPROC_BACKSTOP_FACTOR
    address_space, address_space_fallback = plan_address_space(limits.address_space_bytes, cgroup)

    payload = {
        "kind": tb.kind,
        "name": tb.name,
        # base_dir: what relative paths in tool arguments are relative to (developer, lua): the agent file's
        # directory, the same base the agent file's own paths (FileSandbox ./src) were resolved against.
        "config": {
            **cfg,
            "policy": {
                "limits": limits.model_dump(),
                "env": env,
                "allowed_hosts": list(hosts),
                "base_dir": os.path.dirname(tb.agent_file),
            },
        },
        "workdir": workdir,
        "state_dir": tb_state,
        "limits": limits.model_dump(),
        "max_concurrent_calls": limits.max_concurrent_calls,
    }
    plan = ConfinementPlan(
        toolbox=tb.name,
        workdir=workdir,
        entry=WORKER_ENTRY,
        payload=payload,
        uid=uid,
        gid=gid,
        groups=groups,
        # With a uid per worker the host has no account for it: name it. Its group is its own (no other worker is
        # in it), so new files are readable by other workers where Landlock lets them meet and writable by none
        # of them (umask 002: the group bits matter only in a folder given to a shared group).
        account_name=f"agent-{tb.name}"[:32] if identity is not None and uid is not None else "",
        umask=0o002 if identity is not None else 0o077,
        fs_rules=tuple(rules),
        min_landlock_abi=min_abi,
        bridge=bool(hosts),
        tcp_connect_ports=ports.tcp_connect_ports if hosts else (),
        rlimits=Rlimits(
            address_space_bytes=address_space,
            cpu_seconds=limits.cpu_seconds,
            open_files=limits.open_files,
            file_size_bytes=limits.file_size_bytes,
            processes=nproc,
        ),
        env=env,
        xattrs=overrides.xattrs,
        audit_denials=policy.kernel_audit != "off",
    )
    report = {
        "uid": uid if uid is not None else os.geteuid(),
        "gid": gid if gid is not None else os.getegid(),
        "groups": list(groups),
        "limits": limits.model_dump(),
        "read_only": sorted(r.path for r in rules if r.mode == READ),
        "read_write": sorted(r.path for r in rules if r.mode == WRITE),
        "allowed_hosts": list(hosts),
        "cname_targets": list(cname_targets),
        "caps": caps_report(bounds, loopback=loopback, private_ranges=private, policy_key=policy_key),
        "credentials": grant.describe(),
        "tls_termination": terminator is not None,
        "xattrs": overrides.xattrs,
        "file_sandbox": fs_report,
        "network": (
            f"own namespace; egress only through the supervisor's proxy (127.0.0.1:{ports.proxy}) and DNS "
            f"stub (127.0.0.1:{ports.dns}) for the allowed hosts"
        )
        if hosts
        else "own namespace, loopback only, no egress",
        "landlock_min_abi": min_abi,
        "cgroup": cgroup.describe() if cgroup is not None else None,
        "limit_notes": explained_limits(
            pids_max=cgroup.pids_max if cgroup is not None else None,
            memory_bytes=cgroup.memory_bytes if cgroup is not None else None,
            cpu_seconds=limits.cpu_seconds,
            file_size_bytes=limits.file_size_bytes,
        ),
        "rlimit_nproc": nproc,
        "rlimit_as": address_space,
        "start": overrides.start,
        "spawn": overrides.spawn or policy.supervision.spawn,
    }
    view = _plan_view(
        policy.private_view,
        policy.strict,
        tb,
        kind.own_hostname(cfg),
        rules,
        warnings,
        host,
        made_at_start=(workdir, tb_state, runtime_dir, *grants.made_at_start),
        system=(*policy.system_paths, *python_runtime_paths(), runtime_dir),
    )
    if view is not None:
        plan = dataclasses.replace(plan, view=view[0])
    report["view"] = view[1] if view is not None else None
    allowed_tools = tuple(cfg.get(kind.allowed_tools) or ()) if kind.allowed_tools else ()
    return WorkerSpec(
        toolbox=tb.name,
        kind=tb.kind,
        argv=launcher_argv(python, runtime_dir),
        env=dict(WORKER_PROCESS_ENV),
        cwd="/",
        plan=plan,
        wall_time_s=limits.wall_time_s,
        shutdown_grace_s=policy.supervision.shutdown_grace_s,
        agent=tb.agent_slug,
        allowed_tools=allowed_tools,
        allowed_hosts=hosts,
        private_networks=private,
        loopback=loopback,
        policy_key=policy_key,
        cname_targets=cname_targets,
        credentials=grant.credentials,
        terminator=terminator,
        cgroup=cgroup,
        address_space_fallback=address_space_fallback,
        lazy=overrides.start == "lazy",
        tool_cache=tool_cache_path(state_dir, tb.agent_slug, tb.name) if overrides.start == "lazy" else None,
        fresh_exec=overrides.spawn == "launcher",
        warnings=warnings,
        report={**report, "warnings": warnings},
    )


def _plan_view(
    enabled: bool,
    strict: bool,
    tb: ToolboxConfig,
    own_hostname: bool,
    rules: list[FsRule],
    warnings: list[str],
    host: HostView,
    *,
    made_at_start: tuple[str, ...],
    system: tuple[str, ...] = (),
) -> tuple[ViewSpec, list[str]] | None:
    """The worker's private view (``policy.private_view``) and what ``check`` shows of it; ``None`` when off.

    The host name is the host's own only when ``own_hostname`` (the System toolbox's ``hostname`` capability). A rule on
    ``/`` cannot be shown as a view: refused under a strict policy, else the view is off with a warning. The
    launcher plans the view again from the host as it is then; ``made_at_start`` (work folders, staged code, clones)
    are shown as the folders they will be. ``system``: the paths no worker or agent file writes, shown with
    inodes of the worker's own (``ViewSpec.system_paths``). ``host`` answers the host's questions (``lstat``, mount
    points).
    """
    if not enabled:
        return None
    from sandbox import PathInfo, ViewError, plan_view, view_files

    def probe(path: str) -> PathInfo:
        found = host.probe(path)
        if found.kind == "missing" and any(m == path or m.startswith(path.rstrip("/") + "/") for m in made_at_start):
            return PathInfo("dir")
        return found

    spec = ViewSpec(
        hostname=(socket.gethostname() or NEUTRAL_HOSTNAME)[:64] if own_hostname else NEUTRAL_HOSTNAME,
        system_paths=tuple(dict.fromkeys(system)),
        directories=(os.path.dirname(tb.agent_file),),  # where execute-command runs (docs/FILES.md)
    )
    files = view_files(uid=0, gid=0, account="", home="", hostname=spec.hostname, resolv_conf=None)
    try:
        lines = plan_view(rules, spec, files, probe, host.mount_points(), locked=os.geteuid() != 0).describe()
    except ViewError as exc:
        message = f"toolbox {tb.name} (agent {tb.agent_slug}): {exc}"
        if strict:
            raise PolicyRefused(message + "; a strict policy needs the view (or private_view: false)") from exc
        warnings.append(message + "; this worker sees the host's tree")
        return None
    return spec, lines


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


def _prepare_worker_dirs(anchor: int, state_dir: str, spec: WorkerSpec) -> None:
    """The worker's work folder (with its ``tmp``) and state folder, under ``state_dir`` (open as ``anchor``),
    owned by the worker's uid with mode 0700; the folders above them root's, 0711. All through dir fds that never
    follow a link (``sandbox._dirfd``): a worker's link at ``tmp`` is replaced, never followed. A folder that
    belongs to another uid (the worker's uid changed) is handed over first, entry by entry, through fds.

    Raises:
        UnsafeTreeError: a folder cannot be prepared safely (the toolbox is then left out, see the caller).
    """
    uid, gid = spec.plan.uid, spec.plan.gid
    for path in (spec.plan.workdir, spec.plan.payload["state_dir"]):
        *above, name = os.path.relpath(path, state_dir).split(os.sep)
        parent = ensure_path(anchor, above, mode=0o711, where=os.path.join(state_dir, *above))
        try:
            if uid is not None and gid is not None:
                reown_tree(parent, name, uid, gid)  # a worker whose uid changed gets its own files back
            own = ensure_dir(parent, name, mode=0o700, uid=uid, gid=gid, where=path)
            try:
                if path == spec.plan.workdir:
                    os.close(ensure_dir(own, "tmp", mode=0o700, uid=uid, gid=gid, where=os.path.join(path, "tmp")))
            finally:
                os.close(own)
        finally:
            os.close(parent)


def _refuse_writable_agent_files(
    config: LoadedConfig,
    specs: list[WorkerSpec],
    origins: Mapping[tuple[str, str], ToolboxConfig],
    load_errors: list[dict[str, str]],
) -> list[str]:
    """The policy file and agent files some worker of ``specs`` can write (``_writable_agents.py``): under a strict
    policy the policy file refuses the start and an agent file every toolbox of its agent (removed from ``specs``,
    a load error each); otherwise each is a warning (returned)."""
    warnings: list[str] = []
    strict = config.policy.strict
    policy_writers = file_writers({"policy": config.policy_file}, specs).get("policy")
    if policy_writers:
        text = writers_text(config.policy_file, policy_writers, "policy file")
        if strict:
            raise PolicyRefused(text + ". A strict policy does not start while a worker can write it.")
        warnings.append(text + " (not refused: the policy is not strict)")
    files = {a.slug: a.file for a in config.agents}
    for slug, writers in file_writers(files, specs).items():
        text = writers_text(files[slug], writers)
        if not strict:
            warnings.append(f"agent {slug}: {text} (not refused: the policy is not strict)")
            continue
        refused = ToolboxRefused(text + ". A strict policy refuses every toolbox of the agent until then.")
        for spec in [s for s in specs if s.agent == slug]:
            specs.remove(spec)
            load_errors.append(_load_error(origins[(spec.agent, spec.toolbox)], "its agent file", refused))
    return warnings


def _check_toolbox_keys(config: LoadedConfig) -> None:
    """A bare ``toolboxes.<name>`` key of the policy may name the toolbox of one agent only: settings (hosts,
    limits, env) meant for one tenant must not reach another's toolbox of the same name. ``agent/name`` keys
    always say whose.

    Raises:
        ConfigError: a bare key matches toolboxes of two or more agents.
    """
    problems = []
    keys = [(key, f"$.toolboxes.{key}") for key in config.policy.toolboxes]
    keys += [
        (key, f"$.shared_groups[{i}].toolboxes")
        for i, g in enumerate(config.policy.shared_groups)
        for key in g.toolboxes
    ]
    for key, where in keys:
        if "/" in key:
            continue
        owners = sorted({tb.agent_slug for tb in config.toolboxes() if tb.name == key})
        if len(owners) > 1:
            problems.append(
                ConfigProblem(
                    config.policy_file,
                    where,
                    f"the key {key!r} matches the toolboxes {key!r} of agents {', '.join(owners)}: whose settings are "
                    "these?",
                    "one agent-qualified key per toolbox: " + ", ".join(f"{o}/{key}" for o in owners),
                )
            )
    if problems:
        raise ConfigError(problems)


@dataclass(frozen=True)
class StagedCode:
    """The worker code staged in a state directory (:func:`stage_code`), or why it could not be."""

    state_dir: str
    #: the staged folder (``None``: not staged, see ``error``)
    runtime_dir: str | None
    error: BaseException | None = None


def stage_code(config: LoadedConfig, *, state_dir: str | None = None) -> StagedCode:
    """Make the state directory (``state_dir``, default the policy's) and stage the worker code in it; the first
    step of :func:`compile_policy`, apart so that the zygote can be started on the staged code while the rest
    compiles (it needs nothing else). Raises ``OSError`` when the state directory cannot be made; code that
    cannot be staged is not raised: every toolbox's load error (``StagedCode.error``)."""
    state_dir = os.path.abspath(state_dir or config.policy.state_dir)
    os.close(open_anchor(state_dir, mode=0o711))
    try:
        return StagedCode(state_dir, stage_worker_code(state_dir))
    except Exception as exc:  # every toolbox's load error in compile_policy; the supervisor still starts
        return StagedCode(state_dir, None, exc)


def worker_modules(config: LoadedConfig) -> list[str]:
    """What the workers of ``config``'s toolboxes import first (their entry's module, their kind's package): what a
    zygote preloads for them (the same list as ``workers.preload_modules`` of the compiled specs)."""
    return preload_modules([(WORKER_ENTRY, tb.kind) for tb in config.toolboxes()])


def compile_policy(
    config: LoadedConfig,
    *,
    python: str | None = None,
    state_dir: str | None = None,
    prepare: bool = True,
    staged: StagedCode | None = None,
    command_values: Mapping[str, str] | None = None,
) -> CompiledPolicy:
    """Compile ``config``; with ``prepare`` also stage code (unless ``staged`` says where :func:`stage_code` staged
    it, for the same state directory), create folders and record new identities in the state dir's table. Raises
    :class:`PolicyRefused`, or ``ConfigError`` (a bare toolbox key of two agents, an agent slug bound to another
    file). ``command_values``: the outputs of the policy's credential commands (``run_credential_commands``, awaited
    first: this function runs no program); ``None`` without ``prepare`` (``check``) leaves them unrun."""
    policy = config.policy
    if prepare and command_values is None and any(c.source.command for c in policy.credentials.values()):
        raise ValueError("compile_policy(prepare=True) needs the credential commands' values (command_values)")
    python = python or sys.executable
    state_dir = os.path.abspath(state_dir or policy.state_dir)
    root = os.geteuid() == 0
    abi = landlock_abi()
    layout, cgroup_problem = read_layout()
    staging_error: BaseException | None = None
    if prepare:
        if staged is None:
            staged = stage_code(config, state_dir=state_dir)
        elif staged.state_dir != state_dir:
            raise ValueError(f"the code was staged for {staged.state_dir}, not {state_dir}")
        staging_error = staged.error
        runtime_dir = staged.runtime_dir or os.path.join(state_dir, "runtime", "<not staged>")
    else:
        runtime_dir = os.path.join(state_dir, "runtime", "<staged>")
    load_errors: list[dict[str, str]] = []
    origins: dict[tuple[str, str], ToolboxConfig] = {}  # (agent, toolbox) -> its config, for a later load error
    specs: list[WorkerSpec] = []
    warnings: list[str] = list(config.warnings)
    git_sources: list[GitSource] = []
    host = HostView()  # one set of answers about the host's paths for every toolbox (nothing is made until after)
    _check_toolbox_keys(config)
    if not root and config.toolboxes():
        warnings.append(ROOTLESS_WARNING.format(uid=os.geteuid()))
    credentials = load_credentials(policy.credentials, command_values=command_values)  # runs no program
    if not prepare:
        warnings += [
            f"credentials.{name}: its command source is not run by check (nothing starts); the supervisor runs it "
            "at start"
            for name, spec in policy.credentials.items()
            if spec.source.command is not None
        ]
    if prepare and any(t.tls_termination for t in policy.toolboxes.values()):
        write_ca_file(state_dir, supervisor_ca())  # before planning: the workers are granted the file
    ranged = root and policy.worker_uids is not None
    assigned = assign_identities(
        state_dir,
        {a.slug: agent_file_or_path(a.file) for a in config.agents},
        [f"{tb.agent_slug}/{tb.name}" for tb in config.toolboxes()],
        first=policy.worker_uids.first if ranged and policy.worker_uids else None,
        count=policy.worker_uids.count if policy.worker_uids else 1,
        persist=prepare,
        agent_prefix={a.slug: a.prefix for a in config.agents},
        registry=policy.worker_uids.registry if policy.worker_uids else None,
    )
    identities = assigned.workers
    warnings += assigned.notes
    reach = tenant_reach(policy, subagent_slugs(config))
    for agent in config.agents:
        for tb in agent.toolboxes():
            if tb.load_problem is not None:  # found in its agent file (an unset ${VAR}): no worker, the rest loads
                load_errors.append(
                    {
                        "toolbox": tb.name,
                        "agent": tb.agent_slug,
                        "kind": tb.kind,
                        "source": f"{display_path(tb.agent_file)} {tb.source}",
                        "message": f"toolbox {tb.name} (agent {tb.agent_slug}) did not load: {tb.load_problem}. "
                        "It serves nothing until then.",
                    }
                )
                continue
            if staging_error is not None:
                load_errors.append(_load_error(tb, "staging the worker code", staging_error))
                continue
            try:
                spec = plan_worker(
                    config,
                    tb,
                    python=python,
                    runtime_dir=runtime_dir,
                    state_dir=state_dir,
                    running_as_root=root,
                    kernel_abi=abi,
                    cgroup_layout=layout,
                    cgroup_problem=cgroup_problem,
                    identity=identities.get(f"{tb.agent_slug}/{tb.name}"),
                    credentials=credentials,
                    host=host,
                    bounds=agent_bounds(policy, tb.agent_slug, reach),
                )
            except ToolboxRefused as exc:  # what only this toolbox asks past the policy: its load error
                load_errors.append(_load_error(tb, "the policy's ceiling", exc))
                continue
            except PolicyRefused:
                raise
            except Exception as exc:  # a bug or a surprise of this machine: this toolbox's load error only
                load_errors.append(_load_error(tb, "compile", exc))
                continue
            origins[(spec.agent, spec.toolbox)] = tb
            if f"{tb.agent_slug}/{tb.name}" in identities:
                spec.report["uid_registry"] = assigned.registry  # the uid is this toolbox's on the whole host
            kind = kind_plan(tb.kind)
            spec.warnings += kind.check_warnings(
                tb,
                spec.plan.uid if spec.plan.uid is not None else os.geteuid(),
                spec.plan.gid if spec.plan.gid is not None else os.getegid(),
                spec.plan.groups,
            )
            specs.append(spec)
            warnings += spec.warnings
            git_sources += kind.git_sources(tb, state_dir)
    warnings += _refuse_writable_agent_files(config, specs, origins, load_errors)
    if root and specs:
        uid, gid = specs[0].plan.uid or policy.sandbox_uid, specs[0].plan.gid or policy.sandbox_gid
        for path in (os.path.realpath(python), runtime_dir if prepare else None):
            if path and not uid_can_read(path, uid, gid):
                raise PolicyRefused(
                    f"the sandbox uid {uid} cannot read {path}, so no worker could start. Run the supervisor "
                    "with an interpreter every user can read, such as the venv scripts/setup makes "
                    "(/opt/agents-supervise/venv/bin/agents-supervise)."
                )
    if prepare:
        anchor = open_anchor(state_dir)
        try:
            for spec in list(specs):
                try:
                    _prepare_worker_dirs(anchor, state_dir, spec)
                except Exception as exc:  # unsafe or impossible: this toolbox's load error, the others start
                    load_errors.append(
                        _load_error(origins[(spec.agent, spec.toolbox)], "its work and state folders", exc)
                    )
                    specs.remove(spec)
        finally:
            os.close(anchor)
    git_sources = [g for g in git_sources if (g.agent, g.toolbox) in {(s.agent, s.toolbox) for s in specs}]
    trace_path = policy.trace.path or os.path.join(state_dir, "trace.jsonl")
    if trace_path == os.path.join(policy.state_dir, "trace.jsonl"):
        trace_path = os.path.join(state_dir, "trace.jsonl")  # follows a state_dir override
    return CompiledPolicy(
        config=config,
        specs=specs,
        state_dir=state_dir,
        trace_path=trace_path,
        max_call_depth=policy.max_call_depth,
        session_max_calls=policy.sessions.max_calls,
        session_max_concurrent=policy.sessions.max_concurrent_calls,
        media_limits=policy.context.media_limits(),
        supervision=policy.supervision,
        landlock_abi=abi,
        parallel_starts=policy.supervision.parallel_starts or STARTS_PER_CPU * (os.cpu_count() or 1),
        zygote_parallel_starts=policy.supervision.parallel_starts or ZYGOTE_STARTS_PER_CPU * (os.cpu_count() or 1),
        warnings=warnings,
        git_sources=git_sources,
        load_errors=load_errors,
        runtime_dir=runtime_dir if prepare and staging_error is None else None,
        python=python,
        uid_claim=(assigned.registry, assigned.state_id)
        if prepare and assigned.registry is not None and assigned.state_id is not None
        else None,
    )
