"""The MCP frontend over stdio: newline-delimited JSON-RPC 2.0, served with trio.

Methods: ``initialize``, ``ping``, ``tools/list``, ``tools/call``; notifications ``notifications/initialized`` and
``notifications/cancelled`` (cancels the named call; its worker is told to stop it), and the server sends
``notifications/tools/list_changed`` whenever the tool list changes. One stdio connection is one frontend session:
its name is given to every call, which runs in that name's session with the called tool's agent (one session per
agent, see :mod:`supervisor._frontend_sessions`: skills enabled in it, session limits, introspection); ``tools/list``
shows the connection's own list (skills' script tools only where their skill is enabled) and enabling or disabling a
skill notifies this connection only. A ``tools/call`` whose ``_meta`` carries ``conversationId``/``turnId`` runs with
those ids; otherwise the call has its session's conversation and a new turn. One whose ``_meta`` carries a
``progressToken`` gets ``notifications/progress`` while it runs (an MCP toolbox server's progress, a sub-agent's
steps; ``_progress_relay.py``), all before its response.

Results map to content blocks in ``_mcp_content.py`` (text, image, audio, embedded resources, resource links,
``structuredContent``, ``isError``). Calls run concurrently; replies are written whole, one line each.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import trio

from ._mcp_content import result_to_mcp
from ._pipes import send_whole
from ._progress_relay import ProgressRelay, progress_token
from ._session_ids import ids_from_meta
from ._supervisor import Supervisor

__all__ = ["McpStdioServer", "serve_mcp_stdio"]

SUPPORTED_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
SERVER_INFO = {"name": "agents-supervise", "version": "0.1.0"}
_MAX_LINE = 64 * 1024 * 1024
#: Requests of one MCP session being handled or answered at once. Past it the server stops reading stdin until one
#: ends: a client that sends without reading the replies is slowed down, never buffered without bound.
MAX_IN_FLIGHT = 256

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603


def _encode_line(message: dict[str, Any]) -> bytes:
    """One JSON line for ``message``; strict JSON even when a worker's structured value is not.

    A tool's ``structured`` value may hold NaN or infinities (JSON cannot spell them): it is left out and the text
    content, which says the same, stays. Anything else that cannot be written becomes a JSON-RPC error.
    """
    try:
        return json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode() + b"\n"
    except UnicodeEncodeError:  # a lone surrogate (from a client's own string): escaped, it is valid JSON
        return _encode_line_ascii(message)
    except (ValueError, TypeError, RecursionError) as exc:
        result = message.get("result")
        if isinstance(result, dict) and "structuredContent" in result:
            trimmed = {**message, "result": {k: v for k, v in result.items() if k != "structuredContent"}}
            return _encode_line(trimmed)
        error = {"code": INTERNAL_ERROR, "message": f"the reply could not be written as JSON: {exc}"}
        return _encode_line_ascii({"jsonrpc": "2.0", "id": message.get("id"), "error": error})


def _encode_line_ascii(message: dict[str, Any]) -> bytes:
    try:
        return json.dumps(message, ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode() + b"\n"
    except (ValueError, TypeError, RecursionError) as exc:
        error = {"code": INTERNAL_ERROR, "message": f"the reply could not be written as JSON: {type(exc).__name__}"}
        return json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode() + b"\n"


def _valid_id(req_id: Any) -> bool:
    """JSON-RPC ids are strings or numbers (``None`` marks a notification); JSON has no NaN or infinity."""
    if isinstance(req_id, float):
        return math.isfinite(req_id)
    return isinstance(req_id, str | int) and not isinstance(req_id, bool)


class McpStdioServer:
    """One MCP session over a pair of byte streams."""

    def __init__(self, sup: Supervisor, receive: trio.abc.ReceiveStream, send: trio.abc.SendStream) -> None:
        self.sup = sup
        self._receive = receive
        self._send = send
        self._send_lock = trio.Lock()
        self._calls: dict[Any, trio.CancelScope] = {}
        self.session_id = f"mcp-{uuid.uuid4().hex[:12]}"
        self._initialized = False
        self._in_flight = trio.CapacityLimiter(MAX_IN_FLIGHT)

    async def _write(self, message: dict[str, Any]) -> None:
        line = _encode_line(message)
        try:
            await send_whole(self._send, self._send_lock, line)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    async def _reply(self, req_id: Any, result: dict[str, Any]) -> None:
        await self._write({"jsonrpc": "2.0", "id": req_id, "result": result})

    async def _error(self, req_id: Any, code: int, message: str) -> None:
        await self._write({"jsonrpc": "2.0", "id": req_id, "error": {"code": code, "message": message}})

    async def serve(self) -> None:
        """Serve until the client closes stdin."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._watch_tools)
            buffer = bytearray()
            skipping = False  # inside a line that was too long: drop bytes until its newline
            while True:
                try:
                    chunk = await self._receive.receive_some(1 << 16)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    chunk = b""
                if not chunk:
                    break
                start = 0
                while (end := chunk.find(b"\n", start)) >= 0:
                    if skipping:
                        skipping = False
                    else:
                        buffer += chunk[start:end]
                        job = self._handle_line(bytes(buffer)) if buffer.strip() else None
                        if job is not None:
                            # A slot per answer in progress: no more lines are read while all are taken.
                            token = object()
                            await self._in_flight.acquire_on_behalf_of(token)
                            nursery.start_soon(self._run_job, job, token)
                    buffer.clear()
                    start = end + 1
                if not skipping:
                    buffer += chunk[start:]
                    if len(buffer) > _MAX_LINE:
                        # Refused once, as soon as it is too long; never buffered beyond the limit.
                        await self._error(None, INVALID_REQUEST,
                                          f"message too large: a line may have at most {_MAX_LINE} bytes")
                        buffer.clear()
                        skipping = True
            nursery.cancel_scope.cancel()

    async def _watch_tools(self) -> None:
        while True:
            await self.sup.wait_tools_changed(self.session_id)  # global changes and this session's own
            if self._initialized:
                await self._write({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})

    async def _run_job(self, job: Callable[[], Awaitable[None]], token: object) -> None:
        try:
            await job()
        finally:
            self._in_flight.release_on_behalf_of(token)

    def _handle_line(self, line: bytes) -> Callable[[], Awaitable[None]] | None:
        """Decode one line and say what answers it (``None``: nothing to answer, a notification or a response)."""
        try:
            msg = json.loads(line)
        except RecursionError:
            return partial(self._error, None, PARSE_ERROR, "parse error: the JSON is nested too deeply")
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
            return partial(self._error, None, PARSE_ERROR, f"parse error: {str(exc)[:200]}")
        if isinstance(msg, list) or not isinstance(msg, dict):
            return partial(self._error, None, INVALID_REQUEST, "expected a JSON-RPC object")
        method = msg.get("method")
        req_id = msg.get("id")
        params = msg.get("params") or {}
        if not isinstance(method, str):
            if "result" in msg or "error" in msg:
                return None  # a response to something we never ask; ignore
            return partial(self._error, req_id, INVALID_REQUEST, "missing method")
        if req_id is None:
            self._notification(method, params)
            return None
        if not _valid_id(req_id):
            return partial(self._error, None, INVALID_REQUEST, "the id must be a string or a number")
        if not isinstance(params, dict):
            return partial(self._error, req_id, INVALID_PARAMS, "params must be an object")
        if method == "tools/call":
            if req_id in self._calls:
                return partial(self._error, req_id, INVALID_REQUEST,
                               f"a call with id {json.dumps(req_id)} is already running; ids must be unique")
            scope = trio.CancelScope()
            self._calls[req_id] = scope
            return partial(self._tools_call, req_id, params, scope)
        return partial(self._request, req_id, method, params)

    def _notification(self, method: str, params: Any) -> None:
        if method == "notifications/initialized":
            self._initialized = True
        elif method == "notifications/cancelled" and isinstance(params, dict) and _valid_id(
                params.get("requestId")):
            scope = self._calls.get(params["requestId"])
            if scope is not None:
                scope.cancel()

    async def _request(self, req_id: Any, method: str, params: dict[str, Any]) -> None:
        if method == "initialize":
            asked = params.get("protocolVersion")
            version = asked if asked in SUPPORTED_VERSIONS else SUPPORTED_VERSIONS[0]
            self._initialized = True
            await self._reply(req_id, {
                "protocolVersion": version,
                "capabilities": {"tools": {"listChanged": True}},
                "serverInfo": SERVER_INFO,
                "instructions": "Tools run in kernel-confined workers; refusals explain what was refused and why.",
            })
        elif method == "ping":
            await self._reply(req_id, {})
        elif method == "tools/list":
            tools = []
            for t in self.sup.list_tools(self.session_id):
                entry: dict[str, Any] = {"name": t.name, "description": t.description, "inputSchema": t.input_schema}
                tools.append(entry)
            await self._reply(req_id, {"tools": tools})
        else:
            await self._error(req_id, METHOD_NOT_FOUND, f"method not found: {method}")

    async def _tools_call(self, req_id: Any, params: dict[str, Any], scope: trio.CancelScope) -> None:
        try:
            name = params.get("name")
            args = params.get("arguments")
            if not isinstance(name, str):
                await self._error(req_id, INVALID_PARAMS, "tools/call needs a string 'name'")
                return
            try:
                ids = ids_from_meta(params.get("_meta"))  # the client's conversation and turn ids, if it sent them
            except ValueError as exc:
                await self._error(req_id, INVALID_PARAMS, f"tools/call: {exc}")
                return
            token = progress_token(params.get("_meta"))
            relay = ProgressRelay(token) if token is not None else None
            with scope:
                try:
                    async with trio.open_nursery() as nursery:
                        if relay is not None:
                            nursery.start_soon(relay.run, self._write)
                        try:
                            result = await self.sup.call(name, {} if args is None else args,
                                                         session_id=self.session_id,
                                                         progress=relay.report if relay else None, **ids)
                        finally:
                            if relay is not None:
                                relay.close()  # the nursery waits for the queued updates: none after the reply
                    reply = result_to_mcp(result, self.sup.attachments.read)
                except Exception as exc:  # a bug of ours ends this call, never the session
                    self.sup.trace.record("internal_error", where="tools/call", tool=name,
                                          error=f"{type(exc).__name__}: {exc}")
                    await self._error(req_id, INTERNAL_ERROR, f"internal error while calling {name}; see the trace")
                    return
            if scope.cancelled_caught:
                return  # the client cancelled: MCP says no response is sent
            await self._reply(req_id, reply)
        finally:
            self._calls.pop(req_id, None)


async def serve_mcp_stdio(sup: Supervisor) -> None:
    """Serve MCP on this process's stdin/stdout until stdin closes."""
    import os

    receive = trio.lowlevel.FdStream(os.dup(0))
    send = trio.lowlevel.FdStream(os.dup(1))
    async with receive, send:
        await McpStdioServer(sup, receive, send).serve()
