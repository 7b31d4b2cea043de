"""Reloading the policy of a running supervisor (``SIGHUP``): every section, prepared whole, then swapped.

A reload goes in two steps, so that nothing is ever half-applied:

1. **Prepare** (nothing that serves changes yet). The policy is loaded and compiled again (the same files and
   command-line overrides as at start), off the trio thread. ``state_dir`` must be the one in use (see
   :data:`STATE_DIR_FIXED`). Then every section that needs something made is made: the new trace file is opened
   (``trace.path``), a changed OpenTelemetry export is built (``trace.otel``), and each registered
   :class:`ReloadParticipant` (the HTTP frontend: its tenants, tokens, OAuth key set, TLS files, a new listener)
   prepares its part. Any failure (a syntax error, a refused setting, a key set that cannot be fetched, an address
   that cannot be bound) gives back what was prepared (:meth:`PreparedChange.abort`) and refuses the reload: the
   old policy keeps serving, whole, and the outcome says why. (Compiling makes the work and state folders of new
   toolboxes, as at start; nothing else is left behind by a refused reload.)
2. **Swap.** Every prepared part is committed (plain assignments and closes, none of which can fail half way),
   then the toolboxes are carried out as :func:`plan_reload` says, the tool lists rebuilt (sessions get
   ``notifications/tools/list_changed`` when theirs changed).

:func:`plan_reload` (pure) compares the toolboxes of the running policy with those of the newly compiled one, each
identified by (agent, toolbox) and judged by its whole compiled spec (rules, limits, env, uid, hosts, credentials,
its agent file's settings of it): a toolbox whose spec is the same *keeps* its worker (its calls, sessions and
state go on untouched); one whose spec differs is *restarted*; one no longer in the policy is *stopped*; a new one
is *started*. A toolbox that could not load before, or that is down after a crash loop (waiting out its cool-down),
is started again, as if changed: a reload is how an operator retries it after fixing the cause.

Either way one ``policy_reload`` trace record says what happened (``status`` ``applied`` or ``refused``) and the
caller prints :meth:`ReloadOutcome.describe` as one line. Settings a running supervisor cannot change in place are
listed in :data:`RESTART_ONLY`: a reload that changes them says so and leaves them.
"""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

import trio

from supervisor.calls import BudgetPolicy, SessionLimits
from supervisor.config import expand_agents, load_config
from supervisor.plan import bound_elsewhere, compile_policy, prepare_git_sources, run_credential_commands
from supervisor.traces import TraceRecorder, open_otel

from ._errors import first_leaf

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from supervisor.config import LoadedConfig
    from supervisor.workers import ToolboxRunner, WorkerSpec

__all__ = [
    "RESTART_ONLY",
    "PreparedChange",
    "ReloadOutcome",
    "ReloadParticipant",
    "ReloadPlan",
    "ReloadRefused",
    "plan_reload",
    "reload_supervisor",
    "spec_fingerprint",
    "state_dir_problem",
]

#: policy settings a running supervisor reads once: a reload that changes them says so and leaves them (the kernel
#: audit reader and the spawner, a zygote or not, are set up once, at start)
RESTART_ONLY = ("kernel_audit", "supervision.spawn")

Key = tuple[str, str]


class ReloadRefused(Exception):
    """A part of a reload cannot be prepared; the message says what and why, in words an operator can act on."""


@dataclass
class PreparedChange:
    """One part of a reload, made ready: ``commit`` applies it and returns what it changed, as short notes for the
    operator (it must not fail: everything that can fail was done while preparing); ``abort`` gives back what
    preparing took (a listener bound, a file opened) when another part could not be prepared."""

    commit: Callable[[], list[str]]
    abort: Callable[[], None] = lambda: None


class ReloadParticipant(Protocol):
    """A part of the service outside the supervisor that a reload changes too (the HTTP frontend)."""

    async def prepare_reload(self, config: LoadedConfig) -> PreparedChange:
        """Prepare for ``config`` (the reloaded policy and agents); raise :class:`ReloadRefused` saying why not."""
        ...


def spec_fingerprint(spec: WorkerSpec) -> str:
    """What decides whether a toolbox's worker can be kept: its whole compiled spec (as compiled, before the
    supervisor drops failed git sources from it), its credentials' values too (a digest: ``repr`` leaves them out),
    so a rotated secret restarts the workers granted it."""
    values = hashlib.sha256("\0".join(c.value for c in spec.credentials).encode()).hexdigest()
    return f"{spec!r} credential values {values}"


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


def state_dir_problem(running: str, override: str | None, configured: str) -> str | None:
    """Why a reload must be refused for its ``state_dir`` (``None``: it is the one in use). ``override``: the
    ``--state-dir`` the service was started with (it wins over the policy's, at start and at every reload). Pure.

    The state directory cannot move under a running service: it holds the session store (open), the identity table
    of the workers' uids, the staged worker code the running workers were started from, their work and state
    folders and the CA file; moving it is a restart.
    """
    wanted = os.path.abspath(override or configured)
    if wanted == os.path.abspath(running):
        return None
    return (
        f"state_dir cannot change while the service runs; restart to move it (it holds the session store, the "
        f"workers' uids, their staged code and folders): running with {running}, the policy now says {wanted}"
    )


@dataclass
class ReloadOutcome:
    """What a reload did: ``refused`` (the reason, nothing changed) or the plan carried out."""

    refused: str | None = None
    plan: ReloadPlan = field(default_factory=ReloadPlan)
    #: what changed besides the toolboxes, one short note per section (``tenants: added initech``)
    applied: list[str] = field(default_factory=list)
    #: policy settings that changed but take effect only at a restart (:data:`RESTART_ONLY`)
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
        if self.applied:
            line += "; " + "; ".join(self.applied)
        if self.not_applied:
            line += f" (changed, applied at the next restart: {', '.join(self.not_applied)})"
        return line


def failed_to_load(sup: Any) -> set[Key]:
    """The (agent, toolbox) of every toolbox that could not load or is down after a crash loop (a reload starts
    them again)."""
    failed = {(e.get("agent", ""), e["toolbox"]) for e in sup.toolbox_load_errors if e.get("toolbox")}
    return failed | set(sup.undescribable) | {r.key for r in sup.runners if r.crash_looped}


def adopt_policy(sup: Any, tree: Any, compiled: Any) -> None:
    """Give ``sup`` the settings of a reloaded policy (the runners are the caller's to change)."""
    sup.compiled = compiled
    sup.config = compiled.config
    policy = compiled.config.policy
    sup.portal.max_call_depth = compiled.max_call_depth
    sup.portal.session_limits = SessionLimits(compiled.session_max_calls, compiled.session_max_concurrent)
    sup.portal.budgets = BudgetPolicy.from_policy(policy)  # root calls from now on; running trees keep theirs
    sup.attachments.limits = dict(compiled.media_limits)
    sup.kernel_audit.system_paths = tuple(policy.system_paths)
    sup.frontends.tree = tree
    if sup.agents is not None:
        sup.agents.tree, sup.agents.bounds, sup.agents.model_keys = tree, policy.agent_loop, policy.model_keys
        sup.agents.max_image_bytes = compiled.media_limits["images"]
        sup.agents.forget_runners()
        sup.agent_runners = sup.agents.runners()
    sup.agent_load_errors = tree.load_errors
    sup.toolbox_load_errors = list(compiled.load_errors)
    sup.registry.unloaded = list(compiled.load_errors)
    sup.undescribable = set()
    sup.fingerprints = {(s.agent, s.toolbox): spec_fingerprint(s) for s in compiled.specs}
    sup.set_auto_enabled()
    for error in [*sup.agent_load_errors, *sup.toolbox_load_errors]:
        sup.trace.record("load_error", **error)


def _compile(source: tuple[str, list[str], str | None], running_state_dir: str) -> Any:
    """Load the policy, check its ``state_dir``, compile it in the state directory in use (off the trio thread:
    files, the identity table, folders)."""
    path, agents, override = source
    config = load_config(path, list(agents))
    problem = state_dir_problem(running_state_dir, override, config.policy.state_dir)
    if problem is not None:
        raise ReloadRefused(problem)
    tree = expand_agents(config, bound_elsewhere=bound_elsewhere(running_state_dir))
    commands = trio.from_thread.run(run_credential_commands, tree.config.policy.credentials)  # on the loop
    compiled = compile_policy(tree.config, python=sys.executable, state_dir=running_state_dir, command_values=commands)
    return tree, compiled


def _trace_change(sup: Any, compiled: Any) -> PreparedChange:
    """``trace.path`` (the new file opened now, moved to at commit) and ``trace.max_bytes`` (rotation)."""
    trace: TraceRecorder = sup.trace
    path, max_bytes = compiled.trace_path, compiled.config.policy.trace.max_bytes
    fd = None
    if path is not None and path != trace.path:
        try:
            fd = TraceRecorder.open_file(path)
        except OSError as exc:
            raise ReloadRefused(f"trace.path {path}: cannot open it ({exc.strerror or exc})") from None

    def commit() -> list[str]:
        notes = []
        if fd is not None:
            notes.append(f"trace moved to {path}")
            trace.move_to(path, fd)
        if trace.max_bytes != max_bytes:
            trace.max_bytes = max_bytes
            notes.append(f"trace rotates at {max_bytes} bytes" if max_bytes else "trace no longer rotates")
        return notes

    def abort() -> None:
        if fd is not None:
            os.close(fd)

    return PreparedChange(commit, abort)


def _otel_change(sup: Any, compiled: Any, nursery: trio.Nursery) -> PreparedChange | None:
    """``trace.otel``: the new export built now (``PolicyRefused`` without the SDK), hooked in at commit; the old one
    sends what it holds and stops off the trio thread."""
    wanted = compiled.config.policy.trace.otel
    if wanted == sup.config.policy.trace.otel:
        return None
    sink = sup.trace.sink
    try:
        export = open_otel(wanted, sup.trace)
    finally:
        sup.trace.sink = sink  # hooked at commit

    def commit() -> list[str]:
        old, sup.otel = sup.otel, export
        sup.trace.sink = export.observe if export is not None else None
        if old is not None:
            nursery.start_soon(trio.to_thread.run_sync, old.close)
        return [f"OpenTelemetry export to {export.endpoint}" if export is not None else "OpenTelemetry export off"]

    def abort() -> None:
        if export is not None:
            nursery.start_soon(trio.to_thread.run_sync, export.close)

    return PreparedChange(commit, abort)


async def _prepare(sup: Any, compiled: Any, nursery: trio.Nursery) -> list[PreparedChange]:
    """Every part of the reload made ready, or none: on a failure what was prepared is given back."""
    changes: list[PreparedChange] = []
    try:
        for participant in list(sup.reload_participants):  # first: what they bind or fetch leaves nothing behind
            changes.append(await participant.prepare_reload(compiled.config))
        otel = _otel_change(sup, compiled, nursery)
        if otel is not None:
            changes.append(otel)
        changes.append(_trace_change(sup, compiled))  # last: the only part that makes a file (a new trace.path)
    except BaseException:
        for change in reversed(changes):
            change.abort()
        raise
    return changes


def _refuse(sup: Any, exc: BaseException) -> ReloadOutcome:
    leaf = first_leaf(exc)
    reason = str(leaf) if isinstance(leaf, ReloadRefused) else f"{type(leaf).__name__}: {leaf}"
    outcome = ReloadOutcome(refused=reason[:4000])
    sup.trace.record("policy_reload", status="refused", policy=sup.reload_source[0], reason=outcome.refused)
    return outcome


def _setting(policy: Any, dotted: str) -> Any:
    for name in dotted.split("."):
        policy = getattr(policy, name, None)
    return policy


def _changed_restart_only(old: Any, new: Any) -> list[str]:
    return [name for name in RESTART_ONLY if _setting(old, name) != _setting(new, name)]


async def reload_supervisor(sup: Any, nursery: trio.Nursery) -> ReloadOutcome:
    """Reload the policy of ``sup`` (a :class:`~supervisor._supervisor.Supervisor`, which imports this module; see
    the module docstring); its runners are started in ``nursery`` (the one :meth:`Supervisor.open` holds). Never
    raises for a bad policy: the outcome says why it was refused."""
    try:
        tree, compiled = await trio.to_thread.run_sync(_compile, sup.reload_source, sup.compiled.state_dir)
        changes = await _prepare(sup, compiled, nursery)
    except Exception as exc:  # ConfigError, PolicyRefused, ReloadRefused, OSError, a bug: the running policy stays
        return _refuse(sup, exc)
    outcome = ReloadOutcome(
        warnings=list(compiled.warnings),
        not_applied=_changed_restart_only(sup.config.policy, compiled.config.policy),
    )
    for change in changes:  # the swap: nothing here can fail half way
        outcome.applied += change.commit()
    new_specs = {(s.agent, s.toolbox): s for s in compiled.specs}
    plan = plan_reload(sup.fingerprints, failed_to_load(sup), {k: spec_fingerprint(s) for k, s in new_specs.items()})
    outcome.plan = plan
    by_key = {r.key: r for r in sup.runners}
    for key in (*plan.restarted, *plan.stopped):  # a call that comes meanwhile is answered at once, never held
        why = "is being restarted by a policy reload" if key in plan.restarted else "was removed from the policy"
        by_key[key].fail_to_load(f"toolbox {key[1]} of agent {key[0]} {why}; call it again once the tool list changed")
    with trio.CancelScope(shield=True):
        async with trio.open_nursery() as stopping:
            for key in (*plan.restarted, *plan.stopped):
                stopping.start_soon(by_key[key].stop)
    fresh = {*plan.restarted, *plan.started}
    keep_days = sup.config.policy.sessions.keep_days
    adopt_policy(sup, tree, compiled)
    if compiled.config.policy.sessions.keep_days != keep_days:  # the other sessions settings are read per call
        sup.prune_sessions_now()
        keep_days = compiled.config.policy.sessions.keep_days
        outcome.applied.append(f"sessions kept {keep_days} days" if keep_days is not None else "sessions kept")
    supervision = compiled.supervision
    for key in plan.kept:  # kept workers restart (after a crash) under the new supervision settings
        by_key[key].supervision = supervision
    starting = replace(
        compiled,
        specs=[new_specs[k] for k in fresh],
        git_sources=[g for g in compiled.git_sources if (g.agent, g.toolbox) in fresh],
    )
    sup.source_errors = [e for e in sup.source_errors if (e.get("agent"), e.get("toolbox")) in plan.kept]
    sup.source_errors += await prepare_git_sources(starting, sup.trace, sup.own_listeners.ports)
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
        applied=outcome.applied,
        not_applied=outcome.not_applied,
        warnings=outcome.warnings[:50],
    )
    return outcome
