"""The toolboxes' runners: made for a generation's specs, started (all at once, bounded, or as calls need them),
stopped; a toolbox that cannot start is its load error, never the supervisor's end.

:class:`RunnerStarts` is long-lived (its spawner, schema pool and worker handlers are the supervisor's); the
runners it makes belong to the generation that asked for them. The workers start concurrently, at most
``parallel_starts`` at once (more when the zygote forks every one of them: a fork costs a tenth of a launcher's
CPU); the tool list and the load errors are in the policy's order whatever order they finish in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from supervisor.config import toolbox_not_loaded
from supervisor.workers import ToolboxRunner, Worker

from ._errors import WorkerStartError, first_leaf

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from sandbox import OwnListeners
    from supervisor.calls import CallOrigin, CallRunner, CallWorker
    from supervisor.config import Supervision
    from supervisor.plan import CompiledPolicy
    from supervisor.tools import CompiledSchema, SchemaPool
    from supervisor.traces import TraceRecorder
    from supervisor.workers import EventHandler, RequestHandler, Spawner, WorkerSpec

__all__ = ["RunnerStarts", "load_failed"]


def load_failed(trace: TraceRecorder, runner: CallRunner, source: str, exc: BaseException) -> None:
    """``runner``'s toolbox could not load at ``source`` (``worker start``, ``tool list``): disable it, its load
    error naming the cause (traced ``load_error``)."""
    leaf = first_leaf(exc)
    why = str(leaf) if isinstance(leaf, WorkerStartError) else f"{type(leaf).__name__}: {leaf}"
    error = toolbox_not_loaded(runner.name, runner.spec.agent, source, why)
    runner.fail_to_load(error["message"], error)
    trace.record("load_error", **error)


class RunnerStarts:
    """Makes and starts the toolboxes' runners of one supervisor; ``on_request``, ``on_event``, ``on_tools``: what
    the supervisor does with what every worker sends (the running generation's portal answers requests)."""

    def __init__(
        self,
        *,
        trace: TraceRecorder,
        spawner: Spawner,
        schema_pool: SchemaPool,
        own_listeners: OwnListeners,
        nursery: trio.Nursery,
        on_request: RequestHandler[CallOrigin],
        on_event: EventHandler[CallOrigin],
        on_tools: Callable[[CallRunner], None],
    ) -> None:
        self._trace = trace
        self._spawner = spawner
        self._schema_pool = schema_pool
        self._own_listeners = own_listeners
        self._nursery = nursery
        self._on_request = on_request
        self._on_event = on_event
        self._on_tools = on_tools

    def new_runner(self, spec: WorkerSpec, supervision: Supervision) -> CallRunner:
        """A runner for ``spec`` under the policy's ``supervision`` settings (not started)."""
        return ToolboxRunner(
            spec,
            supervision,
            on_request=self._on_request,
            on_event=self._on_event,
            on_tools=self._on_tools,
            make_worker=self._make_worker,
        )

    def _make_worker(self, spec: WorkerSpec, *, reuse: Sequence[CompiledSchema] = (), **kwargs: Any) -> CallWorker:
        """A worker of ``spec`` made by the spawner, reusing ``reuse`` (its toolbox's last list) and every schema the
        other toolboxes' lists compiled (the schema pool)."""
        return Worker(
            spec,
            reuse=[*reuse, *self._schema_pool.schemas()],
            spawner=self._spawner,
            own_ports=self._own_listeners.ports,
            **kwargs,
        )

    def parallel_starts(self, runners: Sequence[CallRunner], compiled: CompiledPolicy) -> int:
        """How many of ``runners`` start at once: the policy's ``supervision.parallel_starts``, or by default a few
        per CPU for launchers and more when the zygote would fork every one of them now."""
        if all(
            not r.spec.fresh_exec and self._spawner.forks(r.spec.argv, env=r.spec.env, cwd=r.spec.cwd) for r in runners
        ):
            return compiled.zygote_parallel_starts
        return compiled.parallel_starts

    async def start(self, runners: Sequence[CallRunner], compiled: CompiledPolicy) -> None:
        """Start ``runners`` (of the policy ``compiled``) in the supervisor's nursery, up to
        :meth:`parallel_starts` at once; return once each said hello or failed to load (its load error)."""
        places = trio.CapacityLimiter(self.parallel_starts(runners, compiled))
        async with trio.open_nursery() as starting:
            for runner in runners:
                starting.start_soon(self._start_one, runner, places)

    async def _start_one(self, runner: CallRunner, places: trio.CapacityLimiter) -> None:
        """Start ``runner`` (holding one of ``places`` until its worker said hello); a failed first start is its
        toolbox's load error."""
        try:
            async with places:  # held until the worker said hello (or its start failed)
                await self._nursery.start(runner.run)
        except Exception as exc:  # its first start failed (WorkerStartError or a bug): a load error, not our end
            load_failed(self._trace, runner, "worker start", exc)

    @staticmethod
    async def stop(runners: Sequence[CallRunner]) -> None:
        """Stop ``runners`` at once (each graceful, then SIGKILL), shielded: a stop always ends."""
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as stopping:
                for runner in runners:
                    stopping.start_soon(runner.stop)
