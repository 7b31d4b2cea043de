"""The policy the supervisor runs: its one :class:`~supervisor._generation.Generation`, and the one way from a
compiled policy to the next generation, taken at start-up (from none) and at every reload.

:meth:`RunningPolicy.switch` goes in three steps:

1. **plan** (pure, :func:`~supervisor._generation.plan_switch`): which toolboxes are kept, restarted, stopped,
   started;
2. **prepare** (:meth:`RunningPolicy.prepare`): the git skill sources of the new toolboxes are cloned (a failed one
   is a load error; a clone is kept either way, ``plan/_skill_clones.py``); their runners, the portal of the new
   policy (its call rules over the supervisor's call services) and its sub-agent loops are made. Nothing serves
   them yet and the running generation is not touched: a step that raises here (a bug, a cancellation, a later
   part of a reload refused) leaves the running policy serving, whole;
3. **commit** (:meth:`RunningPolicy.commit`): the toolboxes that go answer their calls at once (never held) and are
   stopped; one assignment makes the new generation the running one (the services' settings of it follow: the
   audit reader's system paths, the sessions' auto-enabled skills, its load errors traced); then the new runners
   start (at once, or as calls need them: ``start="on_demand"``) and the tool registry is rebuilt (sessions whose
   list changed are told).

:func:`agent_tree` and :func:`compile_generation` (plan and apply off the trio thread) are shared the same way. The
:class:`~supervisor.plan.AppliedPlan` the compile returns is its caller's: a start-up that does not finish, a
reload given up before its commit, takes back what that apply made (:meth:`~supervisor.plan.AppliedPlan.rollback`:
the new toolboxes' folders, the CA file) and nothing else; once committed, what it made is the running policy's
(docs/DECISIONS.md, "A failed start or reload takes back its apply"). What a reload changes besides (the trace
file, the OTel export, the HTTP frontend) is :mod:`supervisor._reload`'s.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import trio

from supervisor.agents import AgentService
from supervisor.calls import CallPolicy, Portal, could_serve
from supervisor.config import expand_agents
from supervisor.plan import (
    bound_elsewhere,
    kind_plan,
    plan_and_apply,
    prepare_git_sources,
    run_credential_commands,
    stage_code,
)

from ._generation import Generation, Key, SwitchPlan, UpcomingGeneration, plan_switch, spec_fingerprint
from ._runners import RunnerStarts
from ._tool_lists import ServedTools
from ._worker_messages import answer_worker_request, record_worker_event

if TYPE_CHECKING:
    from supervisor.calls import CallRunner, CallWorker
    from supervisor.config import AgentTree, LoadedConfig
    from supervisor.plan import AppliedPlan, CompiledPolicy, StagedCode

    from ._services import Services

__all__ = ["RunningPolicy", "agent_tree", "compile_generation"]


def agent_tree(config: LoadedConfig, state_dir: str | None) -> AgentTree:
    """``config``'s agents with the sub-agents they name (:func:`~supervisor.config.expand_agents`), judged by the
    identity table of ``state_dir`` (``None``: the policy's): a sub-agent file claiming a slug bound to another
    file is its naming agent's load error. What start-up, every reload and ``check`` load."""
    return expand_agents(config, bound_elsewhere=bound_elsewhere(state_dir or config.policy.state_dir))


async def compile_generation(
    tree: AgentTree, *, state_dir: str | None, staged: StagedCode | None = None
) -> AppliedPlan:
    """Compile ``tree``'s policy in ``state_dir`` (``None``: the policy's): its credential commands run (on the trio
    loop, which serves meanwhile), then, off the trio thread, the worker code staged (unless ``staged``: what
    :func:`~supervisor.plan.stage_code` staged already, at start-up) and the policy planned and applied
    (:func:`~supervisor.plan.plan_and_apply`: the identity table, the CA file, the workers' folders). The caller
    keeps the result's :meth:`~supervisor.plan.AppliedPlan.rollback` for a start or reload that fails later.

    Raises ``ConfigError`` or ``PolicyRefused`` as :func:`~supervisor.plan.plan_and_apply` does (having made
    nothing it keeps: a failed apply takes back what it made).
    """
    commands = await run_credential_commands(tree.config.policy.credentials)

    def compile_it() -> AppliedPlan:
        code = staged if staged is not None else stage_code(tree.config, state_dir=state_dir)
        return plan_and_apply(tree.config, python=sys.executable, staged=code, command_values=commands)

    return await trio.to_thread.run_sync(compile_it)


class RunningPolicy:
    """The running generation of one supervisor (``None`` before the first switch) and the way to the next.
    ``on_demand``: new toolboxes start only as calls need them (``Supervisor.open(start="on_demand")``)."""

    def __init__(self, services: Services, *, on_demand: bool = False) -> None:
        self._services = services
        self.on_demand = on_demand
        self.generation: Generation | None = None
        calls = services.calls
        self.tools = ServedTools(calls.registry, services.schema_pool, calls.session_tools, services.trace)
        self.starts = RunnerStarts(
            trace=services.trace,
            spawner=services.spawner,
            schema_pool=services.schema_pool,
            own_listeners=services.own_listeners,
            nursery=services.nursery,
            on_request=self._on_request,
            on_event=self._on_event,
            on_tools=self._on_tools,
        )
        #: (agent, toolbox) of the runners not started yet (``on_demand``), and of those starting
        self._unstarted: set[Key] = set()
        self._starting: dict[Key, trio.Event] = {}

    # -- the one way from a policy to the next ---------------------------------------------------------------------
    async def switch(self, tree: AgentTree, compiled: CompiledPolicy) -> SwitchPlan:
        """Make ``compiled`` (with its agent ``tree``) the running generation: :meth:`prepare`, then :meth:`commit`
        (see the module docstring); return what was done with each toolbox. Never raises for a toolbox that cannot
        load: it is a load error."""
        upcoming = await self.prepare(tree, compiled)
        await self.commit(upcoming)
        return upcoming.plan

    async def prepare(self, tree: AgentTree, compiled: CompiledPolicy) -> UpcomingGeneration:
        """Steps 1 and 2 of :meth:`switch`: the plan, and the next generation made. The running generation is not
        touched (its runners serve on, its settings stay): a caller that gives up now (a refused reload, a
        cancellation) leaves it as it was, and only needs to roll back what applying ``compiled`` made."""
        services, running = self._services, self.generation
        specs = {(s.agent, s.toolbox): s for s in compiled.specs}
        fingerprints = {key: spec_fingerprint(spec) for key, spec in specs.items()}
        plan = plan_switch(
            running.fingerprints if running else {}, running.failed() if running else set(), fingerprints
        )
        fresh = plan.fresh
        starting = replace(
            compiled,
            specs=[spec for key, spec in specs.items() if key in fresh],
            git_sources=[g for g in compiled.git_sources if (g.agent, g.toolbox) in fresh],
        )
        kept_errors = (
            [e for e in running.source_errors if (e.get("agent"), e.get("toolbox")) in plan.kept] if running else []
        )
        source_errors = [
            *kept_errors,
            *await prepare_git_sources(starting, services.trace, services.own_listeners.ports),
        ]
        old = {r.key: r for r in running.runners} if running else {}
        runners = tuple(
            old[key] if key in plan.kept else self.starts.new_runner(spec, compiled.supervision)
            for key, spec in specs.items()
        )
        portal = Portal(
            services.calls,
            CallPolicy.from_policy(compiled.config.policy, tuple(compiled.load_errors)),
            self if self.on_demand else None,
        )
        generation = Generation(
            compiled=compiled,
            tree=tree,
            runners=runners,
            portal=portal,
            agents=self._agents(tree, compiled, portal),
            source_errors=tuple(source_errors),
            fingerprints=fingerprints,
        )
        return UpcomingGeneration(generation, plan)

    async def commit(self, upcoming: UpcomingGeneration) -> None:
        """Step 3 of :meth:`switch`: the running generation's toolboxes that go are stopped, ``upcoming`` runs from
        now on (one assignment), its new runners start. Made by :meth:`prepare` from the generation running now
        (one reload at a time: ``Supervisor.reload`` holds a lock)."""
        services, generation, plan = self._services, upcoming.generation, upcoming.plan
        compiled, running = generation.compiled, self.generation
        old = {r.key: r for r in running.runners} if running else {}
        going = [old[key] for key in (*plan.restarted, *plan.stopped) if key in old]
        for runner in going:  # a call that comes meanwhile is answered at once, never held
            (agent, toolbox), restarted = runner.key, runner.key in plan.restarted
            why = "is being restarted by a policy reload" if restarted else "was removed from the policy"
            runner.fail_to_load(f"toolbox {toolbox} of agent {agent} {why}; call it again once the tool list changed")
        await self.starts.stop(going)
        for key in plan.kept:  # kept workers restart (after a crash) under the new supervision settings
            old[key].supervision = compiled.supervision
        self.generation = generation
        for error in [*generation.tree.load_errors, *compiled.load_errors]:
            services.trace.record("load_error", **error)
        policy = compiled.config.policy
        services.kernel_audit.system_paths = tuple(policy.system_paths)
        for spec in compiled.specs:
            if kind_plan(spec.kind).session_skills:
                auto = (spec.plan.payload.get("config") or {}).get("autoEnableSkills") or []
                services.calls.session_tools.set_auto_enabled(spec.agent, spec.toolbox, auto)
        new = [r for r in generation.runners if r.key in plan.fresh]
        if self.on_demand:
            self._unstarted = {key for key in self._unstarted if key in plan.kept} | {r.key for r in new}
        else:
            await self.starts.start(new, compiled)
        self.tools.rebuild(generation)

    def _agents(self, tree: AgentTree, compiled: CompiledPolicy, portal: Portal) -> AgentService:
        """The sub-agent loops of a generation (``io_prompt_agent_<slug>``, ``agents-supervise run``)."""
        services, policy = self._services, compiled.config.policy
        agents = AgentService(
            tree=tree,
            portal=portal,
            registry=services.calls.registry,
            trace=services.trace,
            sessions=services.sessions,
            http=services.http,
            bounds=policy.agent_loop,
            model_keys=policy.model_keys,
            read_attachment=services.calls.attachments.read,
            max_image_bytes=compiled.media_limits["images"],
        )
        agents.runners()  # made now: the registry's rebuild names them
        return agents

    def keep_days(self) -> float | None:
        """The running policy's ``sessions.keep_days`` (``None``: sessions are kept, or nothing runs yet)."""
        return self.generation.policy.sessions.keep_days if self.generation is not None else None

    async def stop(self) -> None:
        """Stop every runner of the running generation (graceful, then SIGKILL; shielded)."""
        if self.generation is not None:
            await self.starts.stop(self.generation.runners)

    # -- starting on demand (a Starter of the portal) ------------------------------------------------------------
    async def start_for(self, name: str, scope: str | None) -> None:
        """Start the toolboxes of agent ``scope`` (any agent's when ``None``) not started yet that could serve the
        tool ``name`` (:func:`~supervisor.calls.could_serve`; all of them when the rule names none), and wait until
        they and those another call began starting for it are up; then the registry knows their tools."""
        generation = self.generation
        if generation is None:
            return
        in_scope = [r for r in generation.runners if scope in (None, r.spec.agent)]
        serving = [r for r in in_scope if could_serve(r.spec.kind, r.spec.toolbox, name)] or in_scope
        mine = [r for r in serving if r.key in self._unstarted]
        others = [self._starting[r.key] for r in serving if r.key in self._starting]
        for runner in mine:
            self._unstarted.discard(runner.key)
            self._starting[runner.key] = trio.Event()
        try:
            if mine:
                await self.starts.start(mine, generation.compiled)
                self.tools.rebuild(generation)
        finally:
            for runner in mine:
                self._starting.pop(runner.key).set()
        for event in others:
            await event.wait()

    # -- what workers send -------------------------------------------------------------------------------------
    def _on_tools(self, runner: CallRunner) -> None:
        if self.generation is not None:
            self.tools.take(runner, self.generation, self._unstarted)

    def _on_event(self, worker: CallWorker, kind: str, data: dict[str, Any]) -> None:
        record_worker_event(self._services.trace, worker, kind, data)

    async def _on_request(self, worker: CallWorker, message: dict[str, Any]) -> dict[str, Any]:
        """A portal or host request of a call in flight, answered by the running generation (a kept worker's
        request after a reload gets the new policy's rules)."""
        generation = self.generation
        if generation is None:
            return {"error": "the supervisor is not running a policy"}
        return await answer_worker_request(
            generation.portal,
            self._services.sessions,
            generation.policy.sessions.introspection,
            worker,
            message,
            self._services.calls.attachments.read,
        )
