"""Reloading the policy of a running supervisor (``SIGHUP``): every section, prepared whole, then switched.

A reload goes in two steps, so that nothing is ever half-applied:

1. **Prepare** (nothing that serves changes yet). The policy is loaded again (the same files and command-line
   overrides as at start) and compiled as at start-up (:func:`~supervisor._running.compile_generation`).
   ``state_dir`` must be the one in use (see :func:`state_dir_problem`). Then every section that needs something
   made is made: the new trace file is opened (``trace.path``), a changed OpenTelemetry export is built
   (``trace.otel``), and each registered :class:`~supervisor._services.ReloadParticipant` (the HTTP frontend: its
   tenants, tokens, OAuth key set, TLS files, a new listener) prepares its part. Any failure (a syntax error, a
   refused setting, a key set that cannot be fetched, an address that cannot be bound) gives back what was prepared
   (:meth:`PreparedChange.abort`) and refuses the reload: the old policy keeps serving, whole, and the outcome says
   why. Last, the next generation is made (:meth:`~supervisor._running.RunningPolicy.prepare`: the new toolboxes'
   git sources cloned, their runners made, the running generation untouched). Whatever ends the reload before its
   switch (a refusal, a bug, a cancellation) also takes back what compiling applied
   (:meth:`~supervisor.plan.AppliedPlan.rollback`: the new toolboxes' work and state folders, the CA file when it
   was written for this policy; the identity records of new toolboxes stay, so that a number is never given
   twice). Nothing else is left behind by a reload that did not happen but the git clones, which are kept anyway.
2. **Switch.** Every prepared part is committed (plain assignments and closes, none of which can fail half way),
   then the running policy switches to the new generation by the one path start-up takes too
   (:meth:`~supervisor._running.RunningPolicy.commit`: toolboxes kept, restarted, stopped, started as
   :func:`~supervisor._generation.plan_switch` says; the tool lists rebuilt, sessions told when theirs changed).
   What the apply made is the running policy's from then on (:meth:`~supervisor.plan.AppliedPlan.keep`).

Either way one ``policy_reload`` trace record says what happened (``status`` ``applied`` or ``refused``) and the
caller prints :meth:`ReloadOutcome.describe` as one line. Settings a running supervisor cannot change in place are
listed in :data:`RESTART_ONLY`: a reload that changes them says so and leaves them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

from supervisor.config import load_config
from supervisor.traces import TraceRecorder, open_otel

from ._errors import first_leaf
from ._generation import SwitchPlan
from ._running import agent_tree, compile_generation
from ._services import PreparedChange, ReloadRefused

if TYPE_CHECKING:
    from supervisor.config import AgentTree, Policy
    from supervisor.plan import AppliedPlan, CompiledPolicy

    from ._generation import UpcomingGeneration
    from ._running import RunningPolicy
    from ._services import PolicySource, Services

__all__ = ["RESTART_ONLY", "ReloadOutcome", "reload_policy", "state_dir_problem"]

#: policy settings a running supervisor reads once: a reload that changes them says so and leaves them (the kernel
#: audit reader and the spawner, a zygote or not, are set up once, at start)
RESTART_ONLY = ("kernel_audit", "supervision.spawn")


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
    plan: SwitchPlan = field(default_factory=SwitchPlan)
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


async def _load(source: PolicySource, running_state_dir: str) -> tuple[AgentTree, AppliedPlan]:
    """Load the policy again (off the trio thread), check its ``state_dir``, compile it as at start-up in the
    state directory in use (planned and applied: the caller takes the apply back when the reload does not
    happen)."""

    def load() -> AgentTree:
        config = load_config(source.policy_file, list(source.agents))
        problem = state_dir_problem(running_state_dir, source.state_dir, config.policy.state_dir)
        if problem is not None:
            raise ReloadRefused(problem)
        return agent_tree(config, running_state_dir)

    tree = await trio.to_thread.run_sync(load)
    return tree, await compile_generation(tree, state_dir=running_state_dir)


def _trace_change(trace: TraceRecorder, compiled: CompiledPolicy) -> PreparedChange:
    """``trace.path`` (the new file opened now, moved to at commit) and ``trace.max_bytes`` (rotation)."""
    path, max_bytes = compiled.trace_path, compiled.config.policy.trace.max_bytes
    fd = None
    if path is not None and path != trace.path:
        try:
            fd = TraceRecorder.open_file(path)
        except OSError as exc:
            raise ReloadRefused(f"trace.path {path}: cannot open it ({exc.strerror or exc})") from None

    def commit() -> list[str]:
        notes = []
        if fd is not None and path is not None:
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


def _otel_change(services: Services, running: Policy, compiled: CompiledPolicy) -> PreparedChange | None:
    """``trace.otel``: the new export built now (``PolicyRefused`` without the SDK), hooked in at commit; the old one
    sends what it holds and stops off the trio thread."""
    wanted = compiled.config.policy.trace.otel
    if wanted == running.trace.otel:
        return None
    trace, nursery = services.trace, services.nursery
    sink = trace.sink
    try:
        export = open_otel(wanted, trace)
    finally:
        trace.sink = sink  # hooked at commit

    def commit() -> list[str]:
        old = services.otel.swap(export)
        if old is not None:
            nursery.start_soon(trio.to_thread.run_sync, old.close)
        return [f"OpenTelemetry export to {export.endpoint}" if export is not None else "OpenTelemetry export off"]

    def abort() -> None:
        if export is not None:
            nursery.start_soon(trio.to_thread.run_sync, export.close)

    return PreparedChange(commit, abort)


async def _prepare(
    services: Services, running: RunningPolicy, tree: AgentTree, compiled: CompiledPolicy
) -> tuple[list[PreparedChange], UpcomingGeneration]:
    """Every part of the reload made ready, the next generation last (its git clones are the slow part: a reload
    refused for a cheaper reason does not wait for them), or none: on a failure what was prepared is given back."""
    assert running.generation is not None
    changes: list[PreparedChange] = []
    try:
        for participant in list(services.reload_participants):  # first: what they bind or fetch leaves nothing
            changes.append(await participant.prepare_reload(compiled.config))
        otel = _otel_change(services, running.generation.policy, compiled)
        if otel is not None:
            changes.append(otel)
        changes.append(_trace_change(services.trace, compiled))  # the only part that makes a file
        upcoming = await running.prepare(tree, compiled)
    except BaseException:
        for change in reversed(changes):
            change.abort()
        raise
    return changes, upcoming


def _setting(policy: Any, dotted: str) -> Any:
    for name in dotted.split("."):
        policy = getattr(policy, name, None)
    return policy


def _changed_restart_only(old: Policy, new: Policy) -> list[str]:
    """The :data:`RESTART_ONLY` settings ``new`` changes (pure)."""
    return [name for name in RESTART_ONLY if _setting(old, name) != _setting(new, name)]


async def reload_policy(services: Services, running: RunningPolicy) -> ReloadOutcome:
    """Reload the policy of the supervisor whose ``services`` and ``running`` policy these are (see the module
    docstring). Never raises for a bad policy: the outcome says why it was refused."""
    generation = running.generation
    if generation is None:
        return ReloadOutcome(refused="this supervisor is not running (it was not opened with open())")
    applied: AppliedPlan | None = None
    try:
        tree, applied = await _load(services.source, generation.compiled.state_dir)
        changes, upcoming = await _prepare(services, running, tree, applied.compiled)
    except BaseException as exc:  # ConfigError, PolicyRefused, ReloadRefused, OSError, a bug: the running policy stays
        if applied is not None:
            applied.rollback()  # what compiling made for this reload (its identity records stay)
        if not isinstance(exc, Exception):  # a cancellation: taken back, and it goes on
            raise
        leaf = first_leaf(exc)
        reason = str(leaf) if isinstance(leaf, ReloadRefused) else f"{type(leaf).__name__}: {leaf}"
        outcome = ReloadOutcome(refused=reason[:4000])
        services.trace.record(
            "policy_reload", status="refused", policy=services.source.policy_file, reason=outcome.refused
        )
        return outcome
    compiled = applied.compiled
    policy = compiled.config.policy
    outcome = ReloadOutcome(
        warnings=list(compiled.warnings),
        not_applied=_changed_restart_only(generation.policy, policy),
    )
    for change in changes:  # the switch: nothing here can fail half way
        outcome.applied += change.commit()
    await running.commit(upcoming)
    applied.keep()
    outcome.plan = plan = upcoming.plan
    if policy.sessions.keep_days != generation.policy.sessions.keep_days:  # the other sessions settings: per call
        await services.upkeep.prune_sessions(policy.sessions.keep_days)
        keep_days = policy.sessions.keep_days
        outcome.applied.append(f"sessions kept {keep_days} days" if keep_days is not None else "sessions kept")
    services.trace.record(
        "policy_reload",
        status="applied",
        policy=services.source.policy_file,
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
