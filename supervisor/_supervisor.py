"""The Supervisor: the long-lived services and the running policy generation, and what frontends use of them.

Use it as an async context manager::

    async with Supervisor.open("policies/strict.yaml") as sup:
        result = await sup.call("system_system_date", {})

It holds two things: its :class:`~supervisor._services.Services` (the trace, the session store, the spawner, the
call services...: they live as long as it does) and its :class:`~supervisor._running.RunningPolicy`, whose one
:class:`~supervisor._generation.Generation` is the policy in force (compiled policy, runners, portal, sub-agents).
``open`` loads and compiles the policy (raising :class:`~supervisor.config._errors.ConfigError` or
:class:`~supervisor._errors.PolicyRefused` before any worker starts), opens the services (one exit stack: a
failure half way leaves nothing behind), then switches from no generation to the first by the path every reload
takes too: one confined worker per toolbox, started concurrently (at most ``supervision.parallel_starts`` at once),
returned once every worker said hello or failed to load. The zygote is launched as soon as the worker code is
staged, so its imports run while the policy compiles.

Nothing that goes wrong while one toolbox loads ends the supervisor: its compilation, folders, git skill sources,
worker start or tool list failing (an unexpected exception included) is a load error naming that toolbox
(:meth:`Supervisor.load_errors`, ``agents-supervise tools``, the trace's ``load_error``); that toolbox serves
nothing and every other one serves. Only deliberate refusals (a malformed config, a policy that cannot be enforced)
stop the start, before anything runs. :meth:`Supervisor.reload` loads the policy again while serving (``SIGHUP``;
:mod:`supervisor._reload`). Leaving the block stops every worker (graceful, then SIGKILL) and closes the services.
There is no global state: two supervisors in one process are independent.

Frontends see it through :class:`~supervisor._face.ToolService` (the contracts of the methods below are there).
"""

from __future__ import annotations

import gc
import os
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any, Literal

import trio

from sandbox import default_resolve
from supervisor.calls import get_prompt, list_entries, read_resource, traced_read
from supervisor.config import LoadedConfig, load_config
from supervisor.plan import kind_plan, stage_code
from supervisor.sessions import LOCAL_TENANT
from toolboxes import ToolResult

from ._reload import reload_policy
from ._running import RunningPolicy, agent_tree, compile_generation
from ._services import PolicySource, discard_zygote, launch_zygote, open_services, sweep_stale_groups

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Sequence

    from sandbox import Resolver
    from supervisor.calls import CallRunner, Portal, ToolRegistry
    from supervisor.config import Policy
    from supervisor.plan import CompiledPolicy
    from supervisor.sessions import SessionStore
    from supervisor.traces import TraceRecorder
    from toolboxes import Attachment, ProgressUpdate

    from ._generation import Generation
    from ._reload import ReloadOutcome
    from ._services import ReloadParticipant, Services
    from ._tool_lists import ToolInfo

__all__ = ["Supervisor"]


class Supervisor:
    """The trusted side: decides what may run, runs it in confined workers, records what happened."""

    def __init__(self, services: Services, running: RunningPolicy) -> None:
        self.services = services
        self.running = running
        self._reloading = trio.Lock()

    # -- opening -----------------------------------------------------------------------------------------------
    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        policy: str | os.PathLike[str] | LoadedConfig,
        *,
        agents: Sequence[str] = (),
        state_dir: str | None = None,
        start: Literal["all", "on_demand"] = "all",
        model_resolve: Resolver = default_resolve,
    ) -> AsyncIterator[Supervisor]:
        """Load ``policy`` (a path or an already loaded config), start every worker, yield the supervisor.

        ``agents`` adds agent files to the policy's list; ``state_dir`` overrides the policy's state directory
        (tests use it). ``start="on_demand"`` starts no worker at first: a call of a tool not yet listed starts the
        toolboxes that could serve it (by the naming rule, SPEC.md section 2; every toolbox of the caller's agent
        when the rule cannot tell), and so does each call made through the portal in turn (a Lua toolbox's
        ``tools.call``, a sub-agent's tools): what one call needs, not the whole policy (``agents-supervise call``).
        Tools listings then show only the started toolboxes' tools. ``model_resolve`` resolves the names of model
        endpoints (default: the system's resolver, each name as an absolute name); the addresses it answers are
        judged by the address rules as always (``supervisor/agents/_model_network.py``).

        Raises, before any worker starts:
            ConfigError: the policy or an agent file does not load (``load_config``, ``expand_agents``), a bare
                ``toolboxes.<name>`` key matches toolboxes of two agents, or an agent slug is bound to another file
                (``compile_policy``).
            PolicyRefused: the policy cannot be enforced here (``compile_policy``), or its OTel export cannot be
                set up (``open_otel``).
            SessionStoreUnavailable: the session store cannot be opened (not a database, damaged).
            OSError: the state directory or the trace file cannot be made or opened.

        Whatever step raises, what the steps before it made is given back (one exit stack): no zygote, OTel
        exporter thread or logging filter, no open file outlives a failed start, and the workers' folders and the CA
        file applying the policy made are taken back (``AppliedPlan.rollback``; identity records stay). A toolbox
        that cannot load is a load error (:meth:`load_errors`), not an exception; so is a git skill source that
        cannot be cloned.
        """
        config = policy if isinstance(policy, LoadedConfig) else load_config(os.fspath(policy), list(agents))
        tree = agent_tree(config, state_dir)
        async with AsyncExitStack() as stack:
            staged = stage_code(tree.config, state_dir=state_dir)
            # The zygote needs only the staged code: it imports the worker code (its own start, a few hundred ms
            # of CPU) while this process compiles the policy and opens the services.
            zygote = launch_zygote(tree.config, staged)
            stack.push_async_callback(discard_zygote, zygote)  # (the spawner's, if it took it: closed already)
            applied = await compile_generation(tree, state_dir=state_dir, staged=staged)
            compiled = applied.compiled
            # A start that does not finish takes back what applying made (its folders, the CA file), once its
            # workers are stopped: pushed before them, so it runs after. A finished start keeps it (``keep``).
            stack.callback(applied.rollback)
            source = PolicySource(config.policy_file, tuple(agents), state_dir)
            services = await open_services(stack, source, compiled, zygote=zygote, model_resolve=model_resolve)
            services.trace.record(
                "policy_compiled",
                workers=[{"toolbox": s.toolbox, "kind": s.kind, "agent": s.agent, **s.report} for s in compiled.specs],
                warnings=compiled.warnings,
            )
            sweep_stale_groups(compiled, services.trace)
            running = RunningPolicy(services, on_demand=start == "on_demand")
            stack.push_async_callback(running.stop)  # before the services' nursery is cancelled
            services.nursery.start_soon(services.upkeep.run, running.keep_days)
            await running.switch(tree, compiled)  # from no generation to the first: the path of every reload
            applied.keep()
            # What start-up made lives as long as the supervisor: out of the collector's way, a full collection
            # costs what was made since (it stalls every task and thread while it runs). The young generations
            # are collected first (the start's garbage is there: a few dozen objects); a full collection would
            # walk every object of the process, imports included (30-60 ms, part of every start).
            gc.collect(1)
            gc.freeze()
            stack.callback(gc.unfreeze)
            yield cls(services, running)

    # -- the running generation, as tests and tools look at it --------------------------------------------------
    @property
    def generation(self) -> Generation:
        """The running generation (set by :meth:`open` before the supervisor is handed out)."""
        generation = self.running.generation
        if generation is None:
            raise RuntimeError("the supervisor runs no policy yet (use Supervisor.open)")
        return generation

    @property
    def compiled(self) -> CompiledPolicy:
        return self.generation.compiled

    @property
    def runners(self) -> tuple[CallRunner, ...]:
        return self.generation.runners

    @property
    def portal(self) -> Portal:
        return self.generation.portal

    @property
    def registry(self) -> ToolRegistry:
        return self.services.calls.registry

    @property
    def sessions(self) -> SessionStore:
        return self.services.sessions

    def runner(self, toolbox: str, agent: str | None = None) -> CallRunner:
        """The runner of ``agent``'s ``toolbox`` (``None``: of the first agent that has one of that name)."""
        for r in self.generation.runners:
            if r.name == toolbox and agent in (None, r.spec.agent):
                return r
        raise KeyError(toolbox if agent is None else f"{agent}/{toolbox}")

    # -- the face (supervisor._face.ToolService: the contracts are there) --------------------------------------
    @property
    def trace(self) -> TraceRecorder:
        return self.services.trace

    @property
    def policy(self) -> Policy:
        return self.generation.policy

    def warnings(self) -> list[str]:
        return list(self.generation.compiled.warnings)

    def renamed(self) -> dict[str, str]:
        return dict(self.registry.renamed)

    def agent_slugs(self) -> list[str]:
        return [agent.slug for agent in self.generation.config.agents]

    def catalogs(self, agent: str | None) -> set[str]:
        return {
            c for r in self.generation.runners if agent in (None, r.spec.agent) for c in kind_plan(r.spec.kind).catalogs
        }

    def has_session_skills(self, agent: str) -> bool:
        return any(kind_plan(r.spec.kind).session_skills for r in self.generation.runners if r.spec.agent == agent)

    def session_name(self, session_id: str) -> str:
        return self.services.calls.frontends.name_of(session_id)

    def read_attachment(self, attachment: Attachment) -> bytes:
        return self.services.calls.attachments.read(attachment)

    def set_own_ports(self, owner: str, ports: Sequence[int]) -> None:
        self.services.own_listeners.set(owner, ports)

    def join_reloads(self, participant: ReloadParticipant) -> None:
        self.services.reload_participants.append(participant)

    def leave_reloads(self, participant: ReloadParticipant) -> None:
        if participant in self.services.reload_participants:
            self.services.reload_participants.remove(participant)

    def list_tools(
        self, session_id: str | None = None, *, tenant: str = LOCAL_TENANT, agent: str | None = None
    ) -> list[ToolInfo]:
        return self.running.tools.listing(self.services.calls.frontends, session_id, tenant=tenant, agent=agent)

    def list_catalog(self, kind: str, agent: str | None = None) -> list[dict[str, Any]]:
        return [e.public for e in list_entries(self._live_runners(), kind, agent)]

    def _live_runners(self) -> list[CallRunner]:
        return [r for r in self.generation.runners if not r.failed_reason]

    async def read_resource(
        self, uri: str, *, agent: str | None = None, session_id: str | None = None, tenant: str = LOCAL_TENANT
    ) -> dict[str, Any]:
        return await traced_read(
            self.trace,
            "resource_read",
            {"uri": uri[:500], "tenant": tenant, "session": session_id},
            read_resource(self._live_runners(), uri, agent, {"session_id": session_id or "", "depth": 0}),
            passed=lambda result: {"contents": len(result["contents"])},
        )

    async def get_prompt(
        self,
        name: str,
        args: dict[str, str],
        *,
        agent: str | None = None,
        session_id: str | None = None,
        tenant: str = LOCAL_TENANT,
    ) -> dict[str, Any]:
        return await traced_read(
            self.trace,
            "prompt_get",
            {"prompt": name[:200], "tenant": tenant, "session": session_id},
            get_prompt(self._live_runners(), name, args, agent, {"session_id": session_id or "", "depth": 0}),
        )

    async def wait_tools_changed(self, session_id: str | None = None) -> None:
        if session_id is None:
            await self.running.tools.wait_changed()
        else:
            await self.services.calls.session_tools.wait(session_id)

    async def call(
        self,
        name: str,
        args: Any,
        *,
        session_id: str | None = None,
        conversation_id: str = "",
        turn_id: str = "",
        agent_id: str = "",
        tenant: str = LOCAL_TENANT,
        agent_scope: str | None = None,
        progress: Callable[[ProgressUpdate], None] | None = None,
    ) -> ToolResult:
        generation, registry = self.running.generation, self.services.calls.registry
        if generation is None:
            return ToolResult.error("the supervisor runs no policy (it is not open)")
        portal = generation.portal
        if portal.starter is not None and registry.get(name, agent_scope) is None:
            await portal.starter.start_for(name, agent_scope)  # started on demand: the name's agent is known after
        if agent_scope is None and len(owners := registry.agents_with(name)) > 1:
            return ToolResult.error(
                f"Tool '{name}' is ambiguous: the agents {', '.join(owners)} each have a tool of that name. Name "
                "the agent: a session bound to one (stdio --serve-agent SLUG, HTTP /agents/SLUG/mcp), "
                "call --agent SLUG, or Supervisor.call(..., agent_scope=SLUG).",
                summary="ambiguous tool name",
            ).with_meta("ambiguous_tool", ", ".join(owners))
        try:
            tool = registry.get(name, agent_scope)
            origin = self.services.calls.frontends.origin(
                session_id,
                tool.namespace if tool is not None else (agent_scope or ""),
                conversation_id=conversation_id,
                turn_id=turn_id,
                tenant=tenant,
                agent_id=agent_id,
                agent_scope=agent_scope,
                progress=progress,
            )
        except ValueError as exc:
            return ToolResult.error(f"the call was refused: {exc}")
        return (await portal.call_traced(name, args, origin))[0]  # (portal.call's own hop left out)

    def close_session(self, session_id: str | None = None, *, tenant: str = LOCAL_TENANT) -> None:
        for root in self.services.calls.frontends.close(session_id, tenant=tenant):
            self.services.calls.session_tools.drop_session(root)
            self.services.calls.ledger.forget_session(root)  # the store forgets it once no call of it runs

    def enable_every_skill(self, session_id: str, *, agent: str, tenant: str = LOCAL_TENANT) -> None:
        root, _ = self.services.calls.frontends.open(session_id, agent, tenant=tenant)
        self.services.calls.session_tools.enable_every_skill(root)

    async def run_agent(
        self,
        slug: str,
        prompt: str,
        *,
        session_id: str | None = None,
        conversation_id: str = "",
        turn_id: str = "",
        tenant: str = LOCAL_TENANT,
    ) -> ToolResult:
        agents = self.generation.agents
        if agents is None:
            return ToolResult.error("this supervisor runs no agent loops (it was built without an HTTP client)")
        try:
            origin = self.services.calls.frontends.origin(
                session_id, slug, conversation_id=conversation_id, turn_id=turn_id, tenant=tenant
            )
        except ValueError as exc:
            return ToolResult.error(f"the run was refused: {exc}")
        return await agents.run(slug, prompt, origin)

    def load_errors(self) -> list[dict[str, Any]]:
        return self.generation.load_errors(self.registry.schema_errors)

    async def reload(self) -> ReloadOutcome:
        async with self._reloading:  # one reload at a time
            return await reload_policy(self.services, self.running)
