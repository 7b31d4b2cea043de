"""One worker process: its launch, its confinement's trusted half (cgroup, egress bridge) and its end.

A :class:`Worker` is started with :meth:`Worker.start` (make its cgroup, have its spawner (``_spawner.py``: the
zygote's fork, which joins the group itself and finds its confinement plan already in its stdin, or a fresh launcher,
which is moved into the group and then sent the plan) make the process, serve its bridge, wait for ``hello``) and
stopped with :meth:`Worker.stop` (bounded whatever the worker does). Everything said over its pipes - calls,
wall-time limits, cancels, portal/host requests, events, tool lists, the worker's state - is the business of its
:class:`~supervisor.workers._connection.WorkerConnection`, which needs no process (its tests run without root).
Restarting is not the worker's business (see ``_runner.py``). How to start one is a
:class:`~supervisor.workers._worker_spec.WorkerSpec`; the cgroup of a start is ``_worker_cgroup.py``'s.

Every call ends in exactly one :class:`ToolResult`; a worker that dies or misbehaves fails its in-flight calls with
status ``error`` and a message naming the cause. Nothing a worker sends can raise into the supervisor.
"""

from __future__ import annotations

import dataclasses
import os
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic

import trio

from sandbox import (
    AllowedHosts,
    BridgeError,
    BridgeSockets,
    CgroupInstance,
    ConfinementError,
    no_own_ports,
    receive_bridge,
)
from supervisor._errors import WorkerStartError, execution_error, first_leaf

from ._connection import (
    CANCEL_GRACE_S,
    MAX_EVENTS,
    MAX_REQUESTS_IN_FLIGHT,
    MAX_TOOLS_CHANGED,
    ConnectionState,
    OriginT,
    WorkerConnection,
)
from ._exit_status import describe_exit
from ._launch import launch, serve_bridge
from ._worker_cgroup import StartCgroup
from ._worker_spec import WorkerSpec
from ._zygote_client import ZygoteChild

if TYPE_CHECKING:
    from sandbox import ConfinementPlan
    from supervisor.tools import CompiledSchema
    from toolboxes import ToolResult

    from ._spawner import SpawnedChild, Spawner

__all__ = [
    "CANCEL_GRACE_S",
    "MAX_EVENTS",
    "MAX_REQUESTS_IN_FLIGHT",
    "MAX_TOOLS_CHANGED",
    "Worker",
    "WorkerSpec",
    "WorkerState",
]

#: How much of a worker's stderr is kept for diagnostics.
_STDERR_KEEP = 8192

#: A worker's states are its connection's.
WorkerState = ConnectionState


#: handler(worker, message) -> reply dict ({"result": ...} or {"error": ...})
RequestHandler = Callable[["Worker[OriginT]", dict[str, Any]], Awaitable[dict[str, Any]]]
EventHandler = Callable[["Worker[OriginT]", str, dict[str, Any]], None]


class Worker(Generic[OriginT]):
    """One confined worker process serving one toolbox: the launch, the process and its cgroup and bridge, over a
    :class:`~supervisor.workers._connection.WorkerConnection` that holds the protocol and the worker's state."""

    def __init__(
        self,
        spec: WorkerSpec,
        *,
        on_request: RequestHandler[OriginT],
        on_event: EventHandler[OriginT],
        reuse: Sequence[CompiledSchema] = (),
        spawner: Spawner | None = None,
        own_ports: Callable[[], frozenset[int]] = no_own_ports,
    ) -> None:
        self.spec = spec
        self._spawner = spawner
        self._own_ports = own_ports
        self._reuse = reuse
        self._on_request = on_request
        self._on_event = on_event
        self._proc: SpawnedChild | None = None
        self._stderr: deque[bytes] = deque()
        self._stderr_size = 0
        #: the protocol over the process's pipes (made at :meth:`start`; until then a worker is ``starting``)
        self.conn: WorkerConnection[OriginT] | None = None
        self._not_started = trio.Event()
        self._not_started_reason: str | None = None
        self._group = StartCgroup(
            spec.cgroup,
            f"{spec.agent}.{spec.toolbox}",
            lambda reason: self._on_event(self, "cgroup_unavailable", {"reason": reason}),
        )

    @property
    def cgroup(self) -> CgroupInstance | None:
        """This start's cgroup (``None``: none, not made yet, or removed once the worker was reaped)."""
        return self._group.instance

    # -- the connection's view ---------------------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def spawned_by(self) -> str | None:
        """``"zygote"`` (a fork of it: its address layout and seeds) or ``"launcher"`` (a fresh exec), once
        spawned."""
        if self._proc is None:
            return None
        return "zygote" if isinstance(self._proc, ZygoteChild) else "launcher"

    @property
    def state(self) -> WorkerState:
        if self.conn is None:
            return WorkerState.DEAD if self._not_started.is_set() else WorkerState.STARTING
        return self.conn.state

    @property
    def dead(self) -> trio.Event:
        return self.conn.dead if self.conn is not None else self._not_started

    @property
    def death_reason(self) -> str | None:
        return self.conn.death_reason if self.conn is not None else self._not_started_reason

    @property
    def tools(self) -> list[dict[str, Any]]:
        return self.conn.tools if self.conn is not None else []

    @property
    def schemas(self) -> list[CompiledSchema]:
        return self.conn.schemas if self.conn is not None else []

    @property
    def load_errors(self) -> list[dict[str, Any]]:
        return self.conn.load_errors if self.conn is not None else []

    @property
    def output_schemas(self) -> list[CompiledSchema | None]:
        return self.conn.output_schemas if self.conn is not None else []

    @property
    def catalog(self) -> dict[str, list[dict[str, Any]]]:
        """resources, resource_templates, prompts (toolboxes/_catalog.py), checked"""
        return self.conn.catalog if self.conn is not None else {}

    @property
    def origins(self) -> dict[int, OriginT | None]:
        """The origin of each call in flight, by call id (what the caller gave :meth:`call`)."""
        return self.conn.origins if self.conn is not None else {}

    @property
    def _pending(self) -> dict[int, Any]:
        return self.conn._pending if self.conn is not None else {}

    @property
    def _next_id(self) -> int:
        return self.conn._next_id if self.conn is not None else 1

    def stderr_tail(self) -> str:
        return b"".join(self._stderr).decode("utf-8", "replace")[-2000:]

    def _fail_start(self, reason: str) -> None:
        self._not_started_reason = reason
        self._not_started.set()

    # -- lifecycle ---------------------------------------------------------------------------------------------
    async def start(self, nursery: trio.Nursery) -> None:
        """Spawn the worker, send its plan and wait for ``hello``.

        Raises :class:`WorkerStartError` naming the cause when the worker cannot start (launcher refused to confine,
        toolbox failed to open, no hello in time). The worker's reader tasks live in ``nursery``.
        """
        spec = self.spec
        plan = spec.plan
        try:
            procs_fds = self._group.make()  # before the spawn: a fork of the zygote joins it before it reads its plan
        except ConfinementError as exc:
            self._fail_start(f"could not be put in its cgroup: {exc}")
            raise WorkerStartError(f"toolbox {spec.toolbox}: the worker could not be put in its cgroup: {exc}") from exc
        if self.cgroup is None and spec.address_space_fallback is not None:  # no group bounds its memory: the rlimit
            plan = self._without_cgroup(plan)
        try:
            launched = await launch(
                spec.argv,
                plan,
                env=spec.env,
                cwd=spec.cwd,
                pass_fds=spec.pass_fds,
                spawner=None if spec.fresh_exec else self._spawner,  # None: the launcher, a fresh exec
                cgroup_procs=procs_fds,
                prewrite_plan=True,
            )
        except OSError as exc:
            self._fail_start(f"could not be started: {exc}")
            self._group.remove_unused()
            raise WorkerStartError(f"toolbox {spec.toolbox}: cannot start its worker: {exc}") from exc
        finally:
            for fd in procs_fds:
                os.close(fd)
        proc = launched.proc
        self._proc = proc
        conn: WorkerConnection[OriginT] = WorkerConnection(
            spec.toolbox,
            proc.stdin,
            proc.stdout,
            wall_time_s=spec.wall_time_s,
            on_request=lambda message: self._on_request(self, message),
            on_event=lambda kind, data: self._on_event(self, kind, data),
            terminate=self._terminate,
            exit_reason=self._exit_reason,
            reuse=self._reuse,
        )
        self.conn = conn
        if self.cgroup is not None and not proc.cgroup_joined:  # a launcher: moved in before it is sent its plan
            try:
                joined = self._group.enter(proc.pid)
            except ConfinementError as exc:
                launched.close_carrier()
                await self.kill(f"could not be put in its cgroup: {exc}")
                raise WorkerStartError(
                    f"toolbox {spec.toolbox}: the worker could not be put in its cgroup: {exc}"
                ) from exc
            if not joined and spec.address_space_fallback is not None:
                launched.plan = self._without_cgroup(launched.plan)
                launched.frame = b""  # nothing of it was sent: the launcher got none before its move
        unsent = launched.unsent_plan()
        nursery.start_soon(self._read_stderr)
        await nursery.start(conn.serve)
        with trio.move_on_after(spec.start_timeout_s):
            try:
                if unsent:  # (a fork of the zygote found all of it in its pipe already)
                    await conn.writer.send(unsent)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # the reader sees the exit and reports why
            if launched.carrier is not None:
                try:
                    bridge = await receive_bridge(trio.socket.from_stdlib_socket(launched.carrier))
                except (BridgeError, OSError):
                    await conn.dead.wait()  # the launcher failed before the bridge: its exit says why
                else:
                    nursery.start_soon(self._serve_bridge, bridge)
                finally:
                    launched.close_carrier()
            await conn.wait_started()
        if conn.state is WorkerState.READY:
            return
        if not conn.dead.is_set():
            await self.kill(f"sent no hello within {spec.start_timeout_s:g} s")
        if conn.fatal:
            self._stderr.append(conn.fatal.encode())
        tail = self.stderr_tail().strip().splitlines()
        detail = tail[-1] if tail else ""
        raise WorkerStartError(
            f"toolbox {spec.toolbox}: the worker {conn.death_reason}" + (f": {detail}" if detail else "")
        )

    def _without_cgroup(self, plan: ConfinementPlan) -> ConfinementPlan:
        """``plan`` with the address-space rlimit that stands in for a memory limit no group enforces."""
        return dataclasses.replace(
            plan, rlimits=dataclasses.replace(plan.rlimits, address_space_bytes=self.spec.address_space_fallback)
        )

    async def _release_cgroup(self) -> None:
        """Remove this start's cgroup once the launcher was reaped (:meth:`StartCgroup.release`)."""
        if self._proc is None or self._proc.poll() is None:
            return
        await self._group.release()

    async def _serve_bridge(self, bridge: BridgeSockets) -> None:
        """Serve the worker's egress proxy and DNS stub until the worker dies; then close the sockets."""
        rules = AllowedHosts.parse(
            self.spec.allowed_hosts,
            private_networks=self.spec.private_networks,
            cname_targets=self.spec.cname_targets,
            loopback=self.spec.loopback,
            policy_key=self.spec.policy_key,
        )

        def on_decision(decision: dict[str, Any]) -> None:
            self._on_event(self, "egress", dict(decision))

        try:
            await serve_bridge(
                bridge,
                rules,
                toolbox=self.spec.toolbox,
                until=self.dead.wait,
                on_decision=on_decision,
                credentials=self.spec.credentials,
                terminator=self.spec.terminator,
                own_ports=self._own_ports,
            )
        except Exception as exc:  # a bug in the bridge ends this worker (it restarts), never the supervisor
            leaf = first_leaf(exc)
            self._on_event(
                self, "internal_error", {"where": "egress bridge", "error": f"{type(leaf).__name__}: {leaf}"}
            )
            if not self.dead.is_set():
                await self.kill(f"its egress bridge failed ({type(leaf).__name__}) and was killed")

    async def _terminate(self) -> None:
        """The connection's way to end the worker: SIGKILL, reap, remove its cgroup."""
        if self._proc is not None:
            await self._proc.kill()
            await self._release_cgroup()

    async def _exit_reason(self) -> str:
        """After EOF on the worker's stdout: how it ended (waits at most 5 s, then kills it)."""
        assert self._proc is not None
        reason: str | None = None
        with trio.move_on_after(5):
            reason = describe_exit(await self._proc.wait())
        if reason is None:
            await self._proc.kill()
            reason = "closed its pipe and was killed"
        await self._release_cgroup()
        return reason

    async def kill(self, reason: str) -> None:
        """Kill the worker at once (SIGKILL) and fail its in-flight calls with ``reason``."""
        if self.conn is not None:
            await self.conn.kill(reason)
        else:
            self._fail_start(reason)
            await self._terminate()

    async def stop(self) -> None:
        """Stop gracefully: ``shutdown`` frame, then the process's kill path (SIGTERM, grace, SIGKILL). Bounded:
        about ``0.5 + 2 * shutdown_grace_s`` seconds whatever the worker does."""
        if self._proc is None:
            return
        conn = self.conn
        if conn is not None and conn.state is not WorkerState.DEAD:
            with trio.CancelScope(shield=True):
                await conn.shutdown()
                with trio.move_on_after(self.spec.shutdown_grace_s):
                    await self._proc.wait()
        if conn is not None:
            conn.mark_dead("was stopped")
        await self._proc.aclose(grace_s=self.spec.shutdown_grace_s)
        await self._release_cgroup()

    # -- I/O ---------------------------------------------------------------------------------------------------
    async def _read_stderr(self) -> None:
        assert self._proc is not None
        try:
            while chunk := await self._proc.stderr.receive_some(65536):
                self._stderr.append(chunk)
                self._stderr_size += len(chunk)
                while self._stderr_size > _STDERR_KEEP and len(self._stderr) > 1:
                    self._stderr_size -= len(self._stderr.popleft())
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    # -- calls ---------------------------------------------------------------------------------------------------
    async def call(
        self,
        tool: str,
        args: dict[str, Any],
        ctx: dict[str, Any],
        wall_time_s: float | None = None,
        origin: OriginT | None = None,
        op: str | None = None,
    ) -> ToolResult:
        """Run ``tool`` (see :meth:`WorkerConnection.call`); never raises for the worker's faults."""
        if self.conn is None:
            return execution_error(
                f"toolbox {self.spec.toolbox} is not running (its worker "
                f"{self.death_reason or 'is starting'}); try again shortly"
            )
        return await self.conn.call(tool, args, ctx, wall_time_s, origin, op=op)
