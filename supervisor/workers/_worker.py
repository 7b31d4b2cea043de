"""One worker process: its launch, its confinement's trusted half (cgroup, egress bridge) and its end.

A :class:`Worker` is started with :meth:`Worker.start` (make its cgroup, have its spawner (``_spawner.py``: the
zygote's fork, which joins the group itself and finds its confinement plan already in its stdin, or a fresh launcher,
which is moved into the group and then sent the plan) make the process, serve its bridge, wait for ``hello``) and
stopped with :meth:`Worker.stop` (bounded whatever the worker does). Everything said over its pipes - calls,
wall-time limits, cancels, portal/host requests, events, tool lists, the worker's state - is the business of its
:class:`~supervisor.workers._connection.WorkerConnection`, which needs no process (its tests run without root).
Restarting is not the worker's business (see ``_runner.py``).

Every call ends in exactly one :class:`ToolResult`; a worker that dies or misbehaves fails its in-flight calls with
status ``error`` and a message naming the cause. Nothing a worker sends can raise into the supervisor.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import signal
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic

import trio

from sandbox import (
    AllowedHosts,
    BridgeError,
    BridgeSockets,
    CgroupInstance,
    CgroupPlan,
    ConfinementError,
    create_cgroup,
    enter_cgroup,
    no_own_ports,
    open_procs_files,
    receive_bridge,
    remove_cgroup,
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
from ._launch import launch, serve_bridge
from ._zygote_client import ZygoteChild

if TYPE_CHECKING:
    from sandbox import ConfinementPlan, Credential, Terminator
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


@dataclass
class WorkerSpec:
    """How to start one toolbox's worker (built by ``_compile.py``)."""

    toolbox: str
    kind: str
    argv: list[str]
    env: dict[str, str]
    cwd: str
    plan: ConfinementPlan
    wall_time_s: float
    start_timeout_s: float = 30.0
    shutdown_grace_s: float = 2.0
    pass_fds: tuple[int, ...] = ()
    agent: str = ""
    #: public tool names this toolbox may call through the portal (Lua AllowedTools); empty: none
    allowed_tools: tuple[str, ...] = ()
    #: AllowedHosts of the egress bridge (empty: the worker gets no bridge and no network at all)
    allowed_hosts: tuple[str, ...] = ()
    #: private ranges the egress proxy may dial for this worker (the policy's network.allow_private_ranges and the
    #: toolbox's allow_private_ranges)
    private_networks: tuple[str, ...] = ()
    #: the policy opens the host's loopback to this worker's loopback entries (allow_loopback)
    loopback: bool = False
    #: where the policy opens this toolbox's address classes (``toolboxes.<agent>/<name>``), for refusals to name
    policy_key: str = ""
    #: names an allowed host may be a CNAME of without being allowed itself (the policy's cname_targets)
    cname_targets: tuple[str, ...] = ()
    #: credentials its egress proxy adds to requests their bindings match (values: never sent to the worker)
    credentials: tuple[Credential, ...] = ()
    #: the supervisor's CA when the toolbox's TLS is terminated by its proxy (tls_termination); None: tunnels
    terminator: Terminator | None = None
    #: the worker's cgroup (pids.max, memory), made at each start; None: no cgroup
    cgroup: CgroupPlan | None = None
    #: RLIMIT_AS to set after all when the (optional) cgroup that was to bound the worker's memory cannot be made
    #: at a start; the plan carries none while a cgroup memory limit is in force (docs/CONFINEMENT.md)
    address_space_fallback: int | None = None
    #: ``start: lazy``: the worker starts on the first call; its tools are listed before from ``tool_cache``
    #: (``_tool_cache.py``), or from one start at supervisor start when that holds no list for this payload
    lazy: bool = False
    #: the supervisor's own file with the last tool list of a lazy toolbox
    tool_cache: str | None = None
    #: always spawned by the launcher, a fresh exec (the policy's ``toolboxes.<name>.spawn: launcher``), never
    #: forked by the zygote: the worker gets its own address layout, stack-canary seed and Python hash seed
    fresh_exec: bool = False
    warnings: list[str] = field(default_factory=list)
    #: what ``agents-supervise check`` shows about this worker (rules, exactness, hosts)
    report: dict[str, Any] = field(default_factory=dict)


#: handler(worker, message) -> reply dict ({"result": ...} or {"error": ...})
RequestHandler = Callable[["Worker[OriginT]", dict[str, Any]], Awaitable[dict[str, Any]]]
EventHandler = Callable[["Worker[OriginT]", str, dict[str, Any]], None]


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "is gone"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with status {code}"


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
        #: this start's cgroup, removed once the worker is reaped
        self.cgroup: CgroupInstance | None = None
        self._cgroup_claimed = False
        self._cgroup_removed = trio.Event()

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
            procs_fds = self._make_cgroup()  # before the spawn: a fork of the zygote joins it before it reads its plan
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
            self._remove_unused_cgroup()
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
                joined = self._enter_cgroup(proc.pid)
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

    def _make_cgroup(self) -> list[int]:
        """Make this start's cgroup (:attr:`cgroup`) and open its ``cgroup.procs`` files (the fds, the caller's to
        close); raise only when the plan requires the group. An optional group that cannot be made is reported
        (``cgroup_unavailable``) and the worker runs without (:attr:`cgroup` ``None``, no fds)."""
        plan = self.spec.cgroup
        if plan is None:
            return []
        # <agent>.<toolbox>-<supervisor pid>-<random>: two agents' toolboxes of one name are told apart, and a group
        # is stale (sweep_stale_cgroups) only once the supervisor that made it is gone
        unique = f"{os.getpid()}-{secrets.token_hex(6)}"
        instance = plan.instance(f"{self.spec.agent}.{self.spec.toolbox}", unique)
        try:
            create_cgroup(instance)
            self.cgroup = instance
            return open_procs_files(instance)
        except ConfinementError as exc:
            self._remove_unused_cgroup()
            if plan.required:
                raise
            self._on_event(self, "cgroup_unavailable", {"reason": str(exc)})
            return []

    def _enter_cgroup(self, pid: int) -> bool:
        """Move the launcher ``pid`` into :attr:`cgroup`; raise only when the plan requires it. Returns whether the
        launcher is in its group (``False``: an optional one failed; the group goes when the launcher is reaped)."""
        assert self.cgroup is not None
        assert self.spec.cgroup is not None
        try:
            enter_cgroup(self.cgroup, pid)
        except ConfinementError as exc:
            if self.spec.cgroup.required:
                raise
            self._on_event(self, "cgroup_unavailable", {"reason": str(exc)})
            return False
        return True

    def _remove_unused_cgroup(self) -> None:
        """Remove :attr:`cgroup` when no process of this start ever got into it (it is empty)."""
        instance, self.cgroup = self.cgroup, None
        if instance is not None:
            remove_cgroup(instance)

    async def _release_cgroup(self) -> None:
        """Remove this start's cgroup once the launcher was reaped (its PID namespace is empty by then).

        The kernel may still call the group busy just after the last task was reaped (tasks are released after an
        RCU grace period; there is nothing to wait on in v1), so the removal is retried for up to 2 s, shielded.
        """
        if self._proc is None or self._proc.poll() is None:
            return
        with trio.CancelScope(shield=True):
            if self.cgroup is None:  # none, or another task (reader, kill, stop) is removing it: wait for that
                if self._cgroup_claimed:
                    await self._cgroup_removed.wait()
                return
            instance, self.cgroup = self.cgroup, None
            self._cgroup_claimed = True
            try:
                for _ in range(200):
                    if remove_cgroup(instance):
                        break
                    await trio.sleep(0.01)
            finally:
                self._cgroup_removed.set()

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
            reason = _describe_exit(await self._proc.wait())
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
