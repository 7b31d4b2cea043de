"""Answering one MCP request over HTTP: run it within the tenant's limits and write its answer, one JSON response
or an SSE stream (its progress notifications, then the response)."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

import trio

from ._http_wire import HttpRefused, Receive, Send, cancel_on_disconnect, rpc_status, send_json, send_start, sse_event
from ._mcp_wire import INVALID_REQUEST, valid_id

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ._http_sessions import HttpSession, StatelessExchange
    from ._http_tenants import TenantState
    from ._mcp_session import McpSession

__all__ = ["STREAM_QUEUE", "answer_request"]

#: Messages queued for one request's answer or a session's GET stream; past it a GET stream's notifications are
#: dropped (list_changed is idempotent), a request's progress waits for the client.
STREAM_QUEUE = 64
#: Requests that do not count against the tenant's rate and in-flight limits: ``initialize`` is bounded by the
#: tenant's session limit instead.
_UNCOUNTED = frozenset({"initialize"})


async def answer_request(
    holder: HttpSession | StatelessExchange,
    mcp: McpSession,
    tenant: TenantState,
    message: dict[str, Any],
    headers: dict[str, str],
    send: Send,
    extra_headers: list[tuple[str, str]] | None = None,
    cancel_on: Receive | None = None,
) -> None:
    """Run one request and write its answer: JSON, or an SSE stream when it reports progress and the client
    accepts SSE.

    ``cancel_on``: the request's receive channel; the client going away cancels the request.

    Raises:
        HttpRefused: 400 for an id that is not a string or number, or one already running in this session.
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
    token = (
        (params.get("_meta") or {}).get("progressToken")
        if isinstance(params, dict) and isinstance(params.get("_meta"), dict)
        else None
    )
    # Progress, or (stateless revision) log messages the request asked for: an SSE answer when the client takes one.
    stream = (token is not None or (mcp.modern and mcp.log.level is not None)) and "text/event-stream" in headers.get(
        "accept", ""
    )
    counted = None if message.get("method") in _UNCOUNTED else tenant
    if token is None and cancel_on is None:
        # No progress, no disconnect to watch: the job runs in this task and leaves its one reply in a slot.
        slot = _ReplySlot()
        holder.pending[req_id] = slot
        try:
            job = mcp.handle_message(message)
            if job is not None:
                await _run_limited(job, counted, holder, mcp, req_id, message.get("method"))
        finally:
            holder.pending.pop(req_id, None)
        for reply in slot.messages:
            if "method" not in reply:
                await send_json(send, rpc_status(reply) if mcp.modern else 200, reply, extra_headers)
                return
        return  # cancelled by the client (notifications/cancelled): MCP sends no response
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
                nursery.start_soon(_run_limited, job, counted, holder, mcp, req_id, message.get("method"))
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


async def _run_limited(
    job: Callable[[], Awaitable[None]],
    tenant: TenantState | None,
    holder: HttpSession | StatelessExchange,
    mcp: McpSession,
    req_id: Any,
    method: Any,
) -> None:
    """Run a request's job within the tenant's rate and in-flight limits; past one, answer an error naming it."""
    if tenant is None:
        await job()
        return
    wait = tenant.take_call_token()
    if wait > 0 or tenant.calls.available_tokens == 0:
        why = (
            (
                f"the tenant's rate of {tenant.limits.limits.calls_per_second} calls per second is spent (every "
                f"request but initialize counts); retry in {math.ceil(wait)} s"
            )
            if wait > 0
            else (
                f"the tenant has {tenant.limits.limits.concurrent_calls} requests in flight, its limit "
                "(tenants.<name>.limits.concurrent_calls); retry once one has been answered"
            )
        )
        mcp.log.tell("warning", {"event": "tenant_limit", "method": method, "reason": why})
        await holder.deliver({"jsonrpc": "2.0", "id": req_id, "error": {"code": -32000, "message": why}})
        return
    calls = tenant.calls  # the limiter this call holds a token of (a reload may give the tenant a new one)
    calls.acquire_nowait()  # a token is free (just checked) and nothing ran since: taken without a yield
    try:
        await job()
    finally:
        calls.release()
