"""The Supervisor: owns the registry, the toolbox runners, the portal and the trace recorder.

Use it as an async context manager::

    async with Supervisor.open("policies/strict.yaml") as sup:
        result = await sup.call("system_system_date", {})

Toolboxes are identified by (agent, toolbox): two agents may each have a ``system`` toolbox, each with its own
worker, folders, uid and tool names (``system_system_date`` of each, see :mod:`supervisor.calls._registry`).
``call(..., agent_scope=SLUG)`` calls the tool of that agent; without it, a name is the first agent's that has it.

``open`` loads and compiles the policy (raising :class:`~supervisor.config._errors.ConfigError` or
:class:`~supervisor._errors.PolicyRefused` before any worker starts), starts one confined worker per toolbox and
returns once every worker said hello or failed to load. The zygote is launched as soon as the worker code is staged
(it needs nothing else), so its imports run while the policy compiles; a start that stops before the workers stops
it too. The workers start concurrently, at most ``supervision.parallel_starts`` at once; the tool list and the load
errors are in the policy's order whatever order the workers finish in.

Nothing that goes wrong while one toolbox loads ends the supervisor: an error in its compilation, its folders, its
git skill sources, its worker's start or the handling of its tool list (an unexpected exception included) becomes
a load error naming that toolbox (:meth:`Supervisor.load_errors`, ``agents-supervise tools``, the trace's
``load_error``); that toolbox serves nothing (its calls answer with the error) and every other one serves. Only
deliberate refusals (a malformed config, a policy that cannot be enforced) stop the start, before anything runs.

:meth:`Supervisor.reload` loads the policy again while serving (``SIGHUP``) and applies every section: toolboxes
whose settings did not change keep their workers, changed ones are restarted, removed ones stopped, new ones
started; the trace, the session retention and the parts registered in :attr:`Supervisor.reload_participants` (the
HTTP frontend: tenants, tokens, OAuth, its settings and address) change too. A reload that cannot be prepared whole
keeps the running policy, all of it (:mod:`supervisor._reload`).

Leaving the block stops every worker (graceful, then SIGKILL) and closes the trace. There is no global state: two
supervisors in one process are independent.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import trio

from sandbox import OwnListeners, Resolver, default_resolve, sweep_stale_cgroups
from supervisor.agents import AgentRunner, AgentService, ModelHttp
from supervisor.calls import (
    AttachmentStore,
    BudgetPolicy,
    CallOrigin,
    CatalogError,
    GroupCommit,
    Portal,
    RegisteredTool,
    SessionLimits,
    ToolRegistry,
    capped_output,
    checked_output,
    could_serve,
    get_prompt,
    list_entries,
    output_limit,
    read_resource,
)
from supervisor.config import AgentTree, LoadedConfig, expand_agents, load_config
from supervisor.plan import (
    WORKER_PROCESS_ENV,
    CompiledPolicy,
    StagedCode,
    UidHold,
    bound_elsewhere,
    compile_policy,
    kind_plan,
    prepare_git_sources,
    run_credential_commands,
    stage_code,
    worker_modules,
)
from supervisor.sessions import LOCAL_TENANT, SessionStore, SessionToolViews
from supervisor.tools import SchemaPool, ValidationConfig
from supervisor.traces import FLUSH_INTERVAL_S, OtelExport, TraceRecorder, open_otel
from supervisor.workers import (
    KernelAudit,
    LauncherSpawner,
    LimitWatch,
    Spawner,
    ToolboxRunner,
    Worker,
    WorkerSpec,
    Zygote,
    ZygoteGone,
    ZygoteSpawner,
    combine_watches,
    preload_modules,
)
from toolboxes import CATALOG_KINDS, IMAGE_TYPES, ToolResult

from ._errors import WorkerStartError, first_leaf
from ._frontend_sessions import FrontendSessions
from ._reload import ReloadOutcome, ReloadParticipant, reload_supervisor, spec_fingerprint
from ._worker_messages import answer_worker_request, record_worker_event

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

    from supervisor.tools import CompiledSchema
    from toolboxes import ProgressUpdate

#: How often sessions older than the policy's ``sessions.keep_days`` are deleted (also once at start, and when a
#: reload changes it); a quarter of ``keep_days`` when that is shorter, so the store holds at most 1.25 times the
#: retention's traffic.
PRUNE_INTERVAL_S = 3600.0

__all__ = ["Supervisor", "ToolInfo"]


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


def _launch_zygote(config: LoadedConfig, staged: StagedCode) -> Zygote | None:
    """The zygote for ``config``'s workers (``supervision.spawn: zygote``), launched on ``staged`` code: it imports
    the worker code while the policy compiles; ``None`` when no zygote is wanted or it cannot be spawned (the
    spawner's own start then says why, or the launcher serves)."""
    if config.policy.supervision.spawn != "zygote" or staged.runtime_dir is None or not config.toolboxes():
        return None
    zygote = Zygote(sys.executable, staged.runtime_dir, env=WORKER_PROCESS_ENV)
    try:
        zygote.launch(worker_modules(config))
    except ZygoteGone:
        return None
    return zygote


async def _shielded(close: Callable[..., Awaitable[None]], *args: Any) -> None:
    """Await ``close(*args)`` shielded from cancellation (a cleanup of :meth:`Supervisor.open`'s exit stack runs
    to its end whatever cancelled the block)."""
    with trio.CancelScope(shield=True):
        await close(*args)


async def _close_otel(trace: TraceRecorder, export: Callable[[], OtelExport | None]) -> None:
    """Close the OpenTelemetry export ``export()`` gives: the last spans sent (bounded by ``trace.otel.timeout_s``)
    off the trio thread, its thread and logging filters gone."""
    otel = export()
    if otel is not None:
        trace.sink = None
        await trio.to_thread.run_sync(otel.close)
        otel.poll()


async def _discard(zygote: Zygote | None) -> None:
    """Stop a zygote :func:`_launch_zygote` launched (a no-op once its spawner closed it)."""
    if zygote is not None:
        await zygote.aclose()


class Supervisor:
    """The trusted side: decides what may run, runs it in confined workers, records what happened."""

    def __init__(
        self,
        compiled: CompiledPolicy,
        trace: TraceRecorder,
        *,
        tree: AgentTree | None = None,
        sessions: SessionStore | None = None,
        http: ModelHttp | None = None,
        own_listeners: OwnListeners | None = None,
    ) -> None:
        self.compiled = compiled
        self.config: LoadedConfig = compiled.config
        self.trace = trace
        self.registry = ToolRegistry()
        self.attachments = AttachmentStore(compiled.state_dir, compiled.media_limits)
        #: the kernel's denials (Landlock, seccomp) read from audit records, explained per call
        self.kernel_audit = KernelAudit(
            trace, mode=self.config.policy.kernel_audit, system_paths=tuple(self.config.policy.system_paths)
        )
        self.portal = Portal(
            registry=self.registry,
            trace=trace,
            max_call_depth=compiled.max_call_depth,
            session_limits=SessionLimits(compiled.session_max_calls, compiled.session_max_concurrent),
            budgets=BudgetPolicy.from_policy(self.config.policy),
            postprocess=self._postprocess,
            watch=combine_watches(LimitWatch(trace).begin, self.kernel_audit.begin),
            on_call_end=self._record_call,
            # A frontend's call is answered once its records (and those of the calls it made, queued before it) are
            # written and committed, so a kill -9 right after an answer loses neither; calls that end together
            # share one flush. Nested calls wait for their caller's (their answers go to a worker or a loop).
            commit=GroupCommit(self._commit_records).commit,
            on_session_closed=self._session_closed,
            call_context=lambda tool, origin: self.session_tools.call_context(tool, origin.session_id),
            validation=self._validation,
        )
        self.runners: list[ToolboxRunner] = []
        #: the ports the supervisor itself listens on (its HTTP frontend sets them): never dialled by an egress proxy
        #: or a model request
        self.own_listeners = own_listeners if own_listeners is not None else OwnListeners()
        #: the session store (``<state_dir>/sessions.sqlite3``); ``None``: sessions are not kept
        self.sessions = sessions
        #: frontends' session names -> root sessions of the store, per agent
        self.frontends = FrontendSessions(sessions, tree)
        #: sub-agent loops (``io_prompt_agent_<slug>``, ``agents-supervise run``); ``None`` without an HTTP client
        self.agents: AgentService | None = None
        self.agent_runners: list[AgentRunner] = []
        if tree is not None and http is not None:
            self.agents = AgentService(
                tree=tree,
                portal=self.portal,
                registry=self.registry,
                trace=trace,
                sessions=sessions,
                http=http,
                bounds=self.config.policy.agent_loop,
                model_keys=self.config.policy.model_keys,
                read_attachment=self.attachments.read,
                max_image_bytes=compiled.media_limits["images"],
            )
            self.agent_runners = self.agents.runners()
        self._tools_changed = trio.Event()
        #: which session-scoped tools (skills' scripts) each session sees (kept in the session store)
        self.session_tools = SessionToolViews(sessions if sessions is not None else SessionStore(":memory:"))
        #: load errors found before any worker started (git skill sources that could not be cloned)
        self.source_errors: list[dict[str, Any]] = []
        #: toolboxes that failed to load (compile, folders, worker start, tool list), ``{"toolbox", "agent",
        #: "source", "message"}``; such a toolbox serves nothing
        self.toolbox_load_errors: list[dict[str, str]] = list(compiled.load_errors)
        self.registry.unloaded = list(compiled.load_errors)
        #: (agent, toolbox) of the toolboxes whose tool list could not be registered
        self.undescribable: set[tuple[str, str]] = set()
        self._catalog_seen = ""  # the resources and prompts of every worker, when the lists were last rebuilt
        #: sub-agents left out at load (their file does not exist), ``{"agent", "source", "message"}``
        self.agent_load_errors: tuple[dict[str, str], ...] = tree.load_errors if tree is not None else ()
        #: the OpenTelemetry export (``trace.otel``); ``None`` when off
        self.otel: OtelExport | None = None
        #: what :meth:`reload` loads again: the policy file, the extra agent files, the ``state_dir`` override
        self.reload_source: tuple[str, list[str], str | None] = (self.config.policy_file, [], compiled.state_dir)
        #: parts of the service outside the supervisor a reload changes too (the HTTP frontend registers itself)
        self.reload_participants: list[ReloadParticipant] = []
        #: (agent, toolbox) -> its spec as compiled (:func:`~supervisor._reload.spec_fingerprint`)
        self.fingerprints: dict[tuple[str, str], str] = {
            (s.agent, s.toolbox): spec_fingerprint(s) for s in compiled.specs
        }
        self._nursery: trio.Nursery | None = None
        #: ``open(start=...)``: "all" starts every worker at once; "on_demand" only those the calls need
        self.start_mode: Literal["all", "on_demand"] = "all"
        #: (agent, toolbox) of the runners not started yet (``start_mode`` "on_demand"), and of those starting
        self._unstarted: set[tuple[str, str]] = set()
        self._starting: dict[tuple[str, str], trio.Event] = {}
        self._reloading = trio.Lock()
        self._next_prune = 0.0
        #: who makes workers' processes (``supervision.spawn``; :meth:`open` starts the zygote)
        self.spawner: Spawner = LauncherSpawner()
        #: the compiled schemas of the current tool lists, which a starting worker reuses (each compiled once)
        self.schema_pool = SchemaPool()

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
        exporter thread or logging filter, no open file outlives a failed start.

        A toolbox that cannot load (its planning, folders, staged code, worker start or tool list fail) is a load
        error (:meth:`load_errors`), not an exception; so is a git skill source that cannot be cloned.
        """
        config = policy if isinstance(policy, LoadedConfig) else load_config(os.fspath(policy), list(agents))
        tree = expand_agents(config, bound_elsewhere=bound_elsewhere(state_dir or config.policy.state_dir))
        sup: Supervisor | None = None
        # One exit stack holds everything the start makes, in order: whatever step fails (the store, the OTel
        # export, a worker), what was made before it is given back, nothing is left running (a zygote, the
        # exporter's thread, its logging filters, open files).
        async with AsyncExitStack() as stack:
            staged = stage_code(tree.config, state_dir=state_dir)
            # The zygote needs only the staged code: it imports the worker code (its own start, a few hundred ms
            # of CPU) while this process compiles the policy and opens the trace and the store.
            zygote = _launch_zygote(tree.config, staged)
            stack.push_async_callback(_shielded, _discard, zygote)  # (the spawner's, if it took it: closed already)
            commands = await run_credential_commands(tree.config.policy.credentials)
            compiled = compile_policy(
                tree.config, python=sys.executable, state_dir=state_dir, staged=staged, command_values=commands
            )
            trace = TraceRecorder(compiled.trace_path, max_bytes=compiled.config.policy.trace.max_bytes)
            stack.callback(trace.close)
            otel = open_otel(config.policy.trace.otel, trace)
            # A reload may replace the export: the one running at the end is closed.
            stack.push_async_callback(_shielded, _close_otel, trace, lambda: sup.otel if sup is not None else otel)
            sessions = SessionStore(os.path.join(compiled.state_dir, "sessions.sqlite3"))
            stack.callback(sessions.close)
            if compiled.uid_claim is not None:  # while it runs, its state dir's uids are in use: `uids release` waits
                stack.callback(UidHold(*compiled.uid_claim).close)
            own_listeners = OwnListeners()
            http = ModelHttp(own_listeners.ports, model_resolve)
            stack.push_async_callback(_shielded, http.aclose)
            sup = cls(compiled, trace, tree=tree, sessions=sessions, http=http, own_listeners=own_listeners)
            sup.start_mode = start
            sup.otel = otel
            sup.reload_source = (config.policy_file, list(agents), state_dir)
            trace.record(
                "supervisor_start",
                pid=os.getpid(),
                policy=config.policy_file,
                toolboxes=[f"{s.agent}/{s.toolbox}" for s in compiled.specs],
            )
            stack.callback(trace.record, "supervisor_stop", pid=os.getpid())
            trace.record(
                "policy_compiled",
                workers=[{"toolbox": s.toolbox, "kind": s.kind, "agent": s.agent, **s.report} for s in compiled.specs],
                warnings=compiled.warnings,
            )
            sup._prune_sessions()
            nursery = await stack.enter_async_context(trio.open_nursery())
            sup._nursery = nursery
            stack.callback(nursery.cancel_scope.cancel)  # (after the workers stopped, below)
            stack.push_async_callback(_shielded, sup._stop)
            nursery.start_soon(sup._flush_trace)
            await nursery.start(sup.kernel_audit.run)
            await sup._start_spawner(nursery, zygote)
            await sup._start(nursery)
            # What start-up made lives as long as the supervisor: out of the collector's way, a full collection
            # costs what was made since (it stalls every task and thread while it runs). The young generations
            # are collected first (the start's garbage is there: a few dozen objects); a full collection would
            # walk every object of the process, imports included (30-60 ms, part of every start).
            gc.collect(1)
            gc.freeze()
            stack.callback(gc.unfreeze)
            yield sup

    async def _start_spawner(self, nursery: trio.Nursery, launched: Zygote | None = None) -> None:
        """With ``supervision.spawn: zygote``, start the zygote for the staged worker code (it is ready, or the
        launcher chosen as the fallback, when this returns); it lives as long as ``nursery``. ``launched``: the
        zygote :meth:`open` launched before compiling (:func:`_launch_zygote`), which this waits for."""
        c = self.compiled
        forked = [spec for spec in c.specs if not spec.fresh_exec]  # (toolboxes.<name>.spawn: launcher are not)
        if self.config.policy.supervision.spawn != "zygote" or not forked or c.runtime_dir is None:
            return
        modules = preload_modules((spec.plan.entry, spec.kind) for spec in forked)
        if launched is not None and (launched.code_root, launched.python) != (c.runtime_dir, c.python):
            launched = None  # (never: the same staged code and interpreter) open() closes it
        spawner = ZygoteSpawner(
            c.python,
            c.runtime_dir,
            env=c.specs[0].env,
            modules=modules,
            note=self._spawn_note,
            launched=launched,
        )
        self.spawner = spawner
        await nursery.start(spawner.run)

    def _spawn_note(self, event: str, fields: dict[str, Any]) -> None:
        """A turn of the zygote: a trace record; one line on stderr unless it merely started."""
        self.trace.record(event, **fields)
        if event != "zygote_started":
            print(f"agents-supervise: {event}: {fields.get('reason', '')}", file=sys.stderr, flush=True)

    async def _start(self, nursery: trio.Nursery) -> None:
        layouts = {spec.cgroup.layout for spec in self.compiled.specs if spec.cgroup is not None}
        for layout in layouts:  # groups a supervisor killed with SIGKILL left behind
            try:
                removed = sweep_stale_cgroups(layout)
            except Exception as exc:  # housekeeping: a failure costs nothing but the sweep
                self.trace.record("stale_cgroups_sweep_failed", reason=f"{type(exc).__name__}: {exc}"[:2000])
                continue
            if removed:
                self.trace.record("stale_cgroups_removed", groups=removed)
        for error in [*self.agent_load_errors, *self.toolbox_load_errors]:
            self.trace.record("load_error", **error)
        self.source_errors = await prepare_git_sources(self.compiled, self.trace, self.own_listeners.ports)
        self.set_auto_enabled()
        self.runners = [self.new_runner(spec) for spec in self.compiled.specs]
        if self.start_mode == "on_demand":
            self._unstarted = {r.key for r in self.runners}
            self.portal.starter = self._start_on_demand
        else:
            await self.start_runners(nursery, self.runners)
        self._rebuild()

    async def _start_on_demand(self, name: str, scope: str | None) -> None:
        """Start the toolboxes of agent ``scope`` (any agent's when ``None``) not started yet that could serve the
        tool ``name`` (:func:`~supervisor.calls.could_serve`; all of them when the rule names none), and wait until
        they and those another call began starting for it are up; then the registry knows their tools."""
        in_scope = [r for r in self.runners if scope in (None, r.spec.agent)]
        serving = [r for r in in_scope if could_serve(r.spec.kind, r.spec.toolbox, name)] or in_scope
        mine = [r for r in serving if r.key in self._unstarted]
        others = [self._starting[r.key] for r in serving if r.key in self._starting]
        for runner in mine:
            self._unstarted.discard(runner.key)
            self._starting[runner.key] = trio.Event()
        try:
            if mine and self._nursery is not None:
                await self.start_runners(self._nursery, mine)
                self._rebuild()
        finally:
            for runner in mine:
                self._starting.pop(runner.key).set()
        for event in others:
            await event.wait()

    async def start_runners(self, nursery: trio.Nursery, runners: list[ToolboxRunner]) -> None:
        """Start ``runners`` in ``nursery`` at once, up to ``parallel_starts`` of them (more when the zygote forks
        every one of them: :meth:`parallel_starts`); whatever order they finish in, the load errors follow the
        policy's order (and the tool list, built from :attr:`runners`)."""
        places = trio.CapacityLimiter(self.parallel_starts(runners))
        async with trio.open_nursery() as starting:
            for runner in runners:
                starting.start_soon(self.start_runner, nursery, runner, places)
        order = {runner.key: i for i, runner in enumerate(self.runners)}
        self.toolbox_load_errors.sort(  # stable: compile errors first
            key=lambda e: order.get((e.get("agent", ""), e["toolbox"]), -1)
        )

    def parallel_starts(self, runners: Sequence[ToolboxRunner]) -> int:
        """How many of ``runners`` start at once: the policy's ``supervision.parallel_starts``, or by default a few
        per CPU for launchers and more when the zygote would fork every one of them now (a fork costs a tenth of a
        launcher's CPU)."""
        c = self.compiled
        if all(
            not r.spec.fresh_exec and self.spawner.forks(r.spec.argv, env=r.spec.env, cwd=r.spec.cwd) for r in runners
        ):
            return c.zygote_parallel_starts
        return c.parallel_starts

    def set_auto_enabled(self) -> None:
        """Tell the session views each skills toolbox's ``autoEnableSkills``."""
        for spec in self.compiled.specs:
            if kind_plan(spec.kind).session_skills:
                auto = (spec.plan.payload.get("config") or {}).get("autoEnableSkills") or []
                self.session_tools.set_auto_enabled(spec.agent, spec.toolbox, auto)

    def new_runner(self, spec: WorkerSpec) -> ToolboxRunner:
        """A runner for ``spec`` under the policy's supervision settings (not started)."""
        return ToolboxRunner(
            spec,
            self.compiled.supervision,
            on_request=self._on_request,
            on_event=self._on_event,
            on_tools=self._on_tools,
            make_worker=self._make_worker,
        )

    def _make_worker(self, spec: WorkerSpec, *, reuse: Sequence[CompiledSchema] = (), **kwargs: Any) -> Worker:
        """A worker of ``spec`` made by :attr:`spawner`, reusing ``reuse`` (its toolbox's last list) and every schema
        the other toolboxes' lists compiled (:attr:`schema_pool`)."""
        return Worker(
            spec,
            reuse=[*reuse, *self.schema_pool.schemas()],
            spawner=self.spawner,
            own_ports=self.own_listeners.ports,
            **kwargs,
        )

    # -- reloading ---------------------------------------------------------------------------------------------
    async def reload(self) -> ReloadOutcome:
        """Load the policy again and apply it (:mod:`supervisor._reload`); one reload at a time. Never raises for
        a policy that does not load: the outcome's ``refused`` says why, and the running policy stays."""
        if self._nursery is None:
            return ReloadOutcome(refused="this supervisor is not running (it was not opened with open())")
        async with self._reloading:
            return await reload_supervisor(self, self._nursery)

    def rebuild_tools(self) -> None:
        """Rebuild the tool registry from the runners (sessions whose list changed are told)."""
        self._rebuild()

    def _commit_records(self) -> None:
        """Write the buffered trace records and commit the session store's queued writes (the portal's group
        commit, before frontends' calls are answered)."""
        self.trace.flush()
        if self.sessions is not None:
            self.sessions.flush(touch=False)  # the sessions' modified times: by the flusher, within its interval

    async def _flush_trace(self) -> None:
        """Write buffered call records and session writes at least every ``FLUSH_INTERVAL_S``; prune old sessions
        every ``PRUNE_INTERVAL_S`` (:meth:`open` prunes once at start)."""
        self._next_prune = trio.current_time() + self._prune_interval()
        while True:
            if self.sessions is not None and trio.current_time() >= self._next_prune:
                self._prune_sessions()
                self._next_prune = trio.current_time() + self._prune_interval()
            await trio.sleep(FLUSH_INTERVAL_S)
            self.trace.flush()
            if self.otel is not None:
                self.otel.poll()
            if self.sessions is not None:
                self.sessions.flush()
                if self.sessions.checkpoint_due():  # its fsyncs off the trio thread, which commits meanwhile
                    await trio.to_thread.run_sync(self.sessions.checkpoint)

    def _prune_interval(self) -> float:
        keep_days = self.config.policy.sessions.keep_days
        return PRUNE_INTERVAL_S if keep_days is None else min(PRUNE_INTERVAL_S, keep_days * 86400 / 4)

    def prune_sessions_now(self) -> None:
        """Prune by the policy's ``sessions.keep_days`` now, then at its interval (a reload changed it)."""
        self._prune_sessions()
        self._next_prune = trio.current_time() + self._prune_interval()

    def _prune_sessions(self) -> None:
        keep_days = self.config.policy.sessions.keep_days
        if self.sessions is None or keep_days is None:
            return
        gone = self.sessions.prune(time.time() - keep_days * 86400)
        if gone or self.sessions.pruned_records:
            self.trace.record(
                "sessions_pruned", sessions=gone, records=self.sessions.pruned_records, keep_days=keep_days
            )

    async def start_runner(self, nursery: trio.Nursery, runner: ToolboxRunner, places: trio.CapacityLimiter) -> None:
        """Start ``runner`` in ``nursery`` (holding one of ``places`` until its worker said hello); a failed first
        start is its toolbox's load error."""
        try:
            async with places:  # held until the worker said hello (or its start failed)
                await nursery.start(runner.run)
        except Exception as exc:  # its first start failed (WorkerStartError or a bug): a load error, not our end
            self._load_failed(runner, "worker start", exc)

    def _load_failed(self, runner: ToolboxRunner, source: str, exc: BaseException) -> None:
        """Record that ``runner``'s toolbox could not load at ``source`` and disable it."""
        leaf = first_leaf(exc)
        why = str(leaf) if isinstance(leaf, WorkerStartError) else f"{type(leaf).__name__}: {leaf}"
        message = (
            f"toolbox {runner.name} (agent {runner.spec.agent}) did not load ({source}): {why}"[:2000]
            + ". It serves nothing; fix the cause and restart the supervisor."
        )
        runner.fail_to_load(message)
        error = {"toolbox": runner.name, "agent": runner.spec.agent, "source": source, "message": message}
        self.toolbox_load_errors.append(error)
        self.trace.record("load_error", **error)

    async def _stop(self) -> None:
        async with trio.open_nursery() as n:
            for runner in self.runners:
                n.start_soon(runner.stop)

    # -- events from workers -----------------------------------------------------------------------------------
    def _on_tools(self, runner: ToolboxRunner) -> None:
        try:
            self._take_tools(runner)
        except Exception as exc:  # the handling of one toolbox's tool list failed: that toolbox is left out
            self.undescribable.add(runner.key)
            self._load_failed(runner, "tool list", exc)
            self._rebuild()

    def _take_tools(self, runner: ToolboxRunner) -> None:
        self.schema_pool.add([*runner.schemas, *runner.output_schemas])
        if kind_plan(runner.spec.kind).session_skills:  # skills that left the list are forgotten by its agent's
            self.session_tools.tools_listed(runner.spec.agent, runner.name, runner.tools)  # sessions
        for err in runner.load_errors:
            self.trace.record(
                "load_error",
                toolbox=runner.name,
                agent=runner.spec.agent,
                **{k: str(v) for k, v in err.items() if k in ("source", "message")},
            )
        if len(self.runners) and all(
            r.worker is not None or r.failed_reason or r.key in self._unstarted for r in self.runners
        ):
            self._rebuild()

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

    def _rebuild(self) -> None:
        before = self._registered()
        runners = [r for r in self.runners if r.key not in self.undescribable]
        guests = self.agents.guests() if self.agents is not None else {}
        try:
            self.registry.rebuild(runners, guests=guests)
        except Exception:
            # Find the toolbox whose list cannot be registered, leave it out, keep the others.
            for runner in runners:
                try:
                    ToolRegistry().rebuild([runner])
                except Exception as exc:
                    self.undescribable.add(runner.key)
                    self._load_failed(runner, "tool list", exc)
            runners = [r for r in runners if r.key not in self.undescribable]
            self.registry.rebuild(runners, guests=guests)
        after = self._registered()
        self.schema_pool.retain(s for r in self.runners for s in [*r.schemas, *r.output_schemas])
        catalog = repr([(r.spec.agent, r.name, [r.catalog(k) for k in CATALOG_KINDS]) for r in self.runners])
        catalog_changed = catalog != self._catalog_seen  # resources or prompts: the same wake-up as for tools
        self._catalog_seen = catalog
        if before != after or catalog_changed:
            self._tools_changed.set()
            self._tools_changed = trio.Event()
            self.session_tools.wake()

    def _on_event(self, worker: Worker, kind: str, data: dict[str, Any]) -> None:
        record_worker_event(self.trace, worker, kind, data)

    async def _on_request(self, worker: Worker, message: dict[str, Any]) -> dict[str, Any]:
        return await answer_worker_request(
            self.portal,
            self.sessions,
            self.config.policy.sessions.introspection,
            worker,
            message,
            self.attachments.read,
        )

    def _record_call(
        self,
        *,
        call_id: str,
        tool: RegisteredTool,
        args: Any,
        origin: CallOrigin,
        result: ToolResult | None,
        started: float,
        duration_s: float,
        args_json: str | None = None,
    ) -> None:
        if (
            result is not None
            and tool.annotations.get("skill_action")
            and self.session_tools.observe(
                origin.session_id, tool.agent, tool.toolbox, tool.annotations, result.status, result.structured
            )
        ):
            self.session_tools.wake(self.frontends.name_of(origin.session_id))
        if self.sessions is None:
            return
        self.sessions.record_call(
            origin.session_id,
            call_id=call_id,
            parent_call_id=origin.parent_call_id,
            tool=tool.name,
            args=args,
            args_json=args_json,
            status=result.status if result else "error",
            summary=result.summary if result else "cancelled",
            output=result.data if result else None,
            started=started,
            duration_s=duration_s,
            conversation_id=origin.conversation_id,
            turn_id=origin.turn_id,
        )

    def _session_closed(self, session_id: str) -> None:
        """The portal's word that a closed session has no call running: the store forgets it too."""
        if self.sessions is not None:
            self.sessions.forget([session_id])

    def _validation(self, tool: RegisteredTool) -> ValidationConfig:
        """The policy's ``validation`` for ``tool``'s toolbox (asked only when its arguments failed the strict
        check)."""
        v = self.config.policy.effective_validation(tool.toolbox, tool.agent)
        return ValidationConfig(allow_extra_properties=v.allow_extra_properties, strict_mode=v.strict_mode)

    def _postprocess(self, tool: RegisteredTool, result: ToolResult) -> ToolResult:
        result = capped_output(result, output_limit(tool, self.config.policy.limits.output_bytes))
        result = checked_output(tool, result)
        if result.attachments:
            # seed 000's murmur:tool world: a component's attachments are images of the four types it lists
            only = IMAGE_TYPES if tool.runner.spec.kind == "wasm" else None
            return self.attachments.store(tool.runner.spec.plan.workdir, result, only=only)
        return result

    # -- the API frontends use ---------------------------------------------------------------------------------
    def list_tools(
        self, session_id: str | None = None, *, tenant: str = LOCAL_TENANT, agent: str | None = None
    ) -> list[ToolInfo]:
        """The tools served to the frontend session named ``session_id``, in load order: every tool but the
        session-scoped ones (skills' script tools) whose skill is not enabled in that session's session with the
        tool's agent. ``session_id`` ``None``: every tool. ``agent``: that agent's name space only (``None``: every
        agent's, so a name two agents have is listed twice, with each ``namespace``)."""
        out = []
        for t in self.registry.all(agent):
            if session_id is not None and t.annotations.get("session_scoped"):
                try:
                    resolved = self.frontends.open(session_id, t.namespace, tenant=tenant)[0]
                except ValueError:
                    continue
                if not self.session_tools.visible(resolved, t.agent, t.toolbox, t.annotations):
                    continue
            out.append(
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
            )
        return out

    def list_catalog(self, kind: str, agent: str | None = None) -> list[dict[str, Any]]:
        """The ``resources``, ``resource_templates`` or ``prompts`` served (of ``agent``'s toolboxes only, when
        given), in MCP's spelling with public names (see :mod:`supervisor.calls._catalog`)."""
        return [e.public for e in list_entries(self._live_runners(), kind, agent)]

    def _live_runners(self) -> list[ToolboxRunner]:
        return [r for r in self.runners if r.key not in self.undescribable and not r.failed_reason]

    async def read_resource(
        self, uri: str, *, agent: str | None = None, session_id: str | None = None, tenant: str = LOCAL_TENANT
    ) -> dict[str, Any]:
        """MCP's ``resources/read`` result for ``uri`` (of ``agent``'s toolboxes only, when given); raises
        :class:`~supervisor.calls._catalog.CatalogError` saying why it cannot be read. Traced as ``resource_read``."""
        ctx = {"session_id": session_id or "", "depth": 0}
        return await self._traced_catalog_read(
            "resource_read",
            {"uri": uri[:500], "tenant": tenant, "session": session_id},
            read_resource(self._live_runners(), uri, agent, ctx),
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
        """MCP's ``prompts/get`` result; raises :class:`~supervisor.calls._catalog.CatalogError`. Traced as
        ``prompt_get``."""
        ctx = {"session_id": session_id or "", "depth": 0}
        return await self._traced_catalog_read(
            "prompt_get",
            {"prompt": name[:200], "tenant": tenant, "session": session_id},
            get_prompt(self._live_runners(), name, args, agent, ctx),
        )

    async def _traced_catalog_read(
        self,
        event: str,
        fields: dict[str, Any],
        read: Awaitable[dict[str, Any]],
        passed: Callable[[dict[str, Any]], dict[str, Any]] = lambda _result: {},
    ) -> dict[str, Any]:
        """Await ``read`` and trace it as ``event`` with ``fields``: ``status`` passed (with what ``passed`` makes of
        the result) or error (with the :class:`CatalogError`'s message; the error is raised on)."""
        try:
            result = await read
        except CatalogError as exc:
            self.trace.record(event, **fields, status="error", message=str(exc)[:500])
            raise
        self.trace.record(event, **fields, status="passed", **passed(result))
        return result

    def agent_slugs(self) -> list[str]:
        """The slugs of the agents this supervisor serves, in load order."""
        return [agent.slug for agent in self.compiled.config.agents]

    async def wait_tools_changed(self, session_id: str | None = None) -> None:
        """Return the next time the tool list changes; with ``session_id``, also when that session's own list
        changes (a skill enabled or disabled in it), and not when another session's does."""
        if session_id is None:
            await self._tools_changed.wait()
        else:
            await self.session_tools.wait(session_id)

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
        """Call a tool as a frontend caller (depth 0); always returns a result, never raises for bad input.

        ``session_id`` is the frontend's name for its session (``None``: one unique to this supervisor); the call
        runs in that name's session with the agent whose tool it is (see :mod:`supervisor._frontend_sessions`).
        ``conversation_id`` and ``turn_id`` are the client's ids for this call; without them the call gets the
        session's conversation and a new turn. ``agent_scope``: the agent whose tool ``name`` is (a frontend session
        bound to one agent); only that agent's tools exist for this caller. ``None``: the agent that has a tool of
        that name; when several have one the call is refused, saying the name is ambiguous and which agents have it
        (it never runs in whichever agent happens to be first). ``progress``: called (on the trio loop, without
        blocking) with each progress update of the call (an MCP toolbox server's progress, a sub-agent's steps).
        """
        if self.portal.starter is not None and self.registry.get(name, agent_scope) is None:
            await self.portal.starter(name, agent_scope)  # started on demand: the name's agent is known after
        if agent_scope is None and len(owners := self.registry.agents_with(name)) > 1:
            return ToolResult.error(
                f"Tool '{name}' is ambiguous: the agents {', '.join(owners)} each have a tool of that name. Name "
                "the agent: a session bound to one (stdio --serve-agent SLUG, HTTP /agents/SLUG/mcp), "
                "call --agent SLUG, or Supervisor.call(..., agent_scope=SLUG).",
                summary="ambiguous tool name",
            ).with_meta("ambiguous_tool", ", ".join(owners))
        try:
            tool = self.registry.get(name, agent_scope)
            agent = tool.namespace if tool is not None else (agent_scope or "")
            origin = self.frontends.origin(
                session_id,
                agent,
                conversation_id=conversation_id,
                turn_id=turn_id,
                tenant=tenant,
                agent_id=agent_id,
                agent_scope=agent_scope,
                progress=progress,
            )
        except ValueError as exc:
            return ToolResult.error(f"the call was refused: {exc}")
        return await self.portal.call(name, args, origin)

    def close_session(self, session_id: str | None = None, *, tenant: str = LOCAL_TENANT) -> None:
        """The frontend session ``session_id`` ended (an MCP connection closed, an HTTP session deleted or expired,
        a Python API caller done with a name; ``None``: the default one): drop what the supervisor keeps of it in
        memory (its root sessions with each agent, their call counts under ``sessions.max_calls``, the store's
        caches of them). Its records stay in the session store until ``sessions.keep_days`` removes them; a call
        of it still running ends normally. Using the name again opens it again (the same session ids and
        conversation from the store; call counts from 0). Closing a name never used does nothing."""
        for root in self.frontends.close(session_id, tenant=tenant):
            self.session_tools.drop_session(root)
            self.portal.forget_session(root)  # then _session_closed, once no call of it runs

    def enable_every_skill(self, session_id: str, *, agent: str, tenant: str = LOCAL_TENANT) -> None:
        """Every loaded skill of ``agent`` counts as enabled in the frontend session ``session_id`` with ``agent``
        until it is closed (a request of MCP's stateless revision: each is a session of its own, so nothing it
        enabled could last into the next; docs/MCP.md "Revisions")."""
        root, _ = self.frontends.open(session_id, agent, tenant=tenant)
        self.session_tools.enable_every_skill(root)

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
        """Run agent ``slug``'s loop on ``prompt`` at depth 0 (``agents-supervise run``), its run a child of the
        session ``session_id`` names with ``slug`` (see :meth:`call`); always a result."""
        if self.agents is None:
            return ToolResult.error("this supervisor runs no agent loops (it was built without an HTTP client)")
        try:
            origin = self.frontends.origin(
                session_id, slug, conversation_id=conversation_id, turn_id=turn_id, tenant=tenant
            )
        except ValueError as exc:
            return ToolResult.error(f"the run was refused: {exc}")
        return await self.agents.run(slug, prompt, origin)

    def load_errors(self) -> list[dict[str, Any]]:
        """Problems toolboxes reported while loading (scripts left out and why), plus invalid tool schemas."""
        out = [{"toolbox": r.name, "agent": r.spec.agent, **e} for r in self.runners for e in r.load_errors]
        out += [dict(e) for e in self.toolbox_load_errors]
        out += self.registry.schema_errors
        out += self.source_errors
        out += [dict(e) for e in self.agent_load_errors]
        return out

    def runner(self, toolbox: str, agent: str | None = None) -> ToolboxRunner:
        """The runner of ``agent``'s ``toolbox`` (``None``: of the first agent that has one of that name)."""
        for r in self.runners:
            if r.name == toolbox and agent in (None, r.spec.agent):
                return r
        raise KeyError(toolbox if agent is None else f"{agent}/{toolbox}")
