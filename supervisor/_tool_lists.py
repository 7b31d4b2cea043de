"""The tools served: the registry kept equal to the running toolboxes' lists, and who is told when it changes.

A worker's tool list arrives when it starts, restarts, says ``tools_changed``, or goes down after a crash loop
(:meth:`ServedTools.take`): its schemas join the schema pool, a skills toolbox's listed skills reach the sessions'
views, the load errors it reported are traced, and once every toolbox of the generation has answered (or failed, or
waits to be started on demand) the registry is rebuilt from the generation's runners and sub-agents
(:meth:`ServedTools.rebuild`). A list that cannot be registered (an unexpected exception included) leaves out that
toolbox only (its load error, source ``tool list``); every other one is served. When the names, descriptions,
schemas, resources or prompts served changed, :meth:`ServedTools.wait_changed` returns and every session is told.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

from supervisor.calls import ToolRegistry
from supervisor.plan import kind_plan
from supervisor.sessions import LOCAL_TENANT
from toolboxes import CATALOG_KINDS

from ._runners import load_failed

if TYPE_CHECKING:
    from collections.abc import Set

    from supervisor.calls import CallRunner, FrontendSessions
    from supervisor.sessions import SessionToolViews
    from supervisor.tools import SchemaPool
    from supervisor.traces import TraceRecorder

    from ._generation import Generation, Key

__all__ = ["ServedTools", "ToolInfo"]


@dataclass(frozen=True)
class ToolInfo:
    """A tool as frontends list it."""

    name: str
    description: str
    input_schema: dict[str, Any]
    toolbox: str
    agent: str
    local_name: str
    annotations: dict[str, Any] = field(default_factory=dict)
    #: MCP tool annotations (readOnlyHint, destructiveHint, idempotentHint, openWorldHint, title)
    hints: dict[str, Any] = field(default_factory=dict)
    output_schema: dict[str, Any] | None = None
    #: the agent whose name this is (a session bound to it sees it); ``agent`` is whose toolbox (or loop) runs it
    namespace: str = ""


class ServedTools:
    """Keeps ``registry`` equal to the running toolboxes' tool lists (long-lived)."""

    def __init__(
        self, registry: ToolRegistry, schema_pool: SchemaPool, session_tools: SessionToolViews, trace: TraceRecorder
    ) -> None:
        self.registry = registry
        self._schema_pool = schema_pool
        self._session_tools = session_tools
        self._trace = trace
        self._changed = trio.Event()
        self._catalog_seen = ""  # the resources and prompts of every worker, when the lists were last rebuilt
        #: each agent's tools as listed (``None``: every agent's), made at registry version ``_listed_version``
        self._listed: dict[str | None, tuple[tuple[ToolInfo, ...], bool]] = {}
        self._listed_version = -1

    async def wait_changed(self) -> None:
        """Return the next time what is served changes (names, descriptions, schemas, resources, prompts)."""
        await self._changed.wait()

    def take(self, runner: CallRunner, generation: Generation, unstarted: Set[Key]) -> None:
        """``runner``'s tool list arrived (or changed); rebuild once every runner of ``generation`` has answered,
        failed or is ``unstarted``. A list that cannot be handled is that toolbox's load error."""
        try:
            self._take(runner, generation, unstarted)
        except Exception as exc:  # the handling of one toolbox's tool list failed: that toolbox is left out
            load_failed(self._trace, runner, "tool list", exc)
            self.rebuild(generation)

    def _take(self, runner: CallRunner, generation: Generation, unstarted: Set[Key]) -> None:
        self._schema_pool.add([*runner.schemas, *runner.output_schemas])
        if kind_plan(runner.spec.kind).session_skills:  # skills that left the list are forgotten by its agent's
            self._session_tools.tools_listed(runner.spec.agent, runner.name, runner.tools)  # sessions
        for err in runner.load_errors:
            self._trace.record(
                "load_error",
                toolbox=runner.name,
                agent=runner.spec.agent,
                **{k: str(v) for k, v in err.items() if k in ("source", "message")},
            )
        runners = generation.runners
        if runners and all(r.worker is not None or r.failed_reason or r.key in unstarted for r in runners):
            self.rebuild(generation)

    def rebuild(self, generation: Generation) -> None:
        """Rebuild the registry from ``generation``'s runners that loaded and its sub-agents; tell the sessions
        when what is served changed."""
        before = self._registered()
        runners = [r for r in generation.runners if r.load_failure is None]
        guests = generation.agents.guests() if generation.agents is not None else {}
        try:
            self.registry.rebuild(runners, guests=guests)
        except Exception:
            # Find the toolbox whose list cannot be registered, leave it out, keep the others.
            for runner in runners:
                try:
                    ToolRegistry().rebuild([runner])
                except Exception as exc:
                    load_failed(self._trace, runner, "tool list", exc)
            runners = [r for r in runners if r.load_failure is None]
            self.registry.rebuild(runners, guests=guests)
        after = self._registered()
        self._schema_pool.retain(s for r in generation.runners for s in [*r.schemas, *r.output_schemas])
        catalog = repr([(r.spec.agent, r.name, [r.catalog(k) for k in CATALOG_KINDS]) for r in generation.runners])
        catalog_changed = catalog != self._catalog_seen  # resources or prompts: the same wake-up as for tools
        self._catalog_seen = catalog
        if before != after or catalog_changed:
            self._changed.set()
            self._changed = trio.Event()
            self._session_tools.wake()

    def _registered(self) -> dict[tuple[str, str], tuple[Any, ...]]:
        return {
            (t.namespace, t.name): (
                t.runner.name,
                t.local_name,
                t.fingerprint,
                t.description,
                repr(t.hints),
                repr(t.output_schema),
            )
            for t in self.registry.all()
        }

    def listing(
        self,
        frontends: FrontendSessions,
        session_id: str | None = None,
        *,
        tenant: str = LOCAL_TENANT,
        agent: str | None = None,
    ) -> list[ToolInfo]:
        """The tools served to the frontend session named ``session_id``, in load order: every tool but the
        session-scoped ones (skills' script tools) whose skill is not enabled in that session's session with the
        tool's agent (``frontends`` resolves it). ``session_id`` ``None``: every tool. ``agent``: that agent's name
        space only (``None``: every agent's, so a name two agents have is listed twice, with each
        ``namespace``).

        The :class:`ToolInfo` of a tool is made once per registry build (the same object in every listing until
        the registry is rebuilt: a frontend may cache what it derives from a listing by the identity of its
        entries); only the session-scoped tools are looked at per session."""
        everything, scoped = self._base(agent)
        if session_id is None or not scoped:
            return list(everything)
        out = []
        for info in everything:
            if info.annotations.get("session_scoped"):
                try:
                    resolved = frontends.open(session_id, info.namespace, tenant=tenant)[0]
                except ValueError:
                    continue
                if not self._session_tools.visible(resolved, info.agent, info.toolbox, info.annotations):
                    continue
            out.append(info)
        return out

    def _base(self, agent: str | None) -> tuple[tuple[ToolInfo, ...], bool]:
        """Every tool of ``agent``'s space (``None``: every space) as :class:`ToolInfo`, and whether any is
        session-scoped; made once per registry build."""
        if self._listed_version != self.registry.version:
            self._listed.clear()
            self._listed_version = self.registry.version
        cached = self._listed.get(agent)
        if cached is None:
            infos = tuple(
                ToolInfo(
                    t.name,
                    t.description,
                    t.input_schema,
                    t.toolbox,
                    t.agent,
                    t.local_name,
                    t.annotations,
                    t.hints,
                    t.output_schema,
                    t.namespace,
                )
                for t in self.registry.all(agent)
            )
            cached = (infos, any(i.annotations.get("session_scoped") for i in infos))
            if agent is None or agent in self.registry.namespaces:  # kept for the agents served only: bounded
                self._listed[agent] = cached
        return cached
