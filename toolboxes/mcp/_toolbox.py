"""The MCP toolbox: the tools of one stdio MCP server, named ``mcp_<server>_<tool>``.

Life of the server:

1. ``open_toolbox`` starts it and runs the handshake (``initialize`` with :data:`PROTOCOL_VERSION`, then
   ``notifications/initialized``) and ``tools/list`` through every page (``nextCursor``), all within the handshake
   limit (the toolbox's ``wall_time_s``, at least 5 s and at most 25 s, so the worker's hello never waits past the
   supervisor's start limit). A server that fails any of it (does not start, exits, never answers, answers with an
   error or a protocol version this client does not speak) is a load error: the toolbox has no tools and the worker
   serves on.
2. ``notifications/tools/list_changed`` makes the toolbox list the tools again and tell the supervisor
   (``env.channel.tools_changed()``) when the list differs.
   Resources, resource templates and prompts are listed the same way when the server has the capability, cleaned
   (``toolboxes/_catalog.py``: malformed entries left out with a load error) and announced with the tools;
   ``notifications/resources/list_changed`` and ``.../prompts/list_changed`` list them again. A read is a
   ``resources/read``, a prompt a ``prompts/get`` (prompts are named ``mcp_<server>_<prompt>`` like tools). How a
   list is read, paged and cleaned is :mod:`._listing`.
3. A call is a ``tools/call`` bounded by the call's deadline; a cancel or the deadline sends
   ``notifications/cancelled`` for it and the server keeps serving the other calls. When the supervisor asks the
   call for progress, the request carries a ``progressToken`` and the server's ``notifications/progress`` for it
   are relayed to the supervisor (``toolboxes/_progress.py``) while the call runs.
4. A server that dies ends every call in flight with an ``error`` naming its exit status and the tail of its
   stderr. The next call starts it again (handshake and listing as in 1, the tool list re-announced when it
   changed). More than :data:`CRASH_LOOP_MAX` deaths within :data:`CRASH_LOOP_WINDOW_S` and it is not started again
   until the oldest of them leaves the window: calls meanwhile end with an error that says so.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from .._entry import output_cap
from .._progress import parse_progress_event, progress_event, wants_progress
from .._result import ToolResult
from ._connection import Connection
from ._content import AttachmentSink, to_result
from ._errors import McpError, ServerGone, ServerRefused, ServerTimeout
from ._jsonrpc import KNOWN_PROTOCOL_VERSIONS, Notification, initialize_params
from ._listing import (
    CATALOG_CHANGES,
    CATALOG_METHODS,
    MAX_TOOLS,
    Catalog,
    clean_catalog,
    list_catalog,
    list_pages,
    tool_specs,
)

if TYPE_CHECKING:
    from .._toolbox import CallContext, ToolSpec, WorkerEnv

__all__ = ["CRASH_LOOP_MAX", "CRASH_LOOP_WINDOW_S", "McpToolbox", "open_toolbox"]

CRASH_LOOP_MAX = 5
CRASH_LOOP_WINDOW_S = 60.0
#: Bounds of the handshake limit (the toolbox's wall_time_s in between).
_HANDSHAKE_MIN_S, _HANDSHAKE_MAX_S = 5.0, 25.0


class McpToolbox:
    """One MCP server's tools inside its worker. Thread-safe."""

    def __init__(self, config: dict[str, Any], env: WorkerEnv) -> None:
        policy = config.get("policy") or {}
        limits = policy.get("limits") or env.limits or {}
        self.env = env
        self.server = str(config.get("name") or env.toolbox_name)
        self.label = f"MCP server {self.server!r}"
        self.argv = [str(config["executable"]), *(str(a) for a in config.get("args") or [])]
        self.child_env = {str(k): str(v) for k, v in (policy.get("env") or {}).items()}
        self.output_cap = output_cap(config, env.limits)
        wall = float(limits.get("wall_time_s") or 30)
        self.handshake_s = min(max(wall, _HANDSHAKE_MIN_S), _HANDSHAKE_MAX_S)
        self.sink = AttachmentSink(env.workdir)
        self._lock = threading.Lock()  # tools, errors, connection
        self._start_lock = threading.Lock()  # one (re)start at a time
        self._conn: Connection | None = None
        self._counted: set[int] = set()  # pids whose death is already in _deaths
        self._deaths: deque[float] = deque()
        self._tools: list[dict[str, Any]] = []
        self._public: dict[str, str] = {}
        self._specs: list[ToolSpec] = []
        self._errors: list[dict[str, str]] = []
        self._list_errors: list[dict[str, str]] = []
        #: the server's resources, resource templates and prompts (toolboxes/_catalog.py), cleaned
        self._catalog: dict[str, list[dict[str, Any]]] = {k: [] for k in CATALOG_METHODS}
        self._catalog_errors: list[dict[str, str]] = []
        self._server_capabilities: dict[str, Any] = {}
        self._prompt_names: dict[str, str] = {}  # public prompt name -> the server's
        self._closed = False
        self._progress: dict[str, int] = {}  # progressToken -> call id, while the call runs
        try:
            self._start(time.monotonic() + self.handshake_s)
        except McpError as exc:
            self._errors = [{"source": self.argv[0], "message": str(exc)}]

    # -- the Toolbox interface ---------------------------------------------------------------------------------
    def tools(self) -> list[ToolSpec]:
        with self._lock:
            return list(self._specs)

    def load_errors(self) -> list[dict[str, str]]:
        with self._lock:
            return [*self._errors, *self._list_errors, *self._catalog_errors]

    def resources(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._catalog["resources"])

    def resource_templates(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._catalog["resource_templates"])

    def prompts(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._catalog["prompts"])

    def read_resource(self, uri: str, ctx: CallContext) -> ToolResult:
        """``resources/read`` of the server's own ``uri`` (listed or matching one of its templates: the server
        decides); the answer's shape and size are checked by the supervisor."""
        return self._ask(
            "resources/read",
            {"uri": uri},
            ctx,
            f"reading {uri[:200]}",
            lambda r: {
                "contents": [
                    {k: v for k, v in c.items() if k in ("uri", "mimeType", "text", "blob")}
                    for c in r.get("contents") or []
                    if isinstance(c, dict)
                ]
            },
        )

    def get_prompt(self, name: str, args: dict[str, Any], ctx: CallContext) -> ToolResult:
        with self._lock:
            remote = self._prompt_names.get(name)
        if remote is None:
            return ToolResult.error(f"{name} is not a prompt of {self.label} (any more)")
        return self._ask(
            "prompts/get",
            {"name": remote, "arguments": args},
            ctx,
            f"prompt {remote[:200]}",
            lambda r: {k: v for k, v in r.items() if k in ("description", "messages")},
        )

    def _ask(self, method: str, params: dict[str, Any], ctx: CallContext, what: str, shape: Any) -> ToolResult:
        try:
            conn = self._running(ctx)
            result = conn.request(
                method, params, deadline=ctx.deadline, cancelled=ctx.cancelled, on_cancel=ctx.on_cancel
            )
        except McpError as exc:
            return ToolResult.error(f"{what}: {exc}")
        if not isinstance(result, dict):
            return ToolResult.error(f"{what}: {self.label} answered with something that is not an object")
        return ToolResult("passed", summary=what, structured=shape(result))

    def call(self, tool: str, args: dict[str, Any], ctx: CallContext) -> ToolResult:
        with self._lock:
            remote = self._public.get(tool)
        if remote is None:
            return ToolResult.error(f"{tool} is not a tool of {self.label} (any more)")
        try:
            conn = self._running(ctx)
            params: dict[str, Any] = {"name": remote, "arguments": args}
            if wants_progress(ctx.extra):
                # The server's progress for this call is relayed to the supervisor (and so to the frontend).
                token = f"call-{ctx.call_id}"
                params["_meta"] = {"progressToken": token}
                with self._lock:
                    self._progress[token] = ctx.call_id
            result = conn.request(
                "tools/call", params, deadline=ctx.deadline, cancelled=ctx.cancelled, on_cancel=ctx.on_cancel
            )
        except ServerGone as exc:
            return ToolResult.error(
                f"{exc}. The call ended with it; the server is started again for the next call.",
                summary=f"{self.label} died during the call",
            )
        except ServerTimeout as exc:
            why = "the call was cancelled" if ctx.cancelled.is_set() else "the call's time limit passed"
            return ToolResult.error(
                f"{exc}: {why}. It was sent notifications/cancelled and keeps serving other calls.",
                summary=f"{tool}: {why}",
            )
        except McpError as exc:
            return ToolResult.error(str(exc))
        finally:
            with self._lock:
                self._progress.pop(f"call-{ctx.call_id}", None)
        return to_result(result, tool=tool, stem=f"{remote}-{ctx.call_id}", sink=self.sink, output_cap=self.output_cap)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    # -- starting and listing ----------------------------------------------------------------------------------
    def _running(self, ctx: CallContext) -> Connection:
        """The live connection, after starting the server again if it died. Raises :class:`McpError`."""
        with self._lock:
            conn = self._conn
        if conn is not None and conn.gone_reason is None:
            return conn
        with self._start_lock:
            with self._lock:
                conn = self._conn
            if conn is not None and conn.gone_reason is None:
                return conn  # another call restarted it meanwhile
            now = time.monotonic()
            while self._deaths and now - self._deaths[0] > CRASH_LOOP_WINDOW_S:
                self._deaths.popleft()
            if conn is not None and conn.pid not in self._counted:
                self._counted.add(conn.pid)
                self._deaths.append(now)
            if len(self._deaths) > CRASH_LOOP_MAX:
                wait = CRASH_LOOP_WINDOW_S - (now - self._deaths[0])
                last = conn.gone_reason if conn is not None else "it did not start"
                raise McpError(
                    f"{self.label} died {len(self._deaths)} times within {CRASH_LOOP_WINDOW_S:g} s "
                    f"(last: {last}); it is not started again for {wait:.0f} s"
                )
            deadline = now + self.handshake_s
            if ctx.deadline is not None:
                deadline = min(deadline, ctx.deadline)
            return self._start(deadline)

    def _start(self, deadline: float) -> Connection:
        """Start the server, handshake, list its tools, publish them; on failure stop it and raise."""
        with self._lock:
            if self._closed:
                raise McpError(f"{self.label} is shutting down")
        conn = Connection(
            self.argv,
            self.child_env,
            self.env.workdir,
            self.label,
            self._on_notification,
            on_progress=lambda note: self._relay_progress(note.params),
        )
        try:
            init = conn.request("initialize", initialize_params(), deadline=deadline)
            version = init.get("protocolVersion")
            if version not in KNOWN_PROTOCOL_VERSIONS:
                raise ServerRefused(
                    f"{self.label} answered initialize with protocol version {version!r}, which "
                    f"this client does not speak ({', '.join(sorted(KNOWN_PROTOCOL_VERSIONS))})"
                )
            conn.notify("notifications/initialized")
            capabilities = init.get("capabilities")
            self._server_capabilities = capabilities if isinstance(capabilities, dict) else {}
            tools = self._list(conn, deadline)
            catalog: Catalog = {
                kind: list_catalog(conn, kind, deadline, self.label, self._server_capabilities)
                for kind in CATALOG_METHODS
            }
        except ServerTimeout as exc:
            conn.close()
            raise ServerTimeout(f"{exc} (the limit for starting is {self.handshake_s:g} s)") from exc
        except McpError:
            conn.close()
            raise
        with self._lock:
            if self._closed:
                conn.close()
                raise McpError(f"{self.label} is shutting down")
            self._conn = conn
            changed = self._set_tools(tools)
            changed = self._set_catalog(catalog) or changed
            self._errors = []
        if changed and self._published:
            self.env.channel.tools_changed()
        self._published = True
        return conn

    _published = False

    def _list(self, conn: Connection, deadline: float) -> list[dict[str, Any]]:
        """Every page of ``tools/list``. Raises :class:`McpError`."""
        items = list_pages(conn, "tools/list", "tools", deadline, self.label, MAX_TOOLS)
        return [t for t in items if isinstance(t, dict)]

    def _set_catalog(self, catalog: Catalog) -> bool:
        """Replace the resources, templates and prompts (holding ``_lock``); whether any changed."""
        before = repr(self._catalog)
        self._catalog, self._catalog_errors, self._prompt_names = clean_catalog(self.server, self.label, catalog)
        return before != repr(self._catalog)

    def _set_tools(self, tools: list[dict[str, Any]]) -> bool:
        """Replace the tool list (holding ``_lock``); returns whether the public list changed."""
        specs, public, errors = tool_specs(self.server, self.label, tools)
        before = [s.to_wire() for s in self._specs]
        self._tools, self._public, self._specs = tools, public, specs
        self._list_errors = errors
        return before != [s.to_wire() for s in specs]

    def _relist_catalog(self, kind: str) -> None:
        """List ``kind`` again after the server said it changed; tell the supervisor when it did."""
        with self._lock:
            conn = self._conn
        if conn is None or conn.gone_reason is not None:
            return
        try:
            items = list_catalog(conn, kind, time.monotonic() + self.handshake_s, self.label, self._server_capabilities)
        except McpError as exc:
            items = str(exc)
        with self._lock:
            whole: Catalog = {k: list(v) for k, v in self._catalog.items()}
            if kind == "prompts":  # the listed names are public ones: give the server's back
                whole["prompts"] = [
                    {**p, "name": self._prompt_names.get(p["name"], p["name"])} for p in self._catalog["prompts"]
                ]
            whole[kind] = items
            changed = self._set_catalog(whole)
        if changed:
            self.env.channel.tools_changed()

    def _on_notification(self, note: Notification) -> None:
        kinds = CATALOG_CHANGES.get(note.method)
        if kinds is not None:
            for kind in kinds:
                self._relist_catalog(kind)
            return
        if note.method != "notifications/tools/list_changed":
            return
        with self._lock:
            conn = self._conn
        if conn is None or conn.gone_reason is not None:
            return
        try:
            tools = self._list(conn, time.monotonic() + self.handshake_s)
        except McpError as exc:
            self.env.channel.event({"event": "mcp_relist_failed", "server": self.server, "message": str(exc)})
            return
        with self._lock:
            changed = self._set_tools(tools)
        if changed:
            self.env.channel.tools_changed()

    def _relay_progress(self, params: dict[str, Any]) -> None:
        """A ``notifications/progress`` of a call that asked for progress: to the supervisor; others are dropped."""
        token = params.get("progressToken")
        with self._lock:
            call_id = self._progress.get(token) if isinstance(token, str) else None
        if call_id is None:
            return
        parsed = parse_progress_event(
            {
                "event": "progress",
                "call": call_id,
                "progress": params.get("progress"),
                "total": params.get("total"),
                "message": params.get("message"),
            }
        )
        if parsed is not None:
            self.env.channel.event(progress_event(call_id, parsed[1]))


def open_toolbox(config: dict[str, Any], env: WorkerEnv) -> McpToolbox:
    return McpToolbox(config, env)
