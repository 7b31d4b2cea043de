"""One toolbox's worker planned: its :class:`~supervisor.workers.WorkerSpec` from the policy, the toolbox and the
host's facts (pure: nothing is made, changed or run).

:func:`plan_worker` runs the steps in order, one module each, and assembles what they decided:

1. files (``_worker_files.py``): the Landlock rules and the worker's own folders; first, because the kind's grants
   rewrite the worker config the later steps read (a skills toolbox's clones);
2. network (``_worker_network.py``): hosts, ceilings, the bridge, credentials, TLS termination (its CA file is a
   rule too);
3. account and limits (``_worker_limits.py``): uid, gid and groups; the Landlock ABI, cgroup and rlimits;
4. the private view (``_worker_view.py``), planned from the final rules;
5. the worker's environment, its payload (what ``toolboxes._worker`` reads), its ``ConfinementPlan`` (what the
   launcher enforces) and ``check``'s report.

A step raises :class:`~supervisor._errors.PolicyRefused` for what the policy cannot hold (nothing starts), or its
:class:`~._ceilings.ToolboxRefused` for what only this toolbox asks past the policy (its load error).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sandbox import READ, WRITE, ConfinementPlan, Rlimits
from supervisor.workers import WorkerSpec, explained_limits, launcher_argv, tool_cache_path

from ._kinds import kind_plan
from ._worker_files import plan_files
from ._worker_limits import plan_account, plan_limits
from ._worker_network import plan_network
from ._worker_view import plan_worker_view

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from supervisor.config import LoadedConfig, Policy, ToolboxConfig

    from ._ceilings import Bound
    from ._host_facts import HostFacts
    from ._identities import WorkerIdentity
    from ._worker_files import WorkerFiles
    from ._worker_limits import WorkerAccount, WorkerLimits
    from ._worker_network import WorkerNetwork

__all__ = ["WORKER_ENTRY", "WORKER_PROCESS_ENV", "PlanInputs", "plan_worker", "worker_env"]

#: What every worker's process runs after its confinement (``module:function``)
WORKER_ENTRY = "toolboxes._worker:main"
#: The environment of every worker's launcher (or zygote) process; the worker's own is its plan's ``env``
WORKER_PROCESS_ENV = {"LANG": "C.UTF-8", "MALLOC_ARENA_MAX": "2"}


@dataclass(frozen=True)
class PlanInputs:
    """What every toolbox of one plan is planned from besides the policy: the host's facts, the interpreter every
    launcher runs, and the staged worker code (its folder; a placeholder when nothing is staged, as in ``check``)."""

    facts: HostFacts
    python: str
    runtime_dir: str


def worker_env(policy: Policy, tb: ToolboxConfig, workdir: str, network_env: Mapping[str, str]) -> dict[str, str]:
    """The worker's environment: the policy's for it, ``HOME`` its work folder, ``TMPDIR`` its ``tmp``, ``SHELL``
    unless the policy sets one, then what its network adds (proxy, credential and CA variables)."""
    env = policy.worker_env_for(tb.name, tb.agent_slug)
    env.update({"HOME": workdir, "TMPDIR": os.path.join(workdir, "tmp")})
    # bash sets SHELL from the account database when it is missing: an NSS lookup (nscd socket, nsswitch.conf,
    # passwd) on every start of every script, about 60 us here. A policy's own SHELL wins.
    env.setdefault("SHELL", "/bin/sh")
    env.update(network_env)
    return env


def _payload(
    tb: ToolboxConfig, policy: Policy, files: WorkerFiles, env: dict[str, str], net: WorkerNetwork
) -> dict[str, Any]:
    """What the worker's own code reads (``toolboxes._worker``): its kind, config with the policy's extras, folders
    and limits."""
    limits = policy.effective_limits(tb.name, tb.agent_slug)
    return {
        "kind": tb.kind,
        "name": tb.name,
        # base_dir: what relative paths in tool arguments are relative to (developer, lua): the agent file's
        # directory, the same base the agent file's own paths (FileSandbox ./src) were resolved against.
        "config": {
            **files.cfg,
            "policy": {
                "limits": limits.model_dump(),
                "env": env,
                "allowed_hosts": list(net.hosts),
                "base_dir": os.path.dirname(tb.agent_file),
                # the ceilings' HTTP methods (OpenAPI, PostgREST): tools of other methods are not offered
                "http_methods": net.http_methods,
            },
        },
        "workdir": files.workdir,
        "state_dir": files.state,
        "limits": limits.model_dump(),
        "max_concurrent_calls": limits.max_concurrent_calls,
    }


def _report(
    tb: ToolboxConfig,
    policy: Policy,
    facts: HostFacts,
    account: WorkerAccount,
    files: WorkerFiles,
    network: WorkerNetwork,
    limits: WorkerLimits,
) -> dict[str, Any]:
    """What ``check`` shows of the worker (``frontends/_check_*.py`` read it)."""
    rules = [*files.rules, *network.rules]
    own = policy.effective_limits(tb.name, tb.agent_slug)
    cgroup = limits.cgroup
    ports = network.ports
    return {
        "uid": account.uid if account.uid is not None else facts.euid,
        "gid": account.gid if account.gid is not None else facts.egid,
        "groups": list(account.groups),
        "limits": own.model_dump(),
        "read_only": sorted(r.path for r in rules if r.mode == READ),
        "read_write": sorted(r.path for r in rules if r.mode == WRITE),
        "allowed_hosts": list(network.hosts),
        "cname_targets": list(network.cname_targets),
        "caps": network.caps,
        "credentials": network.grant.describe(),
        "tls_termination": network.terminator is not None,
        "xattrs": policy.toolbox_policy(tb.name, tb.agent_slug).xattrs,
        "file_sandbox": files.file_sandbox,
        "network": (
            f"own namespace; egress only through the supervisor's proxy (127.0.0.1:{ports.proxy}) and DNS "
            f"stub (127.0.0.1:{ports.dns}) for the allowed hosts"
        )
        if network.bridge
        else "own namespace, loopback only, no egress",
        "landlock_min_abi": limits.min_abi,
        "cgroup": cgroup.describe() if cgroup is not None else None,
        "limit_notes": explained_limits(
            pids_max=cgroup.pids_max if cgroup is not None else None,
            memory_bytes=cgroup.memory_bytes if cgroup is not None else None,
            cpu_seconds=own.cpu_seconds,
            file_size_bytes=own.file_size_bytes,
        ),
        "rlimit_nproc": limits.nproc,
        "rlimit_as": limits.address_space,
        "start": policy.toolbox_policy(tb.name, tb.agent_slug).start,
        "spawn": policy.toolbox_policy(tb.name, tb.agent_slug).spawn or policy.supervision.spawn,
    }


def plan_worker(
    config: LoadedConfig,
    tb: ToolboxConfig,
    inputs: PlanInputs,
    *,
    identity: WorkerIdentity | None = None,
    bounds: Sequence[Bound] = (),
) -> WorkerSpec:
    """Decide what the worker of ``tb`` gets (module docstring). ``identity``: the uid and gid of its own (the
    identity table's, ``_identities.py``; ``None``: the policy's ``sandbox_uid`` and ``sandbox_gid``); ``bounds``:
    the ceilings that bound its agent (``_ceilings.agent_bounds``).

    Raises:
        PolicyRefused: what the policy cannot hold on this host (nothing starts).
        ToolboxRefused: what only this toolbox asks past the policy (its load error).
    """
    policy, facts = config.policy, inputs.facts
    overrides = policy.toolbox_policy(tb.name, tb.agent_slug)
    own = policy.effective_limits(tb.name, tb.agent_slug)
    kind = kind_plan(tb.kind)
    files = plan_files(
        policy,
        tb,
        kind,
        state_dir=facts.state_dir,
        runtime_dir=inputs.runtime_dir,
        runtime_paths=facts.runtime_paths,
        host=facts.paths,
        root=facts.root,
        bounds=bounds,
    )
    network = plan_network(
        policy,
        tb,
        kind,
        files.cfg,
        state_dir=facts.state_dir,
        credentials=facts.credentials,
        bounds=bounds,
        ca=facts.ca,
    )
    account = plan_account(policy, tb, identity, root=facts.root)
    limits = plan_limits(
        policy,
        tb,
        kernel_abi=facts.landlock_abi,
        cgroup_layout=facts.cgroup_layout,
        cgroup_problem=facts.cgroup_problem,
    )
    rules = [*files.rules, *network.rules]
    warnings = [*files.warnings, *network.warnings, *limits.warnings]
    env = worker_env(policy, tb, files.workdir, network.env)
    plan = ConfinementPlan(
        toolbox=tb.name,
        workdir=files.workdir,
        entry=WORKER_ENTRY,
        payload=_payload(tb, policy, files, env, network),
        uid=account.uid,
        gid=account.gid,
        groups=account.groups,
        # With a uid per worker the host has no account for it: name it. Its group is its own (no other worker is
        # in it), so new files are readable by other workers where Landlock lets them meet and writable by none
        # of them (umask 002: the group bits matter only in a folder given to a shared group).
        account_name=f"agent-{tb.name}"[:32] if account.own and account.uid is not None else "",
        umask=0o002 if account.own else 0o077,
        fs_rules=tuple(rules),
        min_landlock_abi=limits.min_abi,
        bridge=network.bridge,
        tcp_connect_ports=network.ports.tcp_connect_ports if network.bridge else (),
        rlimits=Rlimits(
            address_space_bytes=limits.address_space,
            cpu_seconds=own.cpu_seconds,
            open_files=own.open_files,
            file_size_bytes=own.file_size_bytes,
            processes=limits.nproc,
        ),
        env=env,
        xattrs=overrides.xattrs,
        audit_denials=policy.kernel_audit != "off",
    )
    report = _report(tb, policy, facts, account, files, network, limits)
    view = (
        plan_worker_view(
            tb,
            rules,
            facts.paths,
            strict=policy.strict,
            hostname=facts.hostname if kind.own_hostname(files.cfg) else None,
            made_at_start=files.made_at_start,
            made_files=[r.path for r in network.rules],
            system=(*policy.system_paths, *facts.runtime_paths, inputs.runtime_dir),
            root=facts.root,
            warnings=warnings,
        )
        if policy.private_view
        else None
    )
    if view is not None:
        plan = dataclasses.replace(plan, view=view[0])
    report["view"] = view[1] if view is not None else None
    allowed_tools = tuple(files.cfg.get(kind.allowed_tools) or ()) if kind.allowed_tools else ()
    return WorkerSpec(
        toolbox=tb.name,
        kind=tb.kind,
        argv=launcher_argv(inputs.python, inputs.runtime_dir),
        env=dict(WORKER_PROCESS_ENV),
        cwd="/",
        plan=plan,
        wall_time_s=own.wall_time_s,
        shutdown_grace_s=policy.supervision.shutdown_grace_s,
        agent=tb.agent_slug,
        allowed_tools=allowed_tools,
        allowed_hosts=network.hosts,
        private_networks=network.private_ranges,
        loopback=network.loopback,
        policy_key=network.policy_key,
        cname_targets=network.cname_targets,
        credentials=network.grant.credentials,
        terminator=network.terminator,
        cgroup=limits.cgroup,
        address_space_fallback=limits.address_space_fallback,
        lazy=overrides.start == "lazy",
        tool_cache=tool_cache_path(facts.state_dir, tb.agent_slug, tb.name) if overrides.start == "lazy" else None,
        fresh_exec=overrides.spawn == "launcher",
        warnings=warnings,
        report={**report, "warnings": warnings},
    )
