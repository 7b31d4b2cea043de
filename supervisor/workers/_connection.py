"""The supervisor's end of one worker's protocol, over a pair of trio byte streams (no process, no root needed).

A :class:`WorkerConnection` holds what the supervisor and one worker say to each other and the worker's life as the
protocol sees it: ``starting`` -> ``ready`` (its ``hello``) -> ``draining`` (shutdown sent) -> ``dead``, changed only
in :meth:`WorkerConnection._set_state`. It serves calls with their wall-time limits, answers the worker's
``portal``/``host`` requests through the handler it was given, keeps the worker's tool list (checked and compiled off
the trio loop), passes the worker's events on (rate-limited). It never starts or kills a process: whoever launched the
worker gives it ``terminate`` (end the worker now; idempotent) and ``exit_reason`` (after EOF: how the worker ended,
bounded). ``supervisor/workers/_worker.py`` is that code for a real confined process; tests give a fake worker.

What holds whatever the worker sends, or fails to read:

- every call ends with exactly one :class:`ToolResult` by its wall-time limit plus :data:`CANCEL_GRACE_S`; the limit
  covers writing the call (a worker that stops reading its stdin cannot hold a call past it);
- a frame that does not decode, is too large, is unexpected or breaks a bound is a protocol violation: the worker is
  terminated and its calls in flight end with ``error`` naming the cause; so is a write cut off half way (the pipe
  cannot carry another frame) and a cancel the worker does not honour within :data:`CANCEL_GRACE_S`;
- nothing raises out of :meth:`serve` for the worker's faults or for a bug in handling its frames (the latter is an
  ``internal_error`` event and costs this worker only);
- the trio loop does only bounded work per frame: decoding is incremental per read, tool lists are checked and
  compiled on a worker thread (:func:`~supervisor.tools._tool_lists.prepare_tool_list`), at most
  :data:`COMPILE_THREADS` at once for the whole supervisor.
"""

from __future__ import annotations

import enum
import math
import sys
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar

import trio

from supervisor._errors import execution_error, first_leaf
from supervisor.tools import CompiledSchema, ToolList, prepare_tool_list
from toolboxes import MAX_FRAME_BYTES, PROTOCOL_VERSION, FrameDecoder, ProtocolError, ToolResult, encode, json_problem

from ._pipes import ChunkReader, FrameWriter

__all__ = ["CANCEL_GRACE_S", "ConnectionState", "OriginT", "WorkerConnection"]

#: Largest chunk read from a worker's stdout at once: one decoding step on the trio loop costs at most this much
#: (msgpack decodes incrementally; 64 KiB is a few ms even on a loaded machine).
READ_CHUNK = 1 << 16
#: How long a cancelled call may take to answer (and its cancel to be written) before its worker is killed.
CANCEL_GRACE_S = 2.0
#: How long the ``shutdown`` frame may take to be written.
SHUTDOWN_SEND_S = 0.5
#: At most this many tools_changed frames per window; more is a flood, not a toolbox reacting to changes.
MAX_TOOLS_CHANGED = 30
TOOLS_CHANGED_WINDOW_S = 10.0
#: Portal and host requests a worker may have in flight at once (each holds a task and maybe a nested call).
MAX_REQUESTS_IN_FLIGHT = 64
#: At most this many ``event`` frames of a worker reach the trace per window; the rest are counted and dropped (a
#: worker cannot fill the disk through the trace).
MAX_EVENTS = 100
EVENTS_WINDOW_S = 10.0
#: Shape bounds of an event and of a request's arguments (checked without recursion before anything uses them; a
#: request's arguments are then checked against the tool's schema on the loop, so they are kept to a few ms of it).
MAX_EVENT_DEPTH, MAX_EVENT_VALUES = 16, 10_000
MAX_REQUEST_DEPTH, MAX_REQUEST_VALUES = 64, 10_000
MAX_REQUEST_NAME_CHARS = 1024
#: Threads compiling tool lists at once, for the whole supervisor (pure Python: more would only contend for the
#: GIL; two keep one worker's huge list from delaying every other worker's start).
COMPILE_THREADS = 2
_COMPILE_LIMITER: trio.lowlevel.RunVar[trio.CapacityLimiter] = trio.lowlevel.RunVar("schema_compile_limiter")


#: The interpreter's GIL switch interval once tool lists are compiled on threads: at the default 5 ms, a trio wake-up
#: that needs the GIL a few times waits 20-50 ms behind a compiling thread; at 1 ms, a few ms.
SWITCH_INTERVAL_S = 0.001


def compile_limiter() -> trio.CapacityLimiter:
    """The limiter of tool-list compilation threads of this trio run (made, and the GIL switch interval lowered to
    :data:`SWITCH_INTERVAL_S`, on first use)."""
    try:
        return _COMPILE_LIMITER.get()
    except LookupError:
        limiter = trio.CapacityLimiter(COMPILE_THREADS)
        _COMPILE_LIMITER.set(limiter)
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_INTERVAL_S))
        return limiter


RunSync = Callable[..., Awaitable[Any]]


async def _on_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """Run ``fn(*args)`` on a worker thread under the compile limiter (abandoned, not awaited, on cancel)."""
    return await trio.to_thread.run_sync(fn, *args, limiter=compile_limiter(), abandon_on_cancel=True)


class ConnectionState(enum.Enum):
    STARTING = "starting"
    READY = "ready"
    DRAINING = "draining"
    DEAD = "dead"


class _PendingCall:
    """A call sent and not yet answered. ``done`` is set by its result (the first one kept), by the worker's death
    (an error result), or, for a call whose wait the connection's timer bounds (``deadline`` finite), by the timer
    at ``deadline`` with no result (``expired``)."""

    __slots__ = ("deadline", "done", "expired", "result")

    def __init__(self, deadline: float = math.inf) -> None:
        self.done = trio.Event()
        self.result: ToolResult | None = None
        self.deadline = deadline
        self.expired = False

    def finish(self, result: ToolResult) -> None:
        if self.result is None:
            self.result = result
            self.done.set()

    def expire(self) -> None:
        self.expired = True
        self.done.set()


#: on_request(message) -> reply dict ({"result": ...} or {"error": ...}); on_event(kind, data)
ConnectionRequestHandler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
ConnectionEventHandler = Callable[[str, dict[str, Any]], None]


#: what a caller says of itself with each call (the supervisor's ``CallOrigin``): kept by call id while the call
#: runs, so that a request or a progress event of the call finds it; the connection never looks inside it
OriginT = TypeVar("OriginT")


class WorkerConnection(Generic[OriginT]):
    """The protocol with one worker over ``send`` (its stdin) and ``receive`` (its stdout)."""

    def __init__(
        self,
        toolbox: str,
        send: trio.abc.SendStream,
        receive: trio.abc.ReceiveStream,
        *,
        wall_time_s: float,
        on_request: ConnectionRequestHandler,
        on_event: ConnectionEventHandler,
        terminate: Callable[[], Awaitable[None]],
        exit_reason: Callable[[], Awaitable[str]],
        reuse: Sequence[CompiledSchema] = (),
        max_frame_bytes: int = MAX_FRAME_BYTES,
        run_sync: RunSync | None = None,
    ) -> None:
        self.toolbox = toolbox
        self.wall_time_s = wall_time_s
        self.state = ConnectionState.STARTING
        self.tools: list[dict[str, Any]] = []
        #: the compiled input schema of each of :attr:`tools`, in the same order
        self.schemas: list[CompiledSchema] = []
        self.load_errors: list[dict[str, Any]] = []
        #: the compiled output schema of each of :attr:`tools` (``None``: it has none)
        self.output_schemas: list[CompiledSchema | None] = []
        #: resources, resource_templates, prompts the worker lists (toolboxes/_catalog.py), checked
        self.catalog: dict[str, list[dict[str, Any]]] = {}
        self.death_reason: str | None = None
        #: the worker's ``fatal`` hello message, when it sent one
        self.fatal: str | None = None
        self.dead = trio.Event()
        self.ready = trio.Event()
        #: call id -> the caller's context object, so that a portal request names the call it comes from
        self.origins: dict[int, OriginT | None] = {}
        self.writer = FrameWriter(send)
        self._receive = receive
        self._on_request = on_request
        self._on_event = on_event
        self._terminate = terminate
        self._exit_reason = exit_reason
        self._pending: dict[int, _PendingCall] = {}
        #: the connection's one timer (:meth:`_keep_deadlines`, while :meth:`serve` runs): it wakes at the earliest
        #: deadline of the calls whose wait it bounds, instead of a cancel scope per call
        self._timer: trio.CancelScope | None = None
        self._next_id = 1
        self._nursery: trio.Nursery | None = None
        self._requests_in_flight = 0
        self._tools_changed_at: deque[float] = deque()
        self._events_at: deque[float] = deque()
        self._events_dropped = 0
        #: schemas compiled for an earlier worker of the same toolbox (a restart does not compile them again)
        self._reuse = {s.fingerprint: s for s in reuse if not s.retry}
        self._max_frame_bytes = max_frame_bytes
        #: the decoder of the worker's frames (:meth:`_read_frames`); it knows the size of each frame it yields
        self._decoder = FrameDecoder("to_supervisor", max_frame_bytes)
        #: how tool lists are prepared off the loop (default: a thread under :func:`compile_limiter`); tests that
        #: drive the connection with a MockClock pass one that runs inline
        self._run_sync = run_sync or _on_thread

    # -- state -------------------------------------------------------------------------------------------------
    def _set_state(self, state: ConnectionState, reason: str | None = None) -> None:
        """The one place the state changes. ``dead`` is final: calls in flight end with ``reason``."""
        if self.state is ConnectionState.DEAD:
            return
        self.state = state
        if state is ConnectionState.READY:
            self.ready.set()
        elif state is ConnectionState.DEAD:
            self.death_reason = reason
            for pending in list(self._pending.values()):
                pending.finish(
                    execution_error(
                        f"toolbox {self.toolbox}: the worker {reason}; the call did not finish. "
                        "It is restarted automatically; try the call again."
                    )
                )
            self._pending.clear()
            self.dead.set()
            if self._nursery is not None:
                self._nursery.cancel_scope.cancel()  # the reader and the requests being answered

    async def kill(self, reason: str) -> None:
        """Mark the worker dead with ``reason`` (its calls end with it) and terminate it (shielded)."""
        self._set_state(ConnectionState.DEAD, reason)
        with trio.CancelScope(shield=True):
            await self._terminate()

    def mark_dead(self, reason: str) -> None:
        """The launcher saw the worker end (or stopped it): ``dead`` with ``reason`` unless already dead."""
        self._set_state(ConnectionState.DEAD, reason)

    async def wait_started(self) -> None:
        """Return once the worker said hello or died (the caller bounds the wait)."""
        async with trio.open_nursery() as n:

            async def wait(ev: trio.Event) -> None:
                await ev.wait()
                n.cancel_scope.cancel()

            n.start_soon(wait, self.ready)
            n.start_soon(wait, self.dead)

    async def shutdown(self) -> None:
        """Ask the worker to exit (state ``draining``); the write is bounded by :data:`SHUTDOWN_SEND_S`, shielded."""
        if self.state is ConnectionState.DEAD:
            return
        self._set_state(ConnectionState.DRAINING)
        with trio.CancelScope(shield=True), trio.move_on_after(SHUTDOWN_SEND_S):
            try:
                await self.writer.send(encode({"t": "shutdown"}))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass

    # -- reading -----------------------------------------------------------------------------------------------
    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Read and handle the worker's frames until it is dead (for ``nursery.start``); never raises for the
        worker's faults. Requests the worker made are answered in tasks that end with it."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            if self.state is ConnectionState.DEAD:
                nursery.cancel_scope.cancel()
            nursery.start_soon(self._keep_deadlines)
            task_status.started()
            await self._read_frames()
            nursery.cancel_scope.cancel()

    async def _keep_deadlines(self) -> None:
        """The connection's timer: at the earliest deadline of the calls it bounds, expire every call past its own
        (its caller then handles the wall-time limit as it would at the end of a cancel scope of its own); then
        sleep until the next. A call sent sets an earlier deadline on the timer when it has one."""
        try:
            while True:
                earliest = math.inf
                now = trio.current_time()
                for pending in self._pending.values():
                    if pending.expired:
                        continue
                    if pending.deadline <= now:
                        pending.expire()
                    elif pending.deadline < earliest:
                        earliest = pending.deadline
                with trio.CancelScope(deadline=earliest) as self._timer:
                    await trio.sleep_forever()
        finally:
            self._timer = None

    async def _read_frames(self) -> None:
        decoder = self._decoder
        reader = ChunkReader(self._receive, READ_CHUNK)
        try:
            while True:
                chunk = await reader.receive()
                if not chunk:
                    break
                for message in decoder.feed(bytes(chunk)):
                    await self._dispatch(message)
        except ProtocolError as exc:
            self._on_event("protocol_violation", {"reason": str(exc)[:2000]})
            await self.kill(f"broke the protocol ({str(exc)[:1000]}) and was killed")
            return
        except Exception as exc:  # a bug of ours handling this worker's frame: it costs this worker only
            leaf = first_leaf(exc)
            self._on_event(
                "internal_error", {"where": "worker connection", "error": f"{type(leaf).__name__}: {str(leaf)[:500]}"}
            )
            await self.kill(f"sent a frame the supervisor failed to handle ({type(leaf).__name__}) and was killed")
            return
        # EOF: the worker is exiting or dead; its launcher says how (bounded).
        with trio.CancelScope(shield=True):
            reason = await self._exit_reason()
        self._set_state(ConnectionState.DEAD, reason)

    async def _dispatch(self, message: dict[str, Any]) -> None:
        """Handle one decoded frame. Raises ProtocolError for one that breaks the protocol."""
        kind = message["t"]
        if kind == "result":
            self._take_result(message)
        elif kind == "hello":
            if self.state is not ConnectionState.STARTING:
                raise ProtocolError("second hello")
            fatal = message.get("fatal")
            if fatal:
                self.fatal = str(fatal)[:4000]
                raise ProtocolError(self.fatal)
            if message.get("protocol") != PROTOCOL_VERSION:
                raise ProtocolError(
                    f"hello for protocol {str(message.get('protocol'))[:40]!r}; this supervisor "
                    f"speaks {PROTOCOL_VERSION}"
                )
            await self._set_tools(message)
            self._set_state(ConnectionState.READY)
        elif kind == "tools_changed":
            now = trio.current_time()
            self._tools_changed_at.append(now)
            while now - self._tools_changed_at[0] > TOOLS_CHANGED_WINDOW_S:
                self._tools_changed_at.popleft()
            if len(self._tools_changed_at) > MAX_TOOLS_CHANGED:
                raise ProtocolError(
                    f"more than {MAX_TOOLS_CHANGED} tools_changed messages within {TOOLS_CHANGED_WINDOW_S:g} s"
                )
            await self._set_tools(message)
            self._on_event("tools_changed", {})
        elif kind == "event":
            self._take_event(message["event"])
        elif kind in ("portal", "host"):
            self._take_request(message)

    def _take_result(self, message: dict[str, Any]) -> None:
        call_id = message["id"]
        pending = self._pending.get(call_id)
        if pending is None:
            # A result for a call we already ended (cancelled, timed out) is expected; one for an id we never
            # used is not.
            if call_id >= self._next_id or call_id <= 0:
                raise ProtocolError(f"result for unknown call id {call_id}")
            return
        try:
            result = ToolResult.from_wire(message["result"], self._decoder.last_frame_bytes)
        except ValueError as exc:
            # The call stays pending, so the worker's death ends it with an error that says why.
            raise ProtocolError(f"malformed result: {exc}") from exc
        del self._pending[call_id]
        pending.finish(result)

    def _take_event(self, event: Any) -> None:
        if not isinstance(event, dict):
            raise ProtocolError("event must be a map")
        problem, _ = json_problem(event, max_depth=MAX_EVENT_DEPTH, max_nodes=MAX_EVENT_VALUES, finite=False)
        if problem:
            raise ProtocolError(f"event {problem}")
        now = trio.current_time()
        while self._events_at and now - self._events_at[0] > EVENTS_WINDOW_S:
            self._events_at.popleft()
        if len(self._events_at) >= MAX_EVENTS:
            self._events_dropped += 1
            return
        if self._events_dropped:
            self._on_event(
                "limit_hit",
                {
                    "limit": "worker events",
                    "value": MAX_EVENTS,
                    "window_s": EVENTS_WINDOW_S,
                    "dropped": self._events_dropped,
                },
            )
            self._events_dropped = 0
        self._events_at.append(now)
        self._on_event("worker_event", event)

    def _take_request(self, message: dict[str, Any]) -> None:
        kind = message["t"]
        if self.state is ConnectionState.STARTING:
            raise ProtocolError(f"{kind} request before hello")
        call = message.get("call")
        if not (isinstance(call, int) and not isinstance(call, bool)):
            raise ProtocolError(f"{kind} request must name its call by integer id")
        name = message.get("tool" if kind == "portal" else "op")
        if not (isinstance(name, str) and 0 < len(name) <= MAX_REQUEST_NAME_CHARS):
            raise ProtocolError(
                f"{kind} request needs a {'tool' if kind == 'portal' else 'op'} name of 1 to "
                f"{MAX_REQUEST_NAME_CHARS} characters"
            )
        problem, _ = json_problem(
            message.get("args"), max_depth=MAX_REQUEST_DEPTH, max_nodes=MAX_REQUEST_VALUES, finite=False
        )
        if problem:
            raise ProtocolError(f"{kind} request arguments {problem}")
        if self._requests_in_flight >= MAX_REQUESTS_IN_FLIGHT:
            raise ProtocolError(f"more than {MAX_REQUESTS_IN_FLIGHT} portal/host requests in flight")
        assert self._nursery is not None
        self._requests_in_flight += 1
        self._nursery.start_soon(self._answer_request, message)

    async def _set_tools(self, message: dict[str, Any]) -> None:
        """Check and compile a tool list on a thread (bounded); keep it. Raises ProtocolError for a bad list."""
        reuse = self._reuse | {
            s.fingerprint: s for s in [*self.schemas, *self.output_schemas] if s is not None and not s.retry
        }
        self._reuse = {}
        prepared: ToolList = await self._run_sync(prepare_tool_list, message, reuse)
        self.tools, self.schemas, self.load_errors = prepared.tools, prepared.schemas, prepared.load_errors
        self.output_schemas, self.catalog = prepared.output_schemas, prepared.catalog

    async def _answer_request(self, message: dict[str, Any]) -> None:
        try:
            try:
                reply = await self._on_request(message)
            except Exception as exc:  # the handler is ours; a bug there must not kill the supervisor
                reply = {"error": f"internal supervisor error: {type(exc).__name__}: {str(exc)[:500]}"}
            if self.state is ConnectionState.DEAD:
                return
            try:
                frame = encode({"t": "reply", "id": message["id"], **reply})
            except (TypeError, ValueError, OverflowError) as exc:
                frame = encode(
                    {
                        "t": "reply",
                        "id": message["id"],
                        "error": f"the answer could not be encoded: {type(exc).__name__}",
                    }
                )
            await self._send_or_kill(frame, "its reply")
        finally:
            self._requests_in_flight -= 1

    # -- writing -----------------------------------------------------------------------------------------------
    async def _send_or_kill(self, frame: bytes, what: str) -> bool:
        """Write ``frame``; whether it went out. A write cut off half way (cancelled) kills the worker."""
        try:
            await self.writer.send(frame)
            return True
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return False
        finally:
            if self.writer.torn and self.state is not ConnectionState.DEAD:
                await self.kill(f"stopped reading its input ({what} could not be written whole) and was killed")

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
        """Run ``tool`` (the toolbox's own name) and return its result; never raises for the worker's faults.

        ``op``: ``read_resource`` or ``get_prompt`` (``tool`` is then a resource URI or a prompt name; see
        ``toolboxes/_catalog.py``).

        The call (writing it included) ends with status ``error`` at ``wall_time_s`` (default: the connection's):
        the worker is told to cancel it and is killed if it does not answer within :data:`CANCEL_GRACE_S`, or at
        once if the call could not even be written whole. If the caller is cancelled, the worker is told to cancel
        too (shielded, bounded), and ``trio.Cancelled`` propagates.
        """
        if self.state is not ConnectionState.READY:
            return execution_error(
                f"toolbox {self.toolbox} is not running (its worker "
                f"{self.death_reason or 'is ' + self.state.value}); try again shortly"
            )
        limit = self.wall_time_s if wall_time_s is None else wall_time_s
        wire_ctx = dict(ctx)
        if limit and math.isfinite(limit):
            wire_ctx["timeout_s"] = limit
        call_id = self._next_id
        try:
            frame = encode(
                {
                    "t": "call",
                    "id": call_id,
                    "tool": tool,
                    "args": args,
                    "ctx": wire_ctx,
                    **({"op": op} if op is not None else {}),
                }
            )
        except (TypeError, ValueError, OverflowError) as exc:
            return execution_error(f"the arguments of {tool} cannot be sent to its worker ({exc})")
        self._next_id += 1
        deadline = trio.current_time() + limit if limit else math.inf
        timer = self._timer
        pending = _PendingCall()
        self._pending[call_id] = pending
        self.origins[call_id] = origin
        sent = False
        try:
            try:
                sent = timer is not None and self.writer.send_now(frame)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                sent = False  # the locked send below meets it again (and kills a torn stream's worker)
            if sent:
                # Written whole, nothing to cancel half way: the connection's timer bounds the wait.
                assert timer is not None
                pending.deadline = deadline
                if deadline < timer.deadline:
                    timer.deadline = deadline
                await pending.done.wait()
            else:
                with trio.move_on_at(deadline):
                    sent = await self._send_or_kill(frame, f"the call to {tool}")
                    if not sent:
                        await self.dead.wait()
                    await pending.done.wait()
            if pending.result is not None:
                return pending.result
            if pending.expired:
                pending.done = trio.Event()  # the timer's wake-up; what the worker says to the cancel sets this one
            nominal = max(limit, self.wall_time_s)  # a restart wait may have used part of the budget
            self._on_event("limit_hit", {"limit": "wall_time_s", "value": nominal, "tool": tool})
            if sent:
                await self._cancel_in_worker(call_id, pending)
            return execution_error(
                f"the call to {tool} exceeded its wall-time limit of {nominal:g} s and was stopped"
                + ("" if sent else " (its worker was not reading its input)")
            )
        except trio.Cancelled:
            if sent:
                await self._cancel_in_worker(call_id, pending)
            raise
        finally:
            self._pending.pop(call_id, None)
            self.origins.pop(call_id, None)

    async def _cancel_in_worker(self, call_id: int, pending: _PendingCall) -> None:
        """Tell the worker to cancel ``call_id``; kill it unless the call ends within :data:`CANCEL_GRACE_S`
        (writing the cancel included). Shielded."""
        with trio.CancelScope(shield=True):
            if self.state is ConnectionState.DEAD:
                return
            with trio.move_on_after(CANCEL_GRACE_S):
                if not await self._send_or_kill(encode({"t": "cancel", "id": call_id}), "a cancel"):
                    return
                await pending.done.wait()
            if not pending.done.is_set() and not self.dead.is_set():  # (the state may have changed meanwhile)
                await self.kill(f"did not stop call {call_id} within {CANCEL_GRACE_S:g} s of its cancel and was killed")
