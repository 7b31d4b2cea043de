"""The worker loop: the RPC server side of the pipe, run inside a confined worker.

The launcher calls :func:`main` with the payload of the plan once the process is confined. The loop:

1. opens the toolbox (``toolboxes.<kind>.open_toolbox``) and sends ``hello`` with its tools and load errors (or, if
   the toolbox cannot open, a ``hello`` with ``fatal`` set, then exits);
2. reads frames from stdin with leader/follower threads (:mod:`toolboxes._serving`): a ``call`` runs on the thread
   that read it, which first hands the reading to another thread (tools marked ``inline`` run without that hand-off,
   while reading waits); ``cancel`` cancels a call's context and answers it at once with an ``error`` result,
   ``reply`` answers a pending portal/host request, ``shutdown`` or EOF ends the loop; at most
   ``max_concurrent_calls`` calls run at once, later ones wait in order; every result is held to the policy's
   ``limits.output_bytes`` before it is sent (``toolboxes._output_cap``);
3. on exit closes the toolbox (which kills its child processes) and exits.

SIGTERM and SIGINT end the worker at once: calls in flight are cancelled (each answered as cancelled, its script's
tree killed), the toolbox closed, the process gone. The kernel may deliver such a signal to any thread, and Python
runs its handler only on the main thread: the main thread therefore waits on the signal wake-up pipe
(:func:`signal.set_wakeup_fd`), which any thread's delivery writes to, not on a lock that only a signal delivered to
the main thread itself would interrupt (then a signal taken by a call's thread was handled only when the main thread
next woke, the call it should have ended reported as passed meanwhile).

Frames are written whole under a lock, so results from several threads never interleave. A protocol violation from
the supervisor (it should never happen) ends the worker: the supervisor restarts it.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys
import threading
import traceback
from typing import Any

from ._atomic import sweep_temporaries
from ._kinds import KINDS
from ._output_cap import cap_output
from ._protocol import PROTOCOL_VERSION, FrameDecoder, ProtocolError, encode
from ._result import ToolResult
from ._serving import LeaderFollowers
from ._toolbox import CallContext, Toolbox, ToolSpec, WorkerEnv

__all__ = ["main"]


class _Pending:
    """A request this worker sent up the pipe, waiting for its reply."""

    __slots__ = ("event", "reply")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.reply: dict[str, Any] | None = None


class _Channel:
    """The worker's end of the pipe: writes frames, tracks calls and its own requests."""

    def __init__(self, out_fd: int) -> None:
        self._out_fd = out_fd
        self._write_lock = threading.Lock()
        self._next_id = 1
        self._id_lock = threading.Lock()
        self._pending: dict[int, _Pending] = {}
        #: the calls read and not answered yet: a result is sent only for a call still here (once), so a call a
        #: cancel answered is not answered again when it ends; nothing of a call is kept once it is answered
        self.calls: dict[int, CallContext] = {}
        self.calls_lock = threading.Lock()
        self.closed = threading.Event()

    # -- writing ---------------------------------------------------------------------------------------------
    def send(self, message: dict[str, Any]) -> None:
        data = encode(message)
        with self._write_lock:
            view = memoryview(data)
            while view:
                try:
                    n = os.write(self._out_fd, view)
                except BrokenPipeError:
                    self.closed.set()
                    return
                view = view[n:]

    def send_result(self, call_id: int, result: ToolResult) -> None:
        """Send a call's result exactly once: only while the call is in :attr:`calls` (a cancelled call was
        answered already)."""
        with self.calls_lock:
            if self.calls.pop(call_id, None) is None:
                return
        self.send({"t": "result", "id": call_id, "result": result.to_wire()})

    # -- requests up the pipe (HostChannel) ------------------------------------------------------------------
    def _request(self, message: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        with self._id_lock:
            req_id = self._next_id
            self._next_id += 1
        pending = _Pending()
        self._pending[req_id] = pending
        try:
            self.send({**message, "id": req_id, "call": ctx.call_id})
            while not pending.event.wait(0.05):
                if ctx.cancelled.is_set() or self.closed.is_set():
                    raise RuntimeError("the call was cancelled while waiting for the supervisor")
            assert pending.reply is not None
            return pending.reply
        finally:
            self._pending.pop(req_id, None)

    def deliver_reply(self, message: dict[str, Any]) -> bool:
        pending = self._pending.get(message["id"])
        if pending is None:
            return False
        pending.reply = message
        pending.event.set()
        return True

    def portal(self, ctx: CallContext, tool: str, args: dict[str, Any]) -> ToolResult:
        reply = self._request({"t": "portal", "tool": tool, "args": args}, ctx)
        if "error" in reply:
            return ToolResult.error(str(reply["error"]))
        try:
            return ToolResult.from_wire(reply.get("result"))
        except ValueError as exc:
            return ToolResult.error(f"the supervisor sent a malformed result: {exc}")

    def host(self, ctx: CallContext, op: str, args: dict[str, Any]) -> Any:
        reply = self._request({"t": "host", "op": op, "args": args}, ctx)
        if "error" in reply:
            raise RuntimeError(str(reply["error"]))
        return reply.get("result")

    def event(self, event: dict[str, Any]) -> None:
        self.send({"t": "event", "event": event})

    def tools_changed(self) -> None:
        self._tools_changed_cb()

    _tools_changed_cb: Any = None


def _open_toolbox(payload: dict[str, Any], channel: _Channel) -> tuple[Toolbox, WorkerEnv]:
    kind = payload["kind"]
    if kind not in KINDS:
        raise ValueError(f"unknown toolbox kind {kind!r}")
    module = importlib.import_module(f"toolboxes.{kind}")
    for folder in (payload.get("workdir"), payload.get("state_dir")):
        if folder:  # this worker's own folders: what an atomic write killed with the last worker left there
            for leftover in sweep_temporaries(folder):
                print(f"removed {leftover}, left by an interrupted write", file=sys.stderr)
    env = WorkerEnv(
        toolbox_name=payload.get("name", kind),
        workdir=payload.get("workdir", os.getcwd()),
        state_dir=payload.get("state_dir", os.getcwd()),
        channel=channel,
        limits=payload.get("limits", {}),
    )
    return module.open_toolbox(payload.get("config", {}), env), env


#: hello/tools_changed key -> the optional Toolbox method that lists it (toolboxes/_catalog.py)
_CATALOG_METHODS = {"resources": "resources", "resource_templates": "resource_templates", "prompts": "prompts"}
#: call ops besides tool calls -> the optional Toolbox method that answers them
_OPS = {"read_resource": "read_resource", "get_prompt": "get_prompt"}


def _run_call(
    toolbox: Toolbox, channel: _Channel, ctx: CallContext, args: dict[str, Any], output_bytes: int | None
) -> None:
    """Run one call and send its result, held to ``output_bytes`` (``limits.output_bytes``: every kind's result,
    :mod:`toolboxes._output_cap`)."""
    op = ctx.extra.get("op")
    try:
        if op is None:
            result = toolbox.call(ctx.tool, args, ctx)
        elif op == "read_resource":
            result = toolbox.read_resource(ctx.tool, ctx)  # type: ignore[attr-defined]
        else:
            result = toolbox.get_prompt(ctx.tool, args, ctx)  # type: ignore[attr-defined]
        if not isinstance(result, ToolResult):
            result = ToolResult.error(f"internal error: tool {ctx.tool} returned no result")
    except Exception as exc:  # a bug in a toolbox ends one call, not the worker
        traceback.print_exc(file=sys.stderr)
        result = ToolResult.error(f"internal error in tool {ctx.tool}: {type(exc).__name__}: {exc}")
    try:
        result = cap_output(result, output_bytes)
    except (TypeError, ValueError) as exc:  # a structured value JSON cannot carry: the call fails, not the worker
        result = ToolResult.error(f"tool {ctx.tool} returned a result that cannot be sent: {exc}")
    channel.send_result(ctx.call_id, result)


def main(payload: dict[str, Any]) -> None:
    """Serve one toolbox over stdin/stdout until EOF or ``shutdown``; never returns normally (exits)."""
    in_fd, out_fd = 0, 1
    # stdout is the protocol channel: anything a library prints must not corrupt it.
    proto_out = os.dup(out_fd)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    channel = _Channel(proto_out)

    def _terminate(signum: int, frame: Any) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _terminate)
    # Whichever thread the kernel gives a signal to, its C handler writes here: the main thread, waiting on this
    # pipe (below), wakes and runs the Python handler at once. The end of serving writes here too.
    wake_r, wake_w = os.pipe2(os.O_CLOEXEC)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)

    try:
        toolbox, _env = _open_toolbox(payload, channel)
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        channel.send(
            {
                "t": "hello",
                "protocol": PROTOCOL_VERSION,
                "tools": [],
                "fatal": f"toolbox could not start: {type(exc).__name__}: {exc}",
            }
        )
        os._exit(1)

    specs: dict[str, ToolSpec] = {}

    def announce(kind: str) -> None:
        nonlocal specs
        tools = toolbox.tools()
        specs = {t.name: t for t in tools}
        message = {
            "t": kind,
            "protocol": PROTOCOL_VERSION,
            "tools": [t.to_wire() for t in tools],
            "load_errors": toolbox.load_errors(),
        }
        for key, method in _CATALOG_METHODS.items():
            if hasattr(toolbox, method):
                message[key] = getattr(toolbox, method)()
        channel.send(message)

    channel._tools_changed_cb = lambda: announce("tools_changed")
    announce("hello")

    raw_limit = (payload.get("limits") or {}).get("output_bytes")
    output_bytes = raw_limit if isinstance(raw_limit, int) and raw_limit > 0 else None
    decoder = FrameDecoder("to_worker")
    Job = tuple[CallContext, dict[str, Any]]

    def read() -> list[Job] | None:
        """One read from the supervisor (on the leader thread): handle what it holds; the calls to run, or ``None``
        at EOF, ``shutdown`` or a protocol violation."""
        try:
            data = os.read(in_fd, 1 << 16)
        except InterruptedError:
            return []
        if not data:
            return None
        try:
            messages = list(decoder.feed(data))
        except ProtocolError as exc:
            print(f"worker: protocol violation from the supervisor: {exc}", file=sys.stderr)
            return None
        jobs: list[Job] = []
        for msg in messages:
            kind = msg["t"]
            if kind == "call":
                args = msg["args"] if isinstance(msg["args"], dict) else {}
                ctx = CallContext.from_wire(msg["id"], msg["tool"], msg["ctx"] or {})
                op = msg.get("op")
                spec = specs.get(ctx.tool) if op is None else None
                with channel.calls_lock:
                    channel.calls[ctx.call_id] = ctx
                if op is not None:
                    if op not in _OPS or not hasattr(toolbox, _OPS[op]) or not isinstance(ctx.tool, str):
                        channel.send_result(ctx.call_id, ToolResult.error(f"this toolbox cannot {op!r}"))
                        continue
                    ctx.extra["op"] = op
                elif spec is None:
                    channel.send_result(ctx.call_id, ToolResult.error(f"unknown tool {ctx.tool!r}"))
                    continue
                if spec is not None and spec.inline:
                    _run_call(toolbox, channel, ctx, args, output_bytes)
                else:
                    jobs.append((ctx, args))
            elif kind == "cancel":
                with channel.calls_lock:
                    running = channel.calls.get(msg["id"])
                if running is not None:
                    running.cancel()
                    channel.send_result(running.call_id, ToolResult.error("the call was cancelled"))
            elif kind == "reply":
                channel.deliver_reply(msg)
            elif kind == "shutdown":
                return None
        return jobs

    def run(job: Job) -> None:
        ctx, args = job
        if not ctx.cancelled.is_set():  # a call cancelled while it waited in the queue was answered already
            _run_call(toolbox, channel, ctx, args, output_bytes)

    # Set before the wake-up byte is written (serving's own ``stopped`` is set only after this read returns): the
    # main thread that reads the byte sees the end, never a byte it must wait past.
    ended = threading.Event()

    def read_until_the_end() -> list[Job] | None:
        jobs: list[Job] | None = None
        try:
            jobs = read()
        finally:
            if jobs is None:  # serving ends (EOF, shutdown, a violation, or read raised): wake the main thread
                ended.set()
                with contextlib.suppress(BlockingIOError):
                    os.write(wake_w, b"\0")
        return jobs

    # The thread that reads a call runs it (toolboxes/_serving.py); this thread only waits for the end, so that
    # SIGTERM/SIGINT (their handlers run on this thread, woken by the wake-up pipe) end the worker at once whatever
    # the others are doing.
    serving = LeaderFollowers(
        read_until_the_end, run, max_jobs=int(payload.get("max_concurrent_calls", 16)), name="call"
    )
    try:
        serving.start()
        while not ended.is_set():
            os.read(wake_r, 512)  # a signal's byte (its handler runs as this returns) or the end of serving
    finally:
        channel.closed.set()
        with channel.calls_lock:
            in_flight = list(channel.calls.values())
        for ctx in in_flight:
            ctx.cancel()
        try:
            toolbox.close()
        finally:
            os._exit(0)
