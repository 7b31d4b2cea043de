"""One running policy as one value: a :class:`Generation`, and what changes from one to the next (pure).

A generation is what a policy compiled to, with everything the supervisor made of it: the compiled policy and its
agent tree, one runner per toolbox (policy order), this policy's portal (its call rules over the supervisor's
long-lived call services) and sub-agent loops, the fingerprint of each toolbox's spec and the load errors known
when it was made. The supervisor holds exactly one, replaced whole by one assignment: start-up is the switch from
no generation to the first, a reload (``SIGHUP``) the switch from the running one to the next
(:meth:`supervisor._running.RunningPolicy.switch`). Nothing in it is rewritten afterwards; what a running toolbox
learns later (its worker failed to start, its tool list could not be registered) is its runner's state
(``load_failure``).

:func:`plan_switch` compares two generations' toolboxes, each identified by (agent, toolbox) and judged by its
whole compiled spec (rules, limits, env, uid, hosts, credentials, its agent file's settings of it): a toolbox whose
spec is the same is *kept* (its worker, calls, sessions and state go on untouched), one whose spec differs is
*restarted*, one no longer in the policy *stopped*, a new one *started*. A toolbox that could not load, or that is
down after a crash loop (waiting out its cool-down), is started again, as if changed: a reload is how an operator
retries it after fixing the cause.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

    from supervisor.agents import AgentService
    from supervisor.calls import CallRunner, Portal
    from supervisor.config import AgentTree, LoadedConfig, LoadError, Policy
    from supervisor.plan import CompiledPolicy
    from supervisor.workers import WorkerSpec

__all__ = ["Generation", "Key", "SwitchPlan", "UpcomingGeneration", "plan_switch", "spec_fingerprint"]

#: ``(agent, toolbox)``: what identifies a toolbox (two agents may each have one of a name)
Key = tuple[str, str]


def spec_fingerprint(spec: WorkerSpec) -> str:
    """What decides whether a toolbox's worker can be kept: its whole compiled spec (as compiled, before the
    supervisor drops failed git sources from it), its credentials' values too (a digest: ``repr`` leaves them out),
    so a rotated secret restarts the workers granted it."""
    values = hashlib.sha256("\0".join(c.value for c in spec.credentials).encode()).hexdigest()
    return f"{spec!r} credential values {values}"


@dataclass(frozen=True)
class SwitchPlan:
    """What a switch of generations does with each toolbox, as ``(agent, toolbox)`` keys in the new policy's load
    order (at start-up every toolbox is ``started``)."""

    kept: tuple[Key, ...] = ()
    restarted: tuple[Key, ...] = ()
    stopped: tuple[Key, ...] = ()
    started: tuple[Key, ...] = ()

    @property
    def fresh(self) -> frozenset[Key]:
        """The toolboxes that get a new runner (restarted or started)."""
        return frozenset((*self.restarted, *self.started))


def plan_switch(running: Mapping[Key, str], failed: set[Key], new: Mapping[Key, str]) -> SwitchPlan:
    """Compare the running toolboxes' fingerprints (``running``; ``failed``: those that could not load or are down
    after a crash loop) with the new policy's (``new``, in load order). Pure."""
    kept = tuple(k for k, fp in new.items() if running.get(k) == fp and k not in failed)
    restarted = tuple(k for k in new if k in running and k not in kept)
    started = tuple(k for k in new if k not in running)
    stopped = tuple(k for k in running if k not in new)
    return SwitchPlan(kept, restarted, stopped, started)


@dataclass(frozen=True)
class Generation:
    """The running policy and everything the supervisor made of it (see the module docstring)."""

    compiled: CompiledPolicy
    tree: AgentTree
    #: one per toolbox that compiled, in the policy's order
    runners: tuple[CallRunner, ...]
    #: this policy's call path (its rules over the supervisor's call services)
    portal: Portal
    #: its sub-agent loops (``None``: the supervisor runs no agent loop)
    agents: AgentService | None = None
    #: git skill sources that could not be cloned, ``{"toolbox", "agent", "source", "message"}``
    source_errors: tuple[dict[str, Any], ...] = ()
    #: (agent, toolbox) -> its spec's fingerprint as compiled (:func:`spec_fingerprint`)
    fingerprints: Mapping[Key, str] = field(default_factory=dict)

    @property
    def config(self) -> LoadedConfig:
        return self.compiled.config

    @property
    def policy(self) -> Policy:
        return self.compiled.config.policy

    def runner_of(self, key: Key) -> CallRunner | None:
        """The runner of the toolbox ``key`` (``None``: not in this policy, or it did not compile)."""
        for runner in self.runners:
            if runner.key == key:
                return runner
        return None

    def failed(self) -> set[Key]:
        """The toolboxes that could not load (compile, worker start, tool list) or are down after a crash loop: a
        switch starts them again."""
        failed = {(e.get("agent", ""), e["toolbox"]) for e in self.compiled.load_errors if e.get("toolbox")}
        return failed | {r.key for r in self.runners if r.load_failure is not None or r.crash_looped}

    def toolbox_load_errors(self) -> list[LoadError]:
        """Toolboxes that did not load: those the compile left out first, then those whose worker did not start or
        whose tool list could not be registered, in the policy's order; such a toolbox serves nothing."""
        return [*self.compiled.load_errors, *(r.load_failure for r in self.runners if r.load_failure)]

    def load_errors(self, schema_errors: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        """Every load error of this generation: what each toolbox reported while loading (scripts left out and
        why), the toolboxes that did not load, ``schema_errors`` (the registry's: invalid tool schemas), git
        sources not cloned, sub-agents left out."""
        out: list[dict[str, Any]] = [
            {"toolbox": r.name, "agent": r.spec.agent, **e} for r in self.runners for e in r.load_errors
        ]
        out += [dict(e) for e in self.toolbox_load_errors()]
        out += schema_errors or []
        out += [dict(e) for e in self.source_errors]
        out += [dict(e) for e in self.tree.load_errors]
        return out


@dataclass(frozen=True)
class UpcomingGeneration:
    """A generation made but not running yet, and the :class:`SwitchPlan` from the running one to it
    (``RunningPolicy.prepare`` makes it, ``RunningPolicy.commit`` makes it the running one). Until then nothing of
    it serves and no worker of it runs: dropping it gives nothing back but what applying its policy made."""

    generation: Generation
    plan: SwitchPlan
