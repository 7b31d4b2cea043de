"""Reloading the policy of a running supervisor (``SIGHUP``): what changes, and the change made.

:func:`plan_reload` (pure) compares the toolboxes of the running policy with those of the newly compiled one, each
identified by (agent, toolbox) and judged by its whole compiled spec (rules, limits, env, uid, hosts, credentials,
its agent file's settings of it): a toolbox whose spec is the same *keeps* its worker (its calls, sessions and
state go on untouched); one whose spec differs is *restarted* (its worker stopped, a new one started with the new
spec); one no longer in the policy is *stopped*; a new one is *started*. A toolbox that could not load before is
started again, as if changed: a reload is how an operator retries it after fixing the cause.

:func:`reload_supervisor` loads and compiles the policy again (the same files and command-line overrides as at
start); a policy that does not load or compile (a syntax error, a refused setting, a file that is gone) changes
nothing: the old policy keeps serving and the outcome says why. Otherwise the plan is carried out, the tool lists
are rebuilt (sessions get ``notifications/tools/list_changed`` when theirs changed), and the outcome names what
was kept, restarted, stopped and started. Either way one ``policy_reload`` trace record says what happened.

Settings read once at start are not changed by a reload (``state_dir``, ``trace``, ``sessions``, ``frontends``,
``tenants``, ``oauth``): the outcome lists those that differ, as taking effect at the next restart.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import trio

from supervisor.calls import SessionLimits
from supervisor.config import expand_agents, load_config
from supervisor.plan import compile_policy, prepare_git_sources

if TYPE_CHECKING:
    from collections.abc import Mapping

    from supervisor.workers import ToolboxRunner, WorkerSpec

__all__ = ["RESTART_ONLY", "ReloadOutcome", "ReloadPlan", "plan_reload", "reload_supervisor", "spec_fingerprint"]

#: policy sections a running supervisor reads once: a reload that changes them says so and leaves them
RESTART_ONLY = ("state_dir", "trace", "sessions", "frontends", "tenants", "oauth")

Key = tuple[str, str]


def spec_fingerprint(spec: WorkerSpec) -> str:
    """What decides whether a toolbox's worker can be kept: its whole compiled spec (as compiled, before the
    supervisor drops failed git sources from it)."""
    return repr(spec)


@dataclass(frozen=True)
class ReloadPlan:
    """What a reload does with each toolbox, as ``(agent, toolbox)`` keys in the new policy's load order."""

    kept: tuple[Key, ...] = ()
    restarted: tuple[Key, ...] = ()
    stopped: tuple[Key, ...] = ()
    started: tuple[Key, ...] = ()


def plan_reload(running: Mapping[Key, str], failed: set[Key], new: Mapping[Key, str]) -> ReloadPlan:
    """Compare the running toolboxes' fingerprints (``running``; ``failed``: those that could not load) with the
    new policy's (``new``, in load order). Pure."""
    kept = tuple(k for k, fp in new.items() if running.get(k) == fp and k not in failed)
    restarted = tuple(k for k in new if k in running and k not in kept)
    started = tuple(k for k in new if k not in running)
    stopped = tuple(k for k in running if k not in new)
    return ReloadPlan(kept, restarted, stopped, started)


@dataclass
class ReloadOutcome:
    """What a reload did: ``refused`` (the reason, nothing changed) or the plan carried out."""

    refused: str | None = None
    plan: ReloadPlan = field(default_factory=ReloadPlan)
    #: policy sections that changed but take effect only at a restart (:data:`RESTART_ONLY`)
    not_applied: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """One line for the operator (stderr, the log)."""
        if self.refused is not None:
            return f"the policy was not reloaded, the running one stays: {self.refused}"
        parts = []
        for what, keys in (
            ("kept", self.plan.kept),
            ("restarted", self.plan.restarted),
            ("stopped", self.plan.stopped),
            ("started", self.plan.started),
        ):
            if keys:
                parts.append(f"{what} " + ", ".join(f"{a}/{t}" for a, t in keys))
        line = "the policy was reloaded: " + ("; ".join(parts) or "no toolboxes")
        if self.not_applied:
            line += f" (changed, applied at the next restart: {', '.join(self.not_applied)})"
        return line


def failed_to_load(sup: Any) -> set[Key]:
    """The (agent, toolbox) of every toolbox that could not load (a reload starts them again)."""
    return {(e.get("agent", ""), e["toolbox"]) for e in sup.toolbox_load_errors if e.get("toolbox")} | set(
        sup.undescribable
    )


def adopt_policy(sup: Any, tree: Any, compiled: Any) -> None:
    """Give ``sup`` the settings of a reloaded policy (the runners are the caller's to change)."""
    sup.compiled = compiled
    sup.config = compiled.config
    policy = compiled.config.policy
    sup.portal.max_call_depth = compiled.max_call_depth
    sup.portal.session_limits = SessionLimits(compiled.session_max_calls, compiled.session_max_concurrent)
    sup.attachments.limits = dict(compiled.media_limits)
    sup.frontends.tree = tree
    if sup.agents is not None:
        sup.agents.tree, sup.agents.bounds, sup.agents.model_keys = tree, policy.agent_loop, policy.model_keys
        sup.agents.max_image_bytes = compiled.media_limits["images"]
        sup.agents.forget_runners()
        sup.agent_runners = sup.agents.runners()
    sup.agent_load_errors = tree.load_errors
    sup.toolbox_load_errors = list(compiled.load_errors)
    sup.undescribable = set()
    sup.fingerprints = {(s.agent, s.toolbox): spec_fingerprint(s) for s in compiled.specs}
    sup.set_auto_enabled()
    for error in [*sup.agent_load_errors, *sup.toolbox_load_errors]:
        sup.trace.record("load_error", **error)


def _changed_sections(old: Any, new: Any) -> list[str]:
    return [name for name in RESTART_ONLY if getattr(old, name, None) != getattr(new, name, None)]


def _compile(source: tuple[str, list[str], str | None]) -> Any:
    """Load and compile the policy (off the trio thread: files, the identity table, folders), in the state
    directory in use (a reload never moves it, see :data:`RESTART_ONLY`)."""
    path, agents, state_dir = source
    tree = expand_agents(load_config(path, list(agents)))
    compiled = compile_policy(tree.config, python=sys.executable, state_dir=state_dir)
    return tree, compiled


async def reload_supervisor(sup: Any, nursery: trio.Nursery) -> ReloadOutcome:
    """Reload the policy of ``sup`` (a :class:`~supervisor._supervisor.Supervisor`, which imports this module; see
    the module docstring); its runners are started in ``nursery`` (the one :meth:`Supervisor.open` holds). Never
    raises for a bad policy: the outcome says why it was refused."""
    try:
        tree, compiled = await trio.to_thread.run_sync(_compile, sup.reload_source)
    except Exception as exc:  # ConfigError, PolicyRefused, OSError, a bug: the running policy stays
        leaf = exc.exceptions[0] if isinstance(exc, BaseExceptionGroup) else exc
        outcome = ReloadOutcome(refused=f"{type(leaf).__name__}: {leaf}"[:4000])
        sup.trace.record("policy_reload", status="refused", policy=sup.reload_source[0], reason=outcome.refused)
        return outcome
    new_specs = {(s.agent, s.toolbox): s for s in compiled.specs}
    plan = plan_reload(sup.fingerprints, failed_to_load(sup), {k: spec_fingerprint(s) for k, s in new_specs.items()})
    outcome = ReloadOutcome(
        plan=plan,
        warnings=list(compiled.warnings),
        not_applied=_changed_sections(sup.config.policy, compiled.config.policy),
    )
    by_key = {r.key: r for r in sup.runners}
    for key in (*plan.restarted, *plan.stopped):  # a call that comes meanwhile is answered at once, never held
        why = "is being restarted with its new settings" if key in plan.restarted else "was removed from the policy"
        by_key[key].fail_to_load(
            f"toolbox {key[1]} of agent {key[0]} {why} (a policy reload); call it again once the tool list changed"
        )
    with trio.CancelScope(shield=True):
        async with trio.open_nursery() as stopping:
            for key in (*plan.restarted, *plan.stopped):
                stopping.start_soon(by_key[key].stop)
    fresh = {*plan.restarted, *plan.started}
    adopt_policy(sup, tree, replace(compiled, trace_path=sup.compiled.trace_path))
    starting = replace(
        compiled,
        specs=[new_specs[k] for k in fresh],
        git_sources=[g for g in compiled.git_sources if (g.agent, g.toolbox) in fresh],
    )
    sup.source_errors = [e for e in sup.source_errors if (e.get("agent"), e.get("toolbox")) in plan.kept]
    sup.source_errors += await prepare_git_sources(starting, sup.trace)
    runners: list[ToolboxRunner] = []
    for spec in compiled.specs:
        key = (spec.agent, spec.toolbox)
        runners.append(by_key[key] if key in plan.kept else sup.new_runner(spec))
    sup.runners = runners
    await sup.start_runners(nursery, [r for r in runners if r.key in fresh])
    sup.rebuild_tools()
    sup.trace.record(
        "policy_reload",
        status="applied",
        policy=sup.reload_source[0],
        **{
            what: [f"{a}/{t}" for a, t in keys]
            for what, keys in (
                ("kept", plan.kept),
                ("restarted", plan.restarted),
                ("stopped", plan.stopped),
                ("started", plan.started),
            )
        },
        not_applied=outcome.not_applied,
        warnings=outcome.warnings[:50],
    )
    return outcome
