"""One MCP session, whatever carries it: the JSON-RPC methods the frontends serve, and how results map to MCP.

Methods: ``initialize``, ``ping``, ``tools/list``, ``tools/call``; notifications ``notifications/initialized`` and
``notifications/cancelled`` (cancels the named call; its worker is told to stop it), and the session sends
``notifications/tools/list_changed`` whenever its tool list changes. One MCP session is one frontend session: its
name is given to every call, which runs in that name's session with the called tool's agent (one session per agent,
see :mod:`supervisor._frontend_sessions`: skills enabled in it, session limits, introspection); ``tools/list`` shows
the session's own list (skills' script tools only where their skill is enabled) and enabling or disabling a skill
notifies this session only. A ``tools/call`` whose ``_meta`` carries ``conversationId``/``turnId`` runs with those
ids; otherwise the call has its session's conversation and a new turn. One whose ``_meta`` carries a
``progressToken`` gets ``notifications/progress`` while it runs (an MCP toolbox server's progress, a sub-agent's
steps; ``_progress_relay.py``), all before its response. Results map to content blocks in ``_mcp_content.py``.

A transport (``_mcp_stdio``, ``_mcp_http``) decodes each message, hands it to :meth:`McpSession.handle_message`,
runs the job it returns, and delivers what the session sends through the ``send`` callable it was given: replies
(which carry the request's ``id``) and notifications. What is on the wire (codes, revisions, strict JSON, which
revision a connection speaks) is ``_mcp_wire.py``'s.
"""

from __future__ import annotations

import json
import uuid
from functools import partial
from typing import TYPE_CHECKING, Any

import trio

from supervisor._face import LOCAL_TENANT, CatalogError, ToolService, ids_from_meta

from ._mcp_content import result_to_mcp
from ._mcp_logging import LEVELS, SessionLog
from ._mcp_tool_list import tool_list
from ._mcp_wire import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    META_LOG_LEVEL,
    METHOD_NOT_FOUND,
    MODERN_VERSIONS,
    PARSE_ERROR,
    REQUEST_CANCELLED,
    RESOURCE_NOT_FOUND,
    SUPPORTED_VERSIONS,
    RevisionGate,
    spliced,
    valid_id,
)
from ._progress_relay import ProgressRelay, progress_token

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable


__all__ = ["SERVER_INFO", "McpSession"]

_INSTRUCTIONS = "Tools run in kernel-confined workers; refusals explain what was refused and why."
#: Results that the stateless revision lets a client cache; this server's lists change, so never for long.
_CACHEABLE = ("tools/list", "server/discover", "resources/list", "resources/templates/list", "prompts/list")
SERVER_INFO = {"name": "agents-supervise", "version": "0.1.0"}
#: list method -> (the catalog kind, the capability that serves it)
_CATALOG_LISTS = {
    "resources/list": ("resources", "resources"),
    "resources/templates/list": ("resource_templates", "resources"),
    "prompts/list": ("prompts", "prompts"),
}


class McpSession:
    """The state and methods of one MCP session; ``send`` delivers each message it sends (replies, notifications)."""

    def __init__(
        self,
        sup: ToolService,
        send: Callable[[dict[str, Any]], Awaitable[None]],
        *,
        session_id: str | None = None,
        modern: bool = False,
        agent: str | None = None,
        tenant: str = LOCAL_TENANT,
        answer_cancelled: bool = False,
        dual_era: bool = False,
        every_skill: bool = False,
    ) -> None:
        """``modern``: the stateless revision (``server/discover``, no ``initialize``, typed results).
        ``agent``: the session serves that agent's tools only, under that agent's names (``None``: every agent's,
        a name two agents have being the first's; the stdio frontend binds its session to an agent).
        ``tenant``: whose session it is (the HTTP frontend's tenants; the local operator on stdio).
        ``answer_cancelled``: a call the client cancels is answered JSON-RPC error :data:`REQUEST_CANCELLED`
        (Streamable HTTP of the handshake revisions, where the client waits on the request's POST for an answer,
        as the SDK's own server does); otherwise it is not answered (stdio: MCP's rule).
        ``dual_era``: the client's first request decides the revision (stdio, as the SDK's server): one carrying
        the 2026-07-28 ``_meta`` envelope makes the session stateless-era (typed results, no ``initialize``),
        anything else a handshake session; a later request of the other era is refused.
        ``every_skill``: every loaded skill of the agent counts as enabled in this session (a stateless HTTP
        request, a session of its own: what it enabled could not last into the next request)."""
        self.sup = sup
        self._send = send
        self._calls: dict[Any, trio.CancelScope] = {}
        self.session_id = session_id or f"mcp-{uuid.uuid4().hex[:12]}"
        self.gate = RevisionGate(modern=modern, dual_era=dual_era)
        self.agent = agent
        self.tenant = tenant
        self.answer_cancelled = answer_cancelled
        self._every_skill = every_skill and agent is not None  # still to do, at the first listing or call
        self.listed: frozenset[str] | None = None  # the names this session's last tools/list answered
        self._initialized = modern
        #: the revision this session speaks (set by ``initialize``; the stateless revision's otherwise)
        self.version = MODERN_VERSIONS[0] if modern else SUPPORTED_VERSIONS[0]
        #: ``notifications/message`` for this session once the client sets a level (``_mcp_logging.py``)
        self.log = SessionLog(sup, self.session_id, agent)

    @property
    def modern(self) -> bool:
        """Whether the session speaks the stateless revision (typed results, no ``initialize``)."""
        return self.gate.modern

    def close(self) -> None:
        """The session ended (its transport closed, or the client ended it): its logging stops and the supervisor
        drops what it keeps of it in memory (:meth:`Supervisor.close_session`). Safe to call twice."""
        self.log.close()
        self.sup.close_session(self.session_id, tenant=self.tenant)

    def _typed(self, result: dict[str, Any], method: str = "") -> dict[str, Any]:
        """``result`` as this session's revision answers it (the stateless revision's result type and caching)."""
        if self.modern:
            result = {**result, "resultType": "complete"}
            if method in _CACHEABLE:
                result.update(ttlMs=0, cacheScope="private")
        return result

    async def _reply(self, req_id: Any, result: dict[str, Any], method: str = "") -> None:
        await self._send({"jsonrpc": "2.0", "id": req_id, "result": self._typed(result, method)})

    async def _error(self, req_id: Any, code: int, message: str, data: Any = None) -> None:
        error = {"code": code, "message": message, **({"data": data} if data is not None else {})}
        await self._send({"jsonrpc": "2.0", "id": req_id, "error": error})

    def parse_error(self, why: str) -> Callable[[], Awaitable[None]]:
        """The job that answers a message that could not be decoded."""
        return partial(self._error, None, PARSE_ERROR, why)

    def refuse(self, req_id: Any, code: int, why: str) -> Callable[[], Awaitable[None]]:
        """The job that answers a message with a JSON-RPC error."""
        return partial(self._error, req_id, code, why)

    def _enable_every_skill(self) -> None:  # only a request that lists or calls pays for its store session
        if self._every_skill and self.agent is not None:
            self._every_skill = False
            if self.sup.has_session_skills(self.agent):
                self.sup.enable_every_skill(self.session_id, agent=self.agent, tenant=self.tenant)

    def visible_tools(self) -> list[Any]:
        """The tools this session serves: its own list (skills enabled in it), its agent's names when bound (else
        each name of the first agent that has it, as its calls find them)."""
        self._enable_every_skill()
        tools = self.sup.list_tools(self.session_id, tenant=self.tenant, agent=self.agent)
        if self.agent is not None:
            return tools
        first: dict[str, Any] = {}
        for t in tools:
            first.setdefault(t.name, t)
        return list(first.values())

    def changed_since_listed(self) -> bool:
        """Whether the tools served now differ from those the session's last ``tools/list`` answered."""
        return self.listed is not None and frozenset(t.name for t in self.visible_tools()) != self.listed

    def _signatures(self) -> dict[str, str]:
        """What each list this session serves holds now, by its ``list_changed`` notification."""
        tools = repr([(t.name, t.description, t.input_schema, t.hints, t.output_schema) for t in self.visible_tools()])
        out = {"notifications/tools/list_changed": tools}
        capabilities = self.capabilities()
        if "resources" in capabilities:
            out["notifications/resources/list_changed"] = repr(
                [self.sup.list_catalog(k, self.agent) for k in ("resources", "resource_templates")]
            )
        if "prompts" in capabilities:
            out["notifications/prompts/list_changed"] = repr(self.sup.list_catalog("prompts", self.agent))
        return out

    async def watch_tools(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Send ``notifications/tools/list_changed`` (``resources/``, ``prompts/``) each time this session's tool
        list (resources and templates, prompts) changes; runs forever.

        ``task_status.started`` is called once the first wait is registered: a change after it is never missed."""
        seen = self._signatures()
        task_status.started()
        while True:
            await self.sup.wait_tools_changed(self.session_id)  # global changes and this session's own
            now = self._signatures()
            changed = [method for method, value in now.items() if seen.get(method) != value]
            seen = now
            if self._initialized and not self.modern:  # the stateless revision has no unsolicited notifications
                for method in changed:
                    await self._send({"jsonrpc": "2.0", "method": method})

    def capabilities(self) -> dict[str, Any]:
        """What this session serves: tools always; resources when a toolbox of its agent can have any (skills,
        MCP servers), prompts when one can have prompts (MCP servers); each list announces its changes."""
        catalogs = self.sup.catalogs(self.agent)
        out: dict[str, Any] = {"tools": {"listChanged": True}, "logging": {}}
        for catalog in sorted(catalogs):
            out[catalog] = {"listChanged": True}
        return out

    def handle_message(self, msg: Any) -> Callable[[], Awaitable[None]] | None:
        """Say what answers one decoded message (``None``: nothing to answer, a notification or a response)."""
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
        if not valid_id(req_id):
            return partial(self._error, None, INVALID_REQUEST, "the id must be a string or a number")
        if not isinstance(params, dict):
            return partial(self._error, req_id, INVALID_PARAMS, "params must be an object")
        was_modern = self.modern
        refusal = self.gate.check(method, params)
        if refusal is not None:
            code, why, data = refusal
            return partial(self._error, req_id, code, why, data)
        if self.modern:
            if not was_modern:  # the first request opened a stateless-era connection
                self._initialized, self.version = True, MODERN_VERSIONS[0]
            level = params["_meta"].get(META_LOG_LEVEL)
            if level in LEVELS and self.log.level != level:
                self.log.set_level(level, announce=False)  # the revision's per-request logging opt-in
        if method == "tools/call":
            if req_id in self._calls:
                return partial(
                    self._error,
                    req_id,
                    INVALID_REQUEST,
                    f"a call with id {json.dumps(req_id)} is already running; ids must be unique",
                )
            scope = trio.CancelScope()
            self._calls[req_id] = scope
            return partial(self._tools_call, req_id, params, scope)
        return partial(self._request, req_id, method, params)

    def _notification(self, method: str, params: Any) -> None:
        if method == "notifications/initialized":
            self._initialized = True
        elif method == "notifications/cancelled" and isinstance(params, dict) and valid_id(params.get("requestId")):
            scope = self._calls.get(params["requestId"])
            if scope is not None:
                scope.cancel()

    async def _request(self, req_id: Any, method: str, params: dict[str, Any]) -> None:
        if method == "initialize" and not self.modern:
            asked = params.get("protocolVersion")
            version = asked if asked in SUPPORTED_VERSIONS else SUPPORTED_VERSIONS[0]
            self.version = version
            self._initialized = True
            await self._reply(
                req_id,
                {
                    "protocolVersion": version,
                    "capabilities": self.capabilities(),
                    "serverInfo": SERVER_INFO,
                    "instructions": _INSTRUCTIONS,
                },
            )
        elif method == "server/discover" and self.modern:
            await self._reply(
                req_id,
                {
                    "supportedVersions": list(MODERN_VERSIONS),
                    "capabilities": self.capabilities(),
                    "serverInfo": SERVER_INFO,
                    "instructions": _INSTRUCTIONS,
                },
                method,
            )
        elif method == "ping":
            await self._reply(req_id, {})
        elif method == "logging/setLevel":
            level = params.get("level")
            if level not in LEVELS:
                await self._error(
                    req_id, INVALID_PARAMS, f"logging/setLevel needs a 'level', one of {', '.join(LEVELS)}"
                )
                return
            await self._reply(req_id, {})
            self.log.set_level(level)
        elif method == "tools/list":
            entries, text, self.listed = tool_list(
                self.visible_tools(), self.version >= "2025-03-26", self.version >= "2025-06-18"
            )
            result = self._typed({}, method)
            result["tools"] = entries  # last: its cached JSON text is spliced in
            message = {"jsonrpc": "2.0", "id": req_id, "result": result}
            await self._send(spliced(message, "tools", text) if text is not None else message)
        elif method in _CATALOG_LISTS and _CATALOG_LISTS[method][1] in self.capabilities():
            kind = _CATALOG_LISTS[method][0]
            key = {"resources": "resources", "resource_templates": "resourceTemplates", "prompts": "prompts"}[kind]
            await self._reply(req_id, {key: self.sup.list_catalog(kind, self.agent)}, method)
        elif method == "resources/read" and "resources" in self.capabilities():
            uri = params.get("uri")
            if not isinstance(uri, str):
                await self._error(req_id, INVALID_PARAMS, "resources/read needs a string 'uri'")
                return
            try:
                result = await self.sup.read_resource(
                    uri, agent=self.agent, session_id=self.session_id, tenant=self.tenant
                )
            except CatalogError as exc:
                await self._error(req_id, RESOURCE_NOT_FOUND, str(exc))
                return
            await self._reply(req_id, result)
        elif method == "prompts/get" and "prompts" in self.capabilities():
            name, args = params.get("name"), params.get("arguments") or {}
            if not isinstance(name, str) or not (
                isinstance(args, dict)
                and len(args) <= 64
                and all(isinstance(v, str) and len(v) <= 65536 for v in args.values())
            ):
                await self._error(
                    req_id,
                    INVALID_PARAMS,
                    "prompts/get needs a string 'name' and 'arguments' "
                    "mapping at most 64 names to strings of up to 64 KiB",
                )
                return
            try:
                result = await self.sup.get_prompt(
                    name, args, agent=self.agent, session_id=self.session_id, tenant=self.tenant
                )
            except CatalogError as exc:
                await self._error(req_id, INVALID_PARAMS, str(exc))
                return
            await self._reply(req_id, result)
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
            self._enable_every_skill()
            call = partial(
                self.sup.call,
                name,
                {} if args is None else args,
                session_id=self.session_id,
                agent_scope=self.agent,
                tenant=self.tenant,
                progress=relay.report if relay else None,
                **ids,
            )
            with scope:
                try:
                    if relay is None:
                        result = await call()  # no progress to relay: no task beside the call's own
                    else:
                        async with trio.open_nursery() as nursery:
                            nursery.start_soon(relay.run, self._send)
                            try:
                                result = await call()
                            finally:
                                relay.close()  # the nursery waits for the queued updates: none after the reply
                    reply = result_to_mcp(result, self.sup.read_attachment)
                    if self.version < "2025-06-18":  # structuredContent came with that revision
                        reply.pop("structuredContent", None)
                except Exception as exc:  # a bug of ours ends this call, never the session
                    self.sup.trace.record(
                        "internal_error", where="tools/call", tool=name, error=f"{type(exc).__name__}: {exc}"
                    )
                    await self._error(req_id, INTERNAL_ERROR, f"internal error while calling {name}; see the trace")
                    return
            if scope.cancelled_caught:
                if self.answer_cancelled:
                    await self._error(req_id, REQUEST_CANCELLED, "Request cancelled")
                return  # the client cancelled: MCP says no response is sent (on stdio)
            await self._reply(req_id, reply)
        finally:
            self._calls.pop(req_id, None)
