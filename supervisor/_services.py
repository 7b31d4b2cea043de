"""What lives as long as the supervisor, whatever policy generation runs: its :class:`Services`, opened in order
into one exit stack by :func:`open_services`.

The trace (and its OpenTelemetry export, which a reload may replace: :class:`OtelSlot`), the session store, the
model HTTP clients, the ports the supervisor listens on, the spawner (the zygote when ``supervision.spawn: zygote``),
the kernel audit reader, the schema pool, the call services every generation's portal shares (registry, the
frontends' session names, ledger, records, attachments, session tool views, watches), the parts outside
the supervisor a reload changes too (:class:`ReloadParticipant`), and the nursery the workers run in. Whatever
step of :func:`open_services` raises, what the steps before it made is given back by the caller's exit stack: no
OTel exporter thread or logging filter, no zygote, no open file outlives a failed start.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import trio

from sandbox import OwnListeners, sweep_stale_cgroups
from supervisor.agents import ModelHttp
from supervisor.calls import CallServices, ToolRegistry
from supervisor.plan import WORKER_PROCESS_ENV, UidHold, worker_modules
from supervisor.sessions import SessionStore
from supervisor.tools import SchemaPool
from supervisor.traces import FLUSH_INTERVAL_S, OtelExport, TraceRecorder, open_otel
from supervisor.workers import (
    KernelAudit,
    LauncherSpawner,
    LimitWatch,
    Spawner,
    Zygote,
    ZygoteGone,
    ZygoteSpawner,
    preload_modules,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from contextlib import AsyncExitStack

    from sandbox import Resolver
    from supervisor.config import LoadedConfig
    from supervisor.plan import CompiledPolicy, StagedCode

__all__ = [
    "PRUNE_INTERVAL_S",
    "OtelSlot",
    "PolicySource",
    "PreparedChange",
    "ReloadParticipant",
    "ReloadRefused",
    "Services",
    "Upkeep",
    "discard_zygote",
    "launch_zygote",
    "open_services",
    "sweep_stale_groups",
]

#: How often sessions older than the policy's ``sessions.keep_days`` are deleted (also once at start, and when a
#: reload changes it); a quarter of ``keep_days`` when that is shorter, so the store holds at most 1.25 times the
#: retention's traffic.
PRUNE_INTERVAL_S = 3600.0


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


@dataclass(frozen=True)
class PolicySource:
    """What a start loads and every reload loads again: the policy file, the agent files added to its list, the
    ``state_dir`` that overrides the policy's (``None``: the policy's)."""

    policy_file: str
    agents: tuple[str, ...] = ()
    state_dir: str | None = None


class OtelSlot:
    """The OpenTelemetry export in use (``trace.otel``; ``None``: off): hooked into the trace, replaced whole by a
    reload, closed with the supervisor."""

    def __init__(self, trace: TraceRecorder, export: OtelExport | None) -> None:
        self._trace = trace
        self.export = export

    def swap(self, export: OtelExport | None) -> OtelExport | None:
        """Use ``export`` from now on (the trace's records go to it); return the one it replaces, for the caller
        to close off the trio thread."""
        old, self.export = self.export, export
        self._trace.sink = export.observe if export is not None else None
        return old

    async def aclose(self) -> None:
        """Close the export: the last spans sent (bounded by ``trace.otel.timeout_s``) off the trio thread, its
        thread and logging filters gone. Shielded."""
        with trio.CancelScope(shield=True):
            export = self.swap(None)
            if export is not None:
                await trio.to_thread.run_sync(export.close)
                export.poll()


@dataclass(frozen=True)
class Services:
    """The supervisor's long-lived services (see the module docstring)."""

    source: PolicySource
    trace: TraceRecorder
    otel: OtelSlot
    #: the session store (``<state_dir>/sessions.sqlite3``)
    sessions: SessionStore
    #: the agent loops' HTTP clients to model endpoints
    http: ModelHttp
    #: the ports the supervisor itself listens on (its HTTP frontend sets them): never dialled by an egress proxy
    #: or a model request
    own_listeners: OwnListeners
    #: who makes workers' processes (``supervision.spawn``, read once at start)
    spawner: Spawner
    #: the kernel's denials (Landlock, seccomp) read from audit records, explained per call
    kernel_audit: KernelAudit
    #: the compiled schemas of the current tool lists, which a starting worker reuses (each compiled once)
    schema_pool: SchemaPool
    #: what every generation's portal shares (the registry, the frontends' session names, the ledger, the records,
    #: the attachments, the session tool views, the watches)
    calls: CallServices
    #: the nursery the workers, the flusher and the audit reader run in (lives as long as the supervisor)
    nursery: trio.Nursery
    #: the flusher of buffered records and the pruner of old sessions
    upkeep: Upkeep
    #: parts of the service outside the supervisor a reload changes too (the HTTP frontend registers itself)
    reload_participants: list[ReloadParticipant] = field(default_factory=list)


class Upkeep:
    """Writes buffered call records and session writes at least every ``FLUSH_INTERVAL_S``, and deletes sessions
    older than the policy's ``sessions.keep_days`` every ``PRUNE_INTERVAL_S`` (or a quarter of ``keep_days``), in
    steps (``sessions/_prune.py``) with a checkpoint of the store's WAL after each, off the trio thread, so that the
    WAL holds one step at most and calls are served between steps."""

    def __init__(self, trace: TraceRecorder, sessions: SessionStore, otel: OtelSlot) -> None:
        self._trace = trace
        self._sessions = sessions
        self._otel = otel
        self._next_prune = 0.0  # trio's clock
        self._checkpointing = trio.Lock()  # one checkpoint at a time (a reload's prune beside the flusher's)

    async def prune_sessions(self, keep_days: float | None) -> None:
        """Prune by ``keep_days`` (``None``: sessions are kept) now; the next prune is due at its interval."""
        self._next_prune = trio.current_time() + _prune_interval(keep_days)
        if keep_days is None:
            return
        cutoff = time.time() - keep_days * 86400
        gone = records = 0
        while (step := self._sessions.prune_step(cutoff)) is not None:
            gone, records = gone + step.sessions, records + step.records
            await self._checkpoint()
            if step.done:
                break
        if gone or records:
            self._trace.record("sessions_pruned", sessions=gone, records=records, keep_days=keep_days)

    async def _checkpoint(self) -> None:
        if self._sessions.checkpoint_due():  # its fsyncs off the trio thread, which commits meanwhile
            async with self._checkpointing:
                await trio.to_thread.run_sync(self._sessions.checkpoint)

    async def run(self, keep_days: Callable[[], float | None]) -> None:
        """Flush and prune (``keep_days``: the running policy's, asked when a prune is due) until cancelled."""
        while True:
            if trio.current_time() >= self._next_prune:
                await self.prune_sessions(keep_days())
            await trio.sleep(FLUSH_INTERVAL_S)
            self._trace.flush()
            if self._otel.export is not None:
                self._otel.export.poll()
            await self._sessions.flush_off_thread()  # its SQLite work off the trio thread, which calls meanwhile
            await self._checkpoint()


def _prune_interval(keep_days: float | None) -> float:
    return PRUNE_INTERVAL_S if keep_days is None else min(PRUNE_INTERVAL_S, keep_days * 86400 / 4)


async def _shielded(close: Callable[..., Awaitable[None]], *args: Any) -> None:
    """Await ``close(*args)`` shielded from cancellation (a cleanup of an exit stack runs to its end whatever
    cancelled the block)."""
    with trio.CancelScope(shield=True):
        await close(*args)


async def open_services(
    stack: AsyncExitStack,
    source: PolicySource,
    compiled: CompiledPolicy,
    *,
    zygote: Zygote | None,
    model_resolve: Resolver,
) -> Services:
    """Open the services for the first policy, ``compiled`` (their settings that a reload cannot change are read
    from it once), each pushed on ``stack`` as it is made: the trace, the OTel export, the session store, the model
    HTTP clients, the nursery (the flusher and the kernel audit reader in it), the spawner (``zygote``: the one
    launched on the staged code while the policy compiled; it is waited for). ``supervisor_start`` is traced once
    the trace is open, ``supervisor_stop`` when the stack closes.

    Raises what the first step that fails raises (``PolicyRefused``: the OTel SDK is missing;
    ``SessionStoreUnavailable``; ``OSError``), everything made before it given back by ``stack``.
    """
    policy = compiled.config.policy
    trace = TraceRecorder(compiled.trace_path, max_bytes=policy.trace.max_bytes)
    stack.callback(trace.close)
    otel = OtelSlot(trace, open_otel(policy.trace.otel, trace))
    stack.push_async_callback(otel.aclose)
    sessions = SessionStore(os.path.join(compiled.state_dir, "sessions.sqlite3"))
    stack.callback(sessions.close)
    if compiled.uid_claim is not None:  # while it runs, its state dir's uids are in use: `uids release` waits
        stack.callback(UidHold(*compiled.uid_claim).close)
    own_listeners = OwnListeners()
    http = ModelHttp(own_listeners.ports, model_resolve)
    stack.push_async_callback(_shielded, http.aclose)
    trace.record(
        "supervisor_start",
        pid=os.getpid(),
        policy=compiled.config.policy_file,
        toolboxes=[f"{s.agent}/{s.toolbox}" for s in compiled.specs],
    )
    stack.callback(trace.record, "supervisor_stop", pid=os.getpid())
    kernel_audit = KernelAudit(trace, mode=policy.kernel_audit, system_paths=tuple(policy.system_paths))
    calls = CallServices.make(
        ToolRegistry(),
        trace,
        state_dir=compiled.state_dir,
        sessions=sessions,
        media_limits=compiled.media_limits,
        watches=(LimitWatch(trace), kernel_audit),
    )
    nursery = await stack.enter_async_context(trio.open_nursery())
    stack.callback(nursery.cancel_scope.cancel)  # (the workers are stopped before: the caller's later callback)
    spawner = _spawner(compiled, trace, zygote)
    services = Services(
        source=source,
        trace=trace,
        otel=otel,
        sessions=sessions,
        http=http,
        own_listeners=own_listeners,
        spawner=spawner,
        kernel_audit=kernel_audit,
        schema_pool=SchemaPool(),
        calls=calls,
        nursery=nursery,
        upkeep=Upkeep(trace, sessions, otel),
    )
    await services.upkeep.prune_sessions(policy.sessions.keep_days)
    await nursery.start(kernel_audit.run)
    if isinstance(spawner, ZygoteSpawner):
        await nursery.start(spawner.run)
    return services


def _spawner(compiled: CompiledPolicy, trace: TraceRecorder, launched: Zygote | None) -> Spawner:
    """With ``supervision.spawn: zygote``, the zygote's spawner for the staged worker code (``launched``: the
    zygote launched before the compile, which it takes over); else (or no toolbox forked by it) the launcher's."""
    forked = [spec for spec in compiled.specs if not spec.fresh_exec]  # (toolboxes.<name>.spawn: launcher are not)
    if compiled.config.policy.supervision.spawn != "zygote" or not forked or compiled.runtime_dir is None:
        return LauncherSpawner()
    if launched is not None and (launched.code_root, launched.python) != (compiled.runtime_dir, compiled.python):
        launched = None  # (never: the same staged code and interpreter) the caller closes it

    def note(event: str, fields: dict[str, Any]) -> None:
        """A turn of the zygote: a trace record; one line on stderr unless it merely started."""
        trace.record(event, **fields)
        if event != "zygote_started":
            print(f"agents-supervise: {event}: {fields.get('reason', '')}", file=sys.stderr, flush=True)

    return ZygoteSpawner(
        compiled.python,
        compiled.runtime_dir,
        env=compiled.specs[0].env,
        modules=preload_modules((spec.plan.entry, spec.kind) for spec in forked),
        note=note,
        launched=launched,
    )


def launch_zygote(config: LoadedConfig, staged: StagedCode) -> Zygote | None:
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


async def discard_zygote(zygote: Zygote | None) -> None:
    """Stop a zygote :func:`launch_zygote` launched (a no-op once its spawner closed it); shielded."""
    if zygote is not None:
        with trio.CancelScope(shield=True):
            await zygote.aclose()


def sweep_stale_groups(compiled: CompiledPolicy, trace: TraceRecorder) -> None:
    """Remove the groups a supervisor killed with SIGKILL left behind (housekeeping: a failure costs nothing but
    the sweep, and is traced)."""
    for layout in {spec.cgroup.layout for spec in compiled.specs if spec.cgroup is not None}:
        try:
            removed = sweep_stale_cgroups(layout)
        except Exception as exc:
            trace.record("stale_cgroups_sweep_failed", reason=f"{type(exc).__name__}: {exc}"[:2000])
            continue
        if removed:
            trace.record("stale_cgroups_removed", groups=removed)
