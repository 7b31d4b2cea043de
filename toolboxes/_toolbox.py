"""The interface between the worker loop and one toolbox kind.

Each toolbox kind is a module ``toolboxes.<kind>`` (or a package) exposing::

    def open_toolbox(config: dict, env: WorkerEnv) -> Toolbox

``config`` is the toolbox's entry from the agent file as JSON data (the supervisor's pydantic model dumped with
``by_alias=True``; paths already resolved and canonical) plus the policy's per-toolbox extras under ``"policy"``.
``open_toolbox`` runs inside the confined worker, after confinement: anything it touches is subject to the sandbox.

Calls run on worker threads (:meth:`Toolbox.call`); a toolbox must be thread-safe for concurrent calls or serialise
them itself. A call that can block for long must watch ``ctx.cancelled`` (or register a callback with
``ctx.on_cancel``) so that a cancel or a deadline ends it promptly; the worker answers the supervisor's cancel with an
``error`` result either way.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._result import ToolResult

__all__ = ["CallContext", "HostChannel", "ToolSpec", "Toolbox", "WorkerEnv"]


@dataclass(frozen=True)
class ToolSpec:
    """A tool as a toolbox declares it: its own ``name`` (the supervisor derives the public one), a description,
    and the JSON schema of its arguments (an object schema). ``inline`` marks a tool so cheap and non-blocking that
    the worker may run it on its reader thread instead of a pool thread."""

    name: str
    description: str
    input_schema: dict[str, Any]
    inline: bool = False
    annotations: dict[str, Any] = field(default_factory=dict)
    #: MCP tool annotations this toolbox knows to be true (``readOnlyHint``, ``destructiveHint``,
    #: ``idempotentHint``, ``openWorldHint``: booleans; ``title``: a string); see docs/MCP.md for each kind's table
    hints: dict[str, Any] = field(default_factory=dict)
    #: the JSON schema (an object schema) every successful result's ``structured`` value matches, when the tool has
    #: one; the supervisor checks each result against it
    output_schema: dict[str, Any] | None = None

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        }
        if self.annotations:
            out["annotations"] = self.annotations
        if self.hints:
            out["hints"] = self.hints
        if self.output_schema is not None:
            out["output_schema"] = self.output_schema
        return out


class HostChannel(Protocol):
    """Requests a worker makes up the pipe. Blocking; call from a call's thread, never from the reader thread."""

    def portal(self, ctx: CallContext, tool: str, args: dict[str, Any]) -> ToolResult:
        """Ask the supervisor to call ``tool`` (public name) on behalf of the call ``ctx``. The supervisor decides
        (allowed tools, depth, schema) and answers with a result; refusals come back as ``error`` results."""
        ...

    def host(self, ctx: CallContext, op: str, args: dict[str, Any]) -> Any:
        """Ask the supervisor for something only it knows (session introspection). Raises ``RuntimeError`` with the
        supervisor's message when it refuses."""
        ...

    def event(self, event: dict[str, Any]) -> None:
        """Send a trace event (untrusted: the supervisor tags it with the toolbox)."""
        ...

    def tools_changed(self) -> None:
        """Tell the supervisor the toolbox's tool list changed; it will re-read :meth:`Toolbox.tools`."""
        ...


@dataclass
class CallContext:
    """What a call knows about itself. ``deadline`` is a ``time.monotonic()`` value or ``None``."""

    call_id: int
    tool: str
    session_id: str = ""
    conversation_id: str = ""
    turn_id: str = ""
    agent_id: str = ""
    depth: int = 0
    deadline: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    cancelled: threading.Event = field(default_factory=threading.Event)
    _callbacks: list[Callable[[], None]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def from_wire(cls, call_id: int, tool: str, ctx: dict[str, Any]) -> CallContext:
        timeout = ctx.get("timeout_s")
        return cls(
            call_id=call_id,
            tool=tool,
            session_id=str(ctx.get("session_id") or ""),
            conversation_id=str(ctx.get("conversation_id") or ""),
            turn_id=str(ctx.get("turn_id") or ""),
            agent_id=str(ctx.get("agent_id") or ""),
            depth=int(ctx.get("depth") or 0),
            deadline=time.monotonic() + float(timeout) if timeout else None,
            extra={
                k: v
                for k, v in ctx.items()
                if k not in {"session_id", "conversation_id", "turn_id", "agent_id", "depth", "timeout_s"}
            },
        )

    def remaining(self) -> float | None:
        """Seconds left before the deadline (never negative), or ``None`` when the call has none."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - time.monotonic())

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` (from another thread) when the call is cancelled; at once if it already is."""
        with self._lock:
            if not self.cancelled.is_set():
                self._callbacks.append(callback)
                return
        callback()

    def cancel(self) -> None:
        """Mark the call cancelled and run the registered callbacks once."""
        with self._lock:
            if self.cancelled.is_set():
                return
            self.cancelled.set()
            callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            try:
                cb()
            except Exception:  # a failing cancel hook must not stop the others
                pass


@dataclass
class WorkerEnv:
    """What the worker loop gives a toolbox: where it may write, and the channel to the supervisor."""

    toolbox_name: str
    workdir: str
    state_dir: str
    channel: HostChannel
    limits: dict[str, Any] = field(default_factory=dict)


class Toolbox(Protocol):
    """One toolbox inside a worker."""

    def tools(self) -> list[ToolSpec]:
        """The tools this toolbox offers now."""
        ...

    def load_errors(self) -> list[dict[str, str]]:
        """Problems found while loading (``{"source", "message"}``); tools that failed to load are left out."""
        ...

    def call(self, tool: str, args: dict[str, Any], ctx: CallContext) -> ToolResult:
        """Run one call on a worker thread. Arguments were validated against the tool's schema by the supervisor."""
        ...

    def close(self) -> None:
        """Release everything (child processes included). Called once, at worker exit."""
        ...

    # Optional (see toolboxes/_catalog.py): a toolbox with resources or prompts also has
    #   resources() -> list[dict], resource_templates() -> list[dict], prompts() -> list[dict],
    #   read_resource(uri: str, ctx) -> ToolResult  (structured: {"contents": [...]}),
    #   get_prompt(name: str, args: dict[str, str], ctx) -> ToolResult  (structured: {"messages": [...]}).
    # A change of any of the lists is announced with channel.tools_changed(), like a change of the tools.
