"""Answering one MCP request over HTTP: run it within the tenant's limits and write its answer, one JSON response
or an SSE stream (its progress notifications, then the response)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import trio

from ._http_load import UNCOUNTED, admit_request
from ._http_wire import HttpRefused, Receive, Send, cancel_on_disconnect, rpc_status, send_json, send_start, sse_event
from ._mcp_logging import LEVELS
from ._mcp_wire import INVALID_REQUEST, META_LOG_LEVEL, valid_id

if TYPE_CHECKING:
    from ._http_load import ServerLoad
    from ._http_sessions import HttpSession, StatelessExchange
    from ._http_tenants import TenantState
    from ._mcp_session import McpSession

__all__ = ["STREAM_QUEUE", "answer_request"]

#: Messages queued for one request's answer or a session's GET stream; past it a GET stream's notifications are
#: dropped (list_changed is idempotent), a request's progress waits for the client.
STREAM_QUEUE = 64


async def answer_request(
    holder: HttpSession | StatelessExchange,
    mcp: McpSession,
    tenant: TenantState,
    load: ServerLoad,
    message: dict[str, Any],
    headers: dict[str, str],
    send: Send,
    extra_headers: list[tuple[str, str]] | None = None,
    cancel_on: Receive | None = None,
) -> None:
    """Run one request within the tenant's and the server's bounds (``_http_load.admit_request``) and write its
    answer: JSON, or an SSE stream when it reports progress and the client accepts SSE.

    ``cancel_on``: the request's receive channel; the client going away cancels the request.

    Raises:
        HttpRefused: 400 for an id that is not a string or number, or one already running in this session; 429 or
            503 with ``Retry-After`` past a bound (before anything of the answer is written; the session's log is
            told at level warning).
    """
    req_id = message.get("id")
    if not valid_id(req_id):
        raise HttpRefused(400, "the id must be a string or a number", rpc_code=INVALID_REQUEST)
    if req_id in holder.pending:
        raise HttpRefused(
            400,
            f"a request with id {json.dumps(req_id)} is already running; ids must be unique",
            rpc_code=INVALID_REQUEST,
            req_id=req_id,
        )
    params = message.get("params")
    found = params.get("_meta") if isinstance(params, dict) else None
    meta: dict[str, Any] = found if isinstance(found, dict) else {}
    token = meta.get("progressToken")
    # Progress, or (stateless revision) log messages the request asked for: an SSE answer when the client takes one.
    logs = mcp.modern and meta.get(META_LOG_LEVEL) in LEVELS
    stream = (token is not None or logs) and "text/event-stream" in headers.get("accept", "")
    slot = None
    if message.get("method") not in UNCOUNTED:
        try:
            slot = admit_request(tenant, load, req_id)
        except HttpRefused as refused:
            event = "tenant_limit" if refused.status == 429 else "server_busy"
            mcp.log.tell("warning", {"event": event, "method": message.get("method"), "reason": refused.message})
            raise
    try:
        await _answer(holder, mcp, message, headers, send, extra_headers, cancel_on, req_id, token, stream)
    finally:
        if slot is not None:
            slot.release()


async def _answer(
    holder: HttpSession | StatelessExchange,
    mcp: McpSession,
    message: dict[str, Any],
    headers: dict[str, str],
    send: Send,
    extra_headers: list[tuple[str, str]] | None,
    cancel_on: Receive | None,
    req_id: Any,
    token: Any,
    stream: bool,
) -> None:
    if token is None and cancel_on is None:
        # No progress, no disconnect to watch: the job runs in this task and leaves its one reply in a slot.
        slot = _ReplySlot()
        holder.pending[req_id] = slot
        try:
            job = mcp.handle_message(message)
            if job is not None:
                await job()
        finally:
            holder.pending.pop(req_id, None)
        for reply in slot.messages:
            if "method" not in reply:
                await send_json(send, rpc_status(reply) if mcp.modern else 200, reply, extra_headers)
                return
        return  # answered nothing (a job that sends no reply): the response is closed without one
    out_send, out_receive = trio.open_memory_channel[dict[str, Any]](STREAM_QUEUE)
    holder.pending[req_id] = out_send
    if token is not None:
        holder.progress[token] = req_id
    job = mcp.handle_message(message)
    try:
        async with trio.open_nursery() as nursery:
            if cancel_on is not None:
                nursery.start_soon(cancel_on_disconnect, cancel_on, nursery.cancel_scope)
            if job is not None:
                nursery.start_soon(job)
            if stream:
                await send_start(send, 200, "text/event-stream", extra_headers)
                async for reply in out_receive:
                    if mcp.modern:  # the request's log messages so far go before what it sends next
                        for note in mcp.log.take_queued():
                            await send({"type": "http.response.body", "body": sse_event(note), "more_body": True})
                    await send({"type": "http.response.body", "body": sse_event(reply), "more_body": True})
                    if "method" not in reply:
                        break
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            else:
                async for reply in out_receive:
                    if "method" not in reply:
                        await send_json(send, rpc_status(reply) if mcp.modern else 200, reply, extra_headers)
                        break
            nursery.cancel_scope.cancel()  # the answer is out: stop watching for the client going away
    finally:
        holder.pending.pop(req_id, None)
        holder.progress.pop(token, None)


class _ReplySlot:
    """Where the messages for a request without progress go: kept until the request's task, which ran the job
    itself, writes its reply (a memory channel and its wake-up are not needed for that)."""

    __slots__ = ("messages",)

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    async def send(self, message: dict[str, Any]) -> None:
        self.messages.append(message)
