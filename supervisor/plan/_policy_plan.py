"""A loaded policy planned: one worker spec per toolbox and what applying the plan will do (pure: nothing is made,
changed or run; everything known of the host comes from a :class:`~._host_facts.HostFacts`).

:func:`plan_policy` checks the policy's keys, plans the identities (``_identities.py``: the table and the registry
as read, asked again when the plan is applied), plans each toolbox's worker (``_worker_plan.py``), then the checks
of the whole (``_policy_checks.py``: agent files a worker can write, an interpreter the workers cannot read).
A toolbox that cannot be planned (past a ceiling, or an unexpected error: a bug or a surprise of this machine) is
that toolbox's load error and the others are planned; what the policy cannot hold raises.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from supervisor._errors import PolicyRefused
from supervisor.config import ConfigError, display_path

from ._ceilings import ToolboxRefused, agent_bounds, subagent_slugs, tenant_reach
from ._compiled import ROOTLESS_WARNING, STARTS_PER_CPU, ZYGOTE_STARTS_PER_CPU, CompiledPolicy, StagedCode, load_error
from ._identities import IdentityRequest
from ._kinds import kind_plan
from ._policy_checks import check_toolbox_keys, refuse_writable_agent_files, unreadable_runtime
from ._worker_plan import PlanInputs, plan_worker

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sandbox import SupervisorCA
    from supervisor.config import LoadedConfig, LoadError, ToolboxConfig
    from supervisor.workers import WorkerSpec

    from ._host_facts import HostFacts
    from ._identities import WorkerIdentity
    from ._skill_sources import GitSource

__all__ = ["PolicyPlan", "identity_request", "plan_policy"]


@dataclass(frozen=True)
class PolicyPlan:
    """A policy planned (:func:`plan_policy`): what the supervisor will run, and what ``_apply.apply_plan`` must do
    first (record the identities, write the CA, make the workers' folders)."""

    #: the specs, warnings and load errors as planned (applying may add load errors: folders that cannot be made)
    compiled: CompiledPolicy
    facts: HostFacts
    #: what the identity table and the registry are asked when the plan is applied
    identities: IdentityRequest
    #: the identities the specs were planned with (``slug/toolbox`` -> identity); applying must give the same
    planned_identities: Mapping[str, WorkerIdentity]
    #: each spec's toolbox, by ``(agent, toolbox)`` (for a load error found when applying)
    origins: Mapping[tuple[str, str], ToolboxConfig] = field(default_factory=dict)

    @property
    def ca(self) -> SupervisorCA | None:
        """The CA whose certificate the workers read (``None``: no worker terminates TLS)."""
        return self.facts.ca if any(s.terminator is not None for s in self.compiled.specs) else None


def identity_request(config: LoadedConfig, facts: HostFacts) -> IdentityRequest:
    """What ``config``'s plan asks of the identity table: its agents bound to their files, and, for a root
    supervisor with ``worker_uids``, a uid for each toolbox from the range."""
    uids = config.policy.worker_uids
    ranged = facts.root and uids is not None
    return IdentityRequest(
        facts.state_dir,
        dict(facts.agent_files),
        tuple(f"{tb.agent_slug}/{tb.name}" for tb in config.toolboxes()),
        uids.first if ranged and uids is not None else None,
        uids.count if uids is not None else 1,
        {a.slug: a.prefix for a in config.agents},
        facts.registry if ranged else None,
    )


@dataclass
class _Toolboxes:
    specs: list[WorkerSpec] = field(default_factory=list)
    load_errors: list[LoadError] = field(default_factory=list)
    origins: dict[tuple[str, str], ToolboxConfig] = field(default_factory=dict)
    git_sources: list[GitSource] = field(default_factory=list)


def _problem_error(tb: ToolboxConfig) -> LoadError:
    """The load error of a toolbox its agent file left unloadable (an unset ``${VAR}``)."""
    return {
        "toolbox": tb.name,
        "agent": tb.agent_slug,
        "kind": tb.kind,
        "source": f"{display_path(tb.agent_file)} {tb.source}",
        "message": f"toolbox {tb.name} (agent {tb.agent_slug}) did not load: {tb.load_problem}. "
        "It serves nothing until then.",
    }


def _plan_toolboxes(
    config: LoadedConfig,
    inputs: PlanInputs,
    identities: Mapping[str, WorkerIdentity],
    staging_error: BaseException | None,
) -> _Toolboxes:
    """Each toolbox's worker planned, or its load error (module docstring)."""
    policy, facts = config.policy, inputs.facts
    out = _Toolboxes()
    reach = tenant_reach(policy, subagent_slugs(config))
    for agent in config.agents:
        for tb in agent.toolboxes():
            if tb.load_problem is not None:  # found in its agent file (an unset ${VAR}): no worker, the rest loads
                out.load_errors.append(_problem_error(tb))
                continue
            if staging_error is not None:
                out.load_errors.append(load_error(tb, "staging the worker code", staging_error))
                continue
            key = f"{tb.agent_slug}/{tb.name}"
            try:
                spec = plan_worker(
                    config, tb, inputs, identity=identities.get(key), bounds=agent_bounds(policy, tb.agent_slug, reach)
                )
            except ToolboxRefused as exc:  # what only this toolbox asks past the policy: its load error
                out.load_errors.append(load_error(tb, "the policy's ceiling", exc))
                continue
            except PolicyRefused:
                raise
            except Exception as exc:  # a bug or a surprise of this machine: this toolbox's load error only
                out.load_errors.append(load_error(tb, "compile", exc))
                continue
            out.origins[(spec.agent, spec.toolbox)] = tb
            if key in identities:
                spec.report["uid_registry"] = facts.registry  # the uid is this toolbox's on the whole host
            kind = kind_plan(tb.kind)
            spec.warnings += kind.check_warnings(
                tb,
                spec.plan.uid if spec.plan.uid is not None else facts.euid,
                spec.plan.gid if spec.plan.gid is not None else facts.egid,
                spec.plan.groups,
            )
            out.specs.append(spec)
            out.git_sources += kind.git_sources(tb, facts.state_dir)
    return out


def _runtime_dir(state_dir: str, staged: StagedCode | None) -> str:
    if staged is None:
        return os.path.join(state_dir, "runtime", "<staged>")  # check: nothing staged, the folder it will be
    if staged.state_dir != state_dir:
        raise ValueError(f"the code was staged for {staged.state_dir}, not {state_dir}")
    return staged.runtime_dir or os.path.join(state_dir, "runtime", "<not staged>")


def plan_policy(
    config: LoadedConfig, facts: HostFacts, *, python: str | None = None, staged: StagedCode | None = None
) -> PolicyPlan:
    """Plan ``config`` on the host ``facts`` describes (module docstring). ``python``: the interpreter every
    launcher runs (default this one); ``staged``: the worker code staged for ``facts.state_dir``
    (``_compile.stage_code``; ``None``: nothing is staged, as in ``check``).

    Raises:
        ConfigError: a bare toolbox key of two agents, an agent slug bound to another file.
        PolicyRefused: what the policy cannot hold on this host (``TooManyWorkers`` among them).
    """
    policy = config.policy
    python = python or sys.executable
    runtime_dir = _runtime_dir(facts.state_dir, staged)
    check_toolbox_keys(config)
    warnings: list[str] = list(config.warnings)
    if not facts.root and config.toolboxes():
        warnings.append(ROOTLESS_WARNING.format(uid=facts.euid))
    if not facts.commands_run:
        warnings += [
            f"credentials.{name}: its command source is not run by check (nothing starts); the supervisor runs it "
            "at start"
            for name, spec in policy.credentials.items()
            if spec.source.command is not None
        ]
    request = identity_request(config, facts)
    identities = request.plan(facts.identities.table, facts.identities.registry)
    if identities.conflicts:
        raise ConfigError(identities.conflicts)
    warnings += identities.notes
    planned = _plan_toolboxes(
        config, PlanInputs(facts, python, runtime_dir), identities.workers, staged.error if staged else None
    )
    warnings += [w for s in planned.specs for w in s.warnings]
    specs, refused, writable = refuse_writable_agent_files(config, planned.specs, planned.origins)
    warnings += writable
    if facts.root and specs:
        uid, gid = specs[0].plan.uid or policy.sandbox_uid, specs[0].plan.gid or policy.sandbox_gid
        runtime = [os.path.realpath(python), *([staged.runtime_dir] if staged and staged.runtime_dir else [])]
        problem = unreadable_runtime(runtime, uid, gid, facts.paths)
        if problem is not None:
            raise PolicyRefused(problem)
    kept = {(s.agent, s.toolbox) for s in specs}
    trace_path = policy.trace.path or os.path.join(facts.state_dir, "trace.jsonl")
    if trace_path == os.path.join(policy.state_dir, "trace.jsonl"):
        trace_path = os.path.join(facts.state_dir, "trace.jsonl")  # follows a state_dir override
    cpus = facts.cpu_count
    compiled = CompiledPolicy(
        config=config,
        specs=specs,
        state_dir=facts.state_dir,
        trace_path=trace_path,
        max_call_depth=policy.max_call_depth,
        session_max_calls=policy.sessions.max_calls,
        session_max_concurrent=policy.sessions.max_concurrent_calls,
        media_limits=policy.context.media_limits(),
        supervision=policy.supervision,
        landlock_abi=facts.landlock_abi,
        parallel_starts=policy.supervision.parallel_starts or STARTS_PER_CPU * cpus,
        zygote_parallel_starts=policy.supervision.parallel_starts or ZYGOTE_STARTS_PER_CPU * cpus,
        warnings=warnings,
        git_sources=[g for g in planned.git_sources if (g.agent, g.toolbox) in kept],
        load_errors=[*planned.load_errors, *refused],
        runtime_dir=staged.runtime_dir if staged is not None else None,
        python=python,
    )
    origins = {k: v for k, v in planned.origins.items() if k in kept}
    return PolicyPlan(compiled, facts, request, identities.workers, origins)
