"""Supervision of one toolbox: keep its worker running, restart it with backoff, rest it after a crash loop.

A :class:`ToolboxRunner` owns at most one live :class:`~supervisor.workers._worker.Worker` at a time. When the worker
dies it restarts it after an exponential backoff (``restart_backoff_initial_s`` doubling up to
``restart_backoff_max_s``); more than ``crash_loop_max_restarts`` deaths within ``crash_loop_window_s`` disable the
toolbox for ``crash_loop_cooldown_s`` (trace ``crash_loop``), and its calls answer with an ``error`` that says so and
until when (:attr:`ToolboxRunner.failed_reason`; the registry puts it in each of its tools' descriptions, the
runner tells the supervisor through ``on_tools`` when it goes down and when it comes back). After the cool-down the
toolbox starts afresh (trace ``crash_loop_recovered``, the death count and the backoff reset), so one agent's
misbehaving command never disables its toolbox for good; a policy reload does not wait for the cool-down (it
replaces a runner that :attr:`~ToolboxRunner.crash_looped` with a fresh one: the operator fixed the cause). A call
that arrives while the worker is restarting waits for it (bounded by the call's wall time).

A lazy toolbox (``WorkerSpec.lazy``, the policy's ``start: lazy``) serves its tool list from
:mod:`~supervisor.workers._tool_cache` (or from one start at supervisor start, then stopped) and starts its worker
on its first call; from then on it is supervised as any other.

Times are trio's clock (``trio.current_time``), so tests drive a runner with ``trio.testing.MockClock``; the
worker is made by ``make_worker`` (default :class:`~supervisor.workers._worker.Worker`), so tests give a fake one.
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING, Any, Generic

import trio

from supervisor._errors import WorkerStartError, execution_error

from ._connection import CANCEL_GRACE_S, OriginT
from ._tool_cache import CachedTools, payload_fingerprint, read_tool_cache, write_tool_cache
from ._worker import EventHandler, RequestHandler, Worker, WorkerSpec, WorkerState

if TYPE_CHECKING:
    from collections.abc import Callable

    from supervisor.config import LoadError, Supervision
    from supervisor.tools import CompiledSchema
    from toolboxes import ToolResult

__all__ = ["ToolboxRunner"]


class ToolboxRunner(Generic[OriginT]):
    """Keeps one toolbox's worker alive for the supervisor."""

    def __init__(
        self,
        spec: WorkerSpec,
        supervision: Supervision,
        *,
        on_request: RequestHandler[OriginT],
        on_event: EventHandler[OriginT],
        on_tools: Callable[[ToolboxRunner[OriginT]], None],
        make_worker: Callable[..., Worker[OriginT]] = Worker,
    ) -> None:
        self.spec = spec
        self.supervision = supervision
        self.worker: Worker[OriginT] | None = None
        self.failed_reason: str | None = None
        #: why this toolbox did not load (its worker's first start, its tool list), as its load error; ``None``: it
        #: loaded (or has not tried yet)
        self.load_failure: LoadError | None = None
        #: the end of a crash loop's cool-down (wall clock, ``time.time()``); ``None`` when not resting
        self.resting_until: float | None = None
        self.restarts = 0
        self._on_request = on_request
        self._on_event = on_event
        self._on_tools = on_tools
        self._deaths: deque[float] = deque()
        self._ready = trio.Event()
        self._stopping = False
        self._stopped = trio.Event()  # set by stop(): ends a backoff or a cool-down at once
        self._make_worker = make_worker
        self._cached: CachedTools | None = None  # a lazy toolbox's list until its worker runs
        self._wanted = trio.Event()  # a lazy toolbox's first call arrived

    @property
    def name(self) -> str:
        return self.spec.toolbox

    @property
    def key(self) -> tuple[str, str]:
        """``(agent, toolbox)``: what identifies the toolbox (two agents may each have one of a name)."""
        return (self.spec.agent, self.spec.toolbox)

    @property
    def ends_within_s(self) -> float:
        """A call through :meth:`call` returns within this many seconds of its start, whatever the worker does:
        a restart's wait and the call share its wall time, and a call past it is cancelled in the worker, which is
        killed when it does not stop within the cancel's grace (:meth:`WorkerConnection.call`)."""
        return self.spec.wall_time_s + CANCEL_GRACE_S

    @property
    def crash_looped(self) -> bool:
        """Whether the toolbox is down after a crash loop, waiting out its cool-down."""
        return self.resting_until is not None

    @property
    def tools(self) -> list[dict[str, Any]]:
        if self.worker is not None:
            return self.worker.tools
        return self._cached.tools if self._cached is not None else []

    def catalog(self, kind: str) -> list[dict[str, Any]]:
        """The worker's current ``resources``, ``resource_templates`` or ``prompts`` (toolboxes/_catalog.py)."""
        if self.worker is not None:
            return self.worker.catalog.get(kind, [])
        return self._cached.catalog.get(kind, []) if self._cached is not None else []

    @property
    def schemas(self) -> list[CompiledSchema]:
        """The compiled input schema of each of :attr:`tools` (same order)."""
        return self.worker.schemas if self.worker else []

    @property
    def output_schemas(self) -> list[CompiledSchema | None]:
        """The compiled output schema of each of :attr:`tools` (``None``: it has none)."""
        return self.worker.output_schemas if self.worker else []

    @property
    def load_errors(self) -> list[dict[str, Any]]:
        if self.worker is not None:
            return self.worker.load_errors
        return self._cached.load_errors if self._cached is not None else []

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start the worker, report started (or raise when the first start fails), then keep it alive forever.

        Meant for ``nursery.start``. The first start failing raises (``WorkerStartError`` naming the cause, or the
        unexpected exception), before ``started``: the supervisor turns it into a load error of this toolbox, which
        then never serves (:meth:`fail_to_load`); a later start failing counts as a death.
        """
        async with trio.open_nursery() as nursery:
            first, spawned = True, False
            if getattr(self.spec, "lazy", False):  # test doubles of a spec may not say
                await self._list_lazily(nursery)
                self._on_tools(self)
                task_status.started()
                await self._wanted.wait()  # the first call
                first = False  # a failed start now counts as a death (the supervisor runs already)
            backoff = self.supervision.restart_backoff_initial_s
            while not self._stopping:
                worker = self._make_worker(
                    self.spec, on_request=self._on_request, on_event=self._on_event_wrapper, reuse=self.schemas
                )
                try:
                    await worker.start(nursery)
                except Exception as exc:  # WorkerStartError, or a bug on the start path: never the supervisor's end
                    if not isinstance(exc, WorkerStartError):
                        with trio.CancelScope(shield=True):
                            await worker.kill(f"could not be started: {type(exc).__name__}: {exc}")
                    if first:
                        raise
                    self._on_event(worker, "worker_start_failed", {"reason": str(exc)})
                except BaseException:  # cancelled while starting (the supervisor stops): end what was started
                    with trio.CancelScope(shield=True):
                        await worker.kill("its start was interrupted: the supervisor is stopping")
                    raise
                else:
                    if self._stopping:  # stopped while this one started: it must not outlive the stop
                        with trio.CancelScope(shield=True):
                            await worker.stop()
                        if first:
                            task_status.started()
                        break
                    self.worker = worker
                    self._ready.set()
                    self._on_event(
                        worker, "worker_spawn", {"pid": worker.pid, "restart": spawned, "spawned_by": worker.spawned_by}
                    )
                    spawned = True
                    self._cached = None
                    self._on_tools(self)
                    if first:
                        task_status.started()
                    first = False
                    started = trio.current_time()
                    await worker.dead.wait()
                    self._ready = trio.Event()
                    self._on_event(
                        worker,
                        "worker_exit",
                        {"reason": worker.death_reason, "stderr_tail": worker.stderr_tail()[-500:]},
                    )
                    if trio.current_time() - started > self.supervision.crash_loop_window_s:
                        backoff = self.supervision.restart_backoff_initial_s
                if self._stopping:
                    break
                now = trio.current_time()
                self._deaths.append(now)
                while self._deaths and now - self._deaths[0] > self.supervision.crash_loop_window_s:
                    self._deaths.popleft()
                if len(self._deaths) > self.supervision.crash_loop_max_restarts:
                    await self._rest(worker)
                    backoff = self.supervision.restart_backoff_initial_s
                    continue
                with trio.move_on_after(backoff):
                    await self._stopped.wait()
                if self._stopping:
                    break
                backoff = min(backoff * 2, self.supervision.restart_backoff_max_s)
                self.restarts += 1
                self._on_event(worker, "worker_restart", {"restarts": self.restarts})

    async def _list_lazily(self, nursery: trio.Nursery) -> None:
        """A lazy toolbox's tool list before its first call: the cache's, or one start's (then stopped, the list
        cached). Raises as a first start does when that start fails (a load error of the toolbox)."""
        path = self.spec.tool_cache
        fingerprint = payload_fingerprint(self.spec.plan.payload)
        cached = read_tool_cache(path, fingerprint) if path else None
        if cached is not None:
            self._cached = cached
            return
        worker = self._make_worker(self.spec, on_request=self._on_request, on_event=self._on_event_wrapper)
        try:
            await worker.start(nursery)
        except BaseException as exc:
            with trio.CancelScope(shield=True):
                await worker.kill(f"could not be started to list its tools: {type(exc).__name__}: {exc}")
            raise
        self._on_event(worker, "worker_spawn", {"pid": worker.pid, "restart": False, "lazy": "listing"})
        self._cached = CachedTools(list(worker.tools), list(worker.load_errors), dict(worker.catalog))
        with trio.CancelScope(shield=True):
            await worker.stop()
        self._on_event(
            worker, "worker_exit", {"reason": "stopped after listing its tools (start: lazy)", "stderr_tail": ""}
        )
        if path:
            try:
                await trio.to_thread.run_sync(write_tool_cache, path, fingerprint, self._cached)
            except OSError as exc:  # the next start describes it again; nothing else is lost
                self._on_event(worker, "tool_cache_unwritable", {"path": path, "reason": str(exc)})

    async def _rest(self, worker: Worker[OriginT]) -> None:
        """Keep the toolbox down for the cool-down after a crash loop (calls and its tools' descriptions get the
        reason and the time it is tried again), then clear it. A stop ends the rest at once."""
        cooldown = self.supervision.crash_loop_cooldown_s
        deaths, window = len(self._deaths), self.supervision.crash_loop_window_s
        self.resting_until = time.time() + cooldown
        until = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.resting_until))
        self.failed_reason = (
            f"toolbox {self.name} is disabled for {cooldown:g} s, until {until}: its worker died {deaths} times "
            f"within {window:g} s (last: {worker.death_reason}). It is started again after the "
            "cool-down, or at once by a policy reload (SIGHUP) once the cause is fixed."
        )
        self._on_event(worker, "crash_loop", {"reason": self.failed_reason, "deaths": deaths, "cooldown_s": cooldown})
        self._ready.set()  # wake waiters so they get the failure
        self._on_tools(self)  # its tools now say why they are not served
        with trio.move_on_after(cooldown):
            await self._stopped.wait()
        if self._stopping:
            return
        self._deaths.clear()
        self._ready = trio.Event()
        self.failed_reason = None
        self.resting_until = None
        self._on_event(worker, "crash_loop_recovered", {"cooldown_s": cooldown, "deaths": deaths})
        self._on_tools(self)

    def fail_to_load(self, message: str, error: LoadError | None = None) -> None:
        """Disable this toolbox for good: its calls answer with ``message``. ``error``: its load error, when it
        could not load (:attr:`load_failure`); ``None``: it is being stopped or restarted (a policy reload)."""
        self.failed_reason = message
        if error is not None:
            self.load_failure = error
        self._ready.set()  # wake waiters so they get the failure

    def _on_event_wrapper(self, worker: Worker[OriginT], kind: str, data: dict[str, Any]) -> None:
        if kind == "tools_changed":
            self._on_tools(self)
        self._on_event(worker, kind, data)

    async def call(
        self,
        tool: str,
        args: dict[str, Any],
        ctx: dict[str, Any],
        wall_time_s: float | None = None,
        origin: OriginT | None = None,
        op: str | None = None,
    ) -> ToolResult:
        """Call ``tool`` on the live worker, waiting for a restart in progress if needed."""
        limit = self.spec.wall_time_s if wall_time_s is None else wall_time_s
        if not limit >= 0.001:  # at least a millisecond, as what a restart's wait leaves
            limit = 0.001
        self._wanted.set()  # a lazy toolbox's worker starts now
        worker = self.worker
        if self.failed_reason:
            return execution_error(self.failed_reason)
        if worker is None or worker.state is not WorkerState.READY:
            deadline = trio.current_time() + limit
            with trio.move_on_at(deadline):
                while not self.failed_reason:
                    await self._ready.wait()
                    worker = self.worker
                    if worker is not None and worker.state is WorkerState.READY:
                        break
                    await trio.sleep(0.01)
            if self.failed_reason:
                return execution_error(self.failed_reason)
            if worker is None or worker.state is not WorkerState.READY:
                return execution_error(
                    f"toolbox {self.name} is restarting and did not come back within {limit:g} s; try again later"
                )
            limit = max(0.001, deadline - trio.current_time())  # what the wait left
        if op is None:  # a tool call, the only kind every worker (and test double) serves
            return await worker.call(tool, args, ctx, limit, origin)
        return await worker.call(tool, args, ctx, limit, origin, op=op)

    async def stop(self) -> None:
        """Stop the worker for good (graceful, bounded); a restart waiting out its backoff or cool-down ends."""
        self._stopping = True
        self._stopped.set()
        self._wanted.set()  # a lazy toolbox that never started: its run ends
        if self.worker is not None:
            await self.worker.stop()
