"""One worker process and the supervisor's end of its pipe (the RPC client side).

A :class:`Worker` is started with :meth:`Worker.start` (spawn the launcher, send the confinement plan, wait for
``hello``), serves :meth:`Worker.call` concurrently, answers the worker's own ``portal``/``host`` requests through
the handler it was given, and ends in state ``DEAD`` when the process exits, breaks the protocol or is stopped. Its
state changes only in :meth:`Worker._set_state`. Restarting is not its business (see ``_runner.py``).

Every call ends in exactly one :class:`ToolResult`; a worker that dies or misbehaves fails its in-flight calls with
status ``error`` and a message naming the cause. Nothing a worker sends can raise into the supervisor: malformed,
oversized or unexpected frames are a :class:`~toolboxes._protocol.ProtocolError`, which kills that worker only.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import secrets
import signal
import socket
import struct
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import msgpack
import trio

from sandbox._bridge import BridgeError, BridgeSockets, receive_bridge
from sandbox._cgroups import CgroupInstance, CgroupPlan, create_cgroup, enter_cgroup, remove_cgroup
from sandbox._dns_stub import serve_dns_stub
from sandbox._egress import default_resolve, limited_resolver, serve_egress
from sandbox._errors import ConfinementError
from sandbox._hosts import AllowedHosts
from sandbox._plan import ConfinementPlan
from toolboxes._protocol import FrameDecoder, ProtocolError, encode
from toolboxes._result import ToolResult

from ._errors import WorkerStartError, execution_error, first_leaf
from ._pipes import send_whole
from ._process import ChildProcess, spawn_child
from ._tool_lists import checked_tool_list

__all__ = ["Worker", "WorkerSpec", "WorkerState"]

#: Largest chunk read from a worker's stdout at once.
_READ_CHUNK = 1 << 18
#: How much of a worker's stderr is kept for diagnostics.
_STDERR_KEEP = 8192
#: How long a cancelled call may take to answer before its worker is killed.
CANCEL_GRACE_S = 2.0
#: At most this many tools_changed frames per window; more is a flood, not a toolbox reacting to changes.
MAX_TOOLS_CHANGED = 30
TOOLS_CHANGED_WINDOW_S = 10.0
#: Portal and host requests a worker may have in flight at once (each holds a task and maybe a nested call).
MAX_REQUESTS_IN_FLIGHT = 64
#: Name lookups one worker's egress bridge (proxy and DNS stub) may have in flight; trio's thread pool (40 threads)
#: serves the whole supervisor.
LOOKUPS_PER_BRIDGE = 8
#: At most this many ``event`` frames of a worker reach the trace per window; the rest are counted and dropped (a
#: worker cannot fill the disk through the trace).
MAX_EVENTS = 100
EVENTS_WINDOW_S = 10.0


class WorkerState(enum.Enum):
    STARTING = "starting"
    READY = "ready"
    DRAINING = "draining"
    DEAD = "dead"


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
    #: private ranges the egress proxy may dial for this worker (the policy's network.allow_private_ranges)
    private_networks: tuple[str, ...] = ()
    #: names an allowed host may be a CNAME of without being allowed itself (the policy's cname_targets)
    cname_targets: tuple[str, ...] = ()
    #: the worker's cgroup (pids.max, memory), made at each start; None: no cgroup
    cgroup: CgroupPlan | None = None
    #: RLIMIT_AS to set after all when the (optional) cgroup that was to bound the worker's memory cannot be made
    #: at a start; the plan carries none while a cgroup memory limit is in force (docs/CONFINEMENT.md)
    address_space_fallback: int | None = None
    warnings: list[str] = field(default_factory=list)
    #: what ``agents-supervise check`` shows about this worker (rules, exactness, hosts)
    report: dict[str, Any] = field(default_factory=dict)


class _PendingCall:
    __slots__ = ("done", "result")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.result: ToolResult | None = None

    def finish(self, result: ToolResult) -> None:
        if not self.done.is_set():
            self.result = result
            self.done.set()


#: handler(worker, message) -> reply dict ({"result": ...} or {"error": ...})
RequestHandler = Callable[["Worker", dict[str, Any]], Awaitable[dict[str, Any]]]
EventHandler = Callable[["Worker", str, dict[str, Any]], None]


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


class Worker:
    """One confined worker process serving one toolbox."""

    def __init__(self, spec: WorkerSpec, *, on_request: RequestHandler, on_event: EventHandler) -> None:
        self.spec = spec
        self.state = WorkerState.STARTING
        self.tools: list[dict[str, Any]] = []
        self.load_errors: list[dict[str, Any]] = []
        self.death_reason: str | None = None
        self.dead = trio.Event()
        self._on_request = on_request
        self._on_event = on_event
        self._proc: ChildProcess | None = None
        self._pending: dict[int, _PendingCall] = {}
        self._next_id = 1
        self._send_lock = trio.Lock()
        self._hello = trio.Event()
        self._stderr: deque[bytes] = deque()
        self._stderr_size = 0
        self._nursery: trio.Nursery | None = None
        #: call id -> the caller's context object, so that a portal request names the call it comes from
        self.origins: dict[int, Any] = {}
        #: this start's cgroup, removed once the worker is reaped
        self.cgroup: CgroupInstance | None = None
        self._cgroup_claimed = False
        self._cgroup_removed = trio.Event()
        self._requests_in_flight = 0
        self._tools_changed_at: deque[float] = deque()
        self._events_at: deque[float] = deque()
        self._events_dropped = 0

    # -- state -------------------------------------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def _set_state(self, state: WorkerState, reason: str | None = None) -> None:
        if self.state is WorkerState.DEAD:
            return
        self.state = state
        if state is WorkerState.DEAD:
            self.death_reason = reason
            for pending in list(self._pending.values()):
                pending.finish(execution_error(
                    f"toolbox {self.spec.toolbox}: the worker {reason}; the call did not finish. "
                    "It is restarted automatically; try the call again."))
            self._pending.clear()
            self.dead.set()

    def stderr_tail(self) -> str:
        return b"".join(self._stderr).decode("utf-8", "replace")[-2000:]

    # -- lifecycle ---------------------------------------------------------------------------------------------
    async def start(self, nursery: trio.Nursery) -> None:
        """Spawn the worker, send its plan and wait for ``hello``.

        Raises :class:`WorkerStartError` naming the cause when the worker cannot start (launcher refused to confine,
        toolbox failed to open, no hello in time). The worker's reader tasks live in ``nursery``.
        """
        self._nursery = nursery
        spec = self.spec
        plan = spec.plan
        carrier: socket.socket | None = None
        child_end: socket.socket | None = None
        if plan.bridge:
            # The launcher opens the bridge sockets inside the worker's namespace and passes them up this pair.
            carrier, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            plan = dataclasses.replace(plan, bridge_fd=child_end.fileno())
        try:
            proc = spawn_child(spec.argv, env=spec.env, cwd=spec.cwd,
                               pass_fds=(*spec.pass_fds, *((child_end.fileno(),) if child_end else ())))
        except OSError as exc:
            self._set_state(WorkerState.DEAD, f"could not be started: {exc}")
            if carrier is not None:
                carrier.close()
            raise WorkerStartError(f"toolbox {spec.toolbox}: cannot start its worker: {exc}") from exc
        finally:
            if child_end is not None:
                child_end.close()
        self._proc = proc
        try:
            joined = self._join_cgroup(proc.pid)  # before the plan is sent: the launcher forks nothing outside it
        except ConfinementError as exc:
            if carrier is not None:
                carrier.close()
            await self.kill(f"could not be put in its cgroup: {exc}")
            raise WorkerStartError(f"toolbox {spec.toolbox}: the worker could not be put in its cgroup: {exc}"
                                   ) from exc
        if not joined and spec.address_space_fallback is not None:  # no group bounds its memory: the rlimit does
            plan = dataclasses.replace(plan, rlimits=dataclasses.replace(
                plan.rlimits, address_space_bytes=spec.address_space_fallback))
        frame = msgpack.packb(plan.to_wire(), use_bin_type=True)
        nursery.start_soon(self._read_stderr)
        nursery.start_soon(self._read_stdout)
        try:
            await proc.stdin.send_all(struct.pack(">I", len(frame)) + frame)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the reader sees the exit and reports why
        with trio.move_on_after(spec.start_timeout_s):
            if carrier is not None:
                try:
                    bridge = await receive_bridge(trio.socket.from_stdlib_socket(carrier))
                except (BridgeError, OSError):
                    await self.dead.wait()  # the launcher failed before the bridge: its exit says why
                else:
                    nursery.start_soon(self._serve_bridge, bridge)
                finally:
                    carrier.close()
            await self._wait_hello_or_death()
        if self.state is WorkerState.READY:
            return
        if not self.dead.is_set():
            await self.kill(f"sent no hello within {spec.start_timeout_s:g} s")
        tail = self.stderr_tail().strip().splitlines()
        detail = tail[-1] if tail else ""
        raise WorkerStartError(f"toolbox {spec.toolbox}: the worker {self.death_reason}"
                           + (f": {detail}" if detail else ""))

    def _join_cgroup(self, pid: int) -> bool:
        """Make this start's cgroup and move the launcher ``pid`` into it; raise only when the plan requires it.
        Returns whether the launcher is in its group (``False``: no group planned, or an optional one failed)."""
        plan = self.spec.cgroup
        if plan is None:
            return False
        instance = plan.instance(self.spec.toolbox, f"{pid}-{secrets.token_hex(3)}")
        try:
            create_cgroup(instance)
            self.cgroup = instance
            enter_cgroup(instance, pid)
        except ConfinementError as exc:
            if plan.required:
                raise
            self._on_event(self, "cgroup_unavailable", {"reason": str(exc)})
            return False
        return True

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
        proxy, dns_udp, dns_tcp = bridge.to_trio()
        rules = AllowedHosts.parse(self.spec.allowed_hosts, private_networks=self.spec.private_networks,
                                   cname_targets=self.spec.cname_targets)

        def on_decision(decision: dict[str, Any]) -> None:
            self._on_event(self, "egress", dict(decision))

        try:
            async with trio.open_nursery() as nursery:
                resolve = limited_resolver(default_resolve, LOOKUPS_PER_BRIDGE)
                await nursery.start(lambda task_status: serve_egress(
                    proxy, rules, on_decision=on_decision, toolbox=self.spec.toolbox, resolve=resolve,
                    task_status=task_status))
                await nursery.start(lambda task_status: serve_dns_stub(
                    dns_udp, dns_tcp, rules, resolve=resolve, task_status=task_status))
                await self.dead.wait()
                nursery.cancel_scope.cancel()
        except Exception as exc:  # a bug in the bridge ends this worker (it restarts), never the supervisor
            leaf = first_leaf(exc)
            self._on_event(self, "internal_error", {"where": "egress bridge",
                                                    "error": f"{type(leaf).__name__}: {leaf}"})
            if not self.dead.is_set():
                await self.kill(f"its egress bridge failed ({type(leaf).__name__}) and was killed")
        finally:
            for sock in (proxy, dns_udp, dns_tcp):
                sock.close()

    async def _wait_hello_or_death(self) -> None:
        async with trio.open_nursery() as n:
            async def wait(ev: trio.Event) -> None:
                await ev.wait()
                n.cancel_scope.cancel()
            n.start_soon(wait, self._hello)
            n.start_soon(wait, self.dead)

    async def kill(self, reason: str) -> None:
        """Kill the worker at once (SIGKILL) and fail its in-flight calls with ``reason``."""
        self._set_state(WorkerState.DEAD, reason)
        if self._proc is not None:
            await self._proc.kill()
            await self._release_cgroup()

    async def stop(self) -> None:
        """Stop gracefully: ``shutdown`` frame, then the process's kill path (SIGTERM, grace, SIGKILL)."""
        if self._proc is None:
            return
        if self.state is not WorkerState.DEAD:
            self.state = WorkerState.DRAINING
            with trio.CancelScope(shield=True):
                with trio.move_on_after(0.5):
                    try:
                        await self._send({"t": "shutdown"})
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        pass
                with trio.move_on_after(self.spec.shutdown_grace_s):
                    await self._proc.wait()
        self._set_state(WorkerState.DEAD, "was stopped")
        await self._proc.aclose(grace_s=self.spec.shutdown_grace_s)
        await self._release_cgroup()

    # -- I/O ---------------------------------------------------------------------------------------------------
    async def _send(self, message: dict[str, Any]) -> None:
        assert self._proc is not None
        await send_whole(self._proc.stdin, self._send_lock, encode(message))

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

    async def _read_stdout(self) -> None:
        assert self._proc is not None
        decoder = FrameDecoder("to_supervisor")
        reason: str | None = None
        try:
            while True:
                try:
                    chunk = await self._proc.stdout.receive_some(_READ_CHUNK)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    chunk = b""
                if not chunk:
                    break
                for message in decoder.feed(chunk):
                    self._dispatch(message)
        except ProtocolError as exc:
            reason = f"broke the protocol ({exc}) and was killed"
            self._on_event(self, "protocol_violation", {"reason": str(exc)})
            await self.kill(reason)
            return
        # EOF: the worker is exiting or dead.
        with trio.CancelScope(shield=True):
            with trio.move_on_after(5):
                code = await self._proc.wait()
                reason = _describe_exit(code)
            if reason is None:
                await self._proc.kill()
                reason = "closed its pipe and was killed"
            await self._release_cgroup()
        self._set_state(WorkerState.DEAD, reason)

    def _dispatch(self, message: dict[str, Any]) -> None:
        """Handle one validated frame from the worker. Raises ProtocolError for an unexpected one."""
        kind = message["t"]
        if kind == "result":
            pending = self._pending.get(message["id"])
            if pending is None:
                # A result for a call we already ended (cancelled, timed out) is expected; one for an id we
                # never used is not.
                if message["id"] >= self._next_id or message["id"] <= 0:
                    raise ProtocolError(f"result for unknown call id {message['id']}")
                return
            try:
                result = ToolResult.from_wire(message["result"])
            except ValueError as exc:
                # The call stays pending, so the worker's death ends it with an error that says why.
                raise ProtocolError(f"malformed result: {exc}") from exc
            del self._pending[message["id"]]
            pending.finish(result)
        elif kind == "hello":
            if self._hello.is_set():
                raise ProtocolError("second hello")
            fatal = message.get("fatal")
            if fatal:
                self._stderr.append(str(fatal).encode())
                raise ProtocolError(str(fatal))
            self._set_tools(message)
            self.state = WorkerState.READY
            self._hello.set()
        elif kind == "tools_changed":
            now = trio.current_time()
            self._tools_changed_at.append(now)
            while now - self._tools_changed_at[0] > TOOLS_CHANGED_WINDOW_S:
                self._tools_changed_at.popleft()
            if len(self._tools_changed_at) > MAX_TOOLS_CHANGED:
                raise ProtocolError(f"more than {MAX_TOOLS_CHANGED} tools_changed messages within "
                                    f"{TOOLS_CHANGED_WINDOW_S:g} s")
            self._set_tools(message)
            self._on_event(self, "tools_changed", {})
        elif kind == "event":
            event = message["event"]
            if not isinstance(event, dict):
                raise ProtocolError("event must be a map")
            now = trio.current_time()
            while self._events_at and now - self._events_at[0] > EVENTS_WINDOW_S:
                self._events_at.popleft()
            if len(self._events_at) >= MAX_EVENTS:
                self._events_dropped += 1
                return
            if self._events_dropped:
                self._on_event(self, "limit_hit", {"limit": "worker events", "value": MAX_EVENTS,
                                                   "window_s": EVENTS_WINDOW_S, "dropped": self._events_dropped})
                self._events_dropped = 0
            self._events_at.append(now)
            self._on_event(self, "worker_event", event)
        elif kind in ("portal", "host"):
            if not self._hello.is_set():
                raise ProtocolError(f"{kind} request before hello")
            if self._requests_in_flight >= MAX_REQUESTS_IN_FLIGHT:
                raise ProtocolError(f"more than {MAX_REQUESTS_IN_FLIGHT} portal/host requests in flight")
            assert self._nursery is not None
            self._requests_in_flight += 1
            self._nursery.start_soon(self._answer_request, message)

    def _set_tools(self, message: dict[str, Any]) -> None:
        """Check a tool list (hello, tools_changed) against the protocol's shape and bounds, then keep it."""
        self.tools, self.load_errors = checked_tool_list(message)

    async def _answer_request(self, message: dict[str, Any]) -> None:
        try:
            try:
                reply = await self._on_request(self, message)
            except Exception as exc:  # the handler is ours; a bug there must not kill the supervisor
                reply = {"error": f"internal supervisor error: {type(exc).__name__}: {exc}"}
            if self.state is WorkerState.DEAD:
                return
            try:
                await self._send({"t": "reply", "id": message["id"], **reply})
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        finally:
            self._requests_in_flight -= 1

    # -- calls ---------------------------------------------------------------------------------------------------
    async def call(self, tool: str, args: dict[str, Any], ctx: dict[str, Any],
                   wall_time_s: float | None = None, origin: Any = None) -> ToolResult:
        """Run ``tool`` (the toolbox's own name) and return its result; never raises for the worker's faults.

        At ``wall_time_s`` (default: the spec's) the call is cancelled in the worker and ends with status ``error``;
        a worker that does not answer the cancel within :data:`CANCEL_GRACE_S` is killed. If the caller is
        cancelled, the worker is told to cancel too (shielded), and ``trio.Cancelled`` propagates.
        """
        if self.state is not WorkerState.READY:
            return execution_error(f"toolbox {self.spec.toolbox} is not running (its worker "
                                    f"{self.death_reason or 'is ' + self.state.value}); try again shortly")
        limit = self.spec.wall_time_s if wall_time_s is None else wall_time_s
        call_id = self._next_id
        self._next_id += 1
        pending = _PendingCall()
        self._pending[call_id] = pending
        self.origins[call_id] = origin
        wire_ctx = dict(ctx)
        if limit and math.isfinite(limit):
            wire_ctx["timeout_s"] = limit
        try:
            try:
                await self._send({"t": "call", "id": call_id, "tool": tool, "args": args, "ctx": wire_ctx})
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                await self.dead.wait()
                return pending.result or execution_error(f"toolbox {self.spec.toolbox}: worker is gone")
            with trio.move_on_after(limit if limit else math.inf):
                await pending.done.wait()
            if pending.result is not None:
                return pending.result
            # Wall time exceeded.
            nominal = max(limit, self.spec.wall_time_s)  # a restart wait may have used part of the budget
            self._on_event(self, "limit_hit", {"limit": "wall_time_s", "value": nominal, "tool": tool})
            await self._cancel_in_worker(call_id, pending)
            return execution_error(
                f"the call to {tool} exceeded its wall-time limit of {nominal:g} s and was stopped")
        except trio.Cancelled:
            await self._cancel_in_worker(call_id, pending)
            raise
        finally:
            self._pending.pop(call_id, None)
            self.origins.pop(call_id, None)

    async def _cancel_in_worker(self, call_id: int, pending: _PendingCall) -> None:
        with trio.CancelScope(shield=True):
            if self.state is WorkerState.DEAD:
                return
            try:
                await self._send({"t": "cancel", "id": call_id})
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return
            with trio.move_on_after(CANCEL_GRACE_S):
                await pending.done.wait()
            if not pending.done.is_set():
                await self.kill(f"did not stop call {call_id} within {CANCEL_GRACE_S:g} s of its cancel "
                                "and was killed")
