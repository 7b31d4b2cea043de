"""A session's GET stream: the server's notifications to it (``list_changed``), as SSE, with keep-alives."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from ._http_answer import STREAM_QUEUE
from ._http_wire import HttpRefused, Receive, Send, cancel_on_disconnect, send_start, sse_event

if TYPE_CHECKING:
    from ._http_sessions import HttpSession
    from ._http_tenants import TenantState

__all__ = ["serve_event_stream"]


async def serve_event_stream(
    session: HttpSession, tenant: TenantState, keepalive_s: float, receive: Receive, send: Send
) -> None:
    """Hold ``session``'s stream open until the client goes away or the session ends (then the stream is ended
    properly, its last line an SSE comment saying why: deleted, idle, or closed by a policy reload). The response
    head is sent at once. A session's stream may be opened again as often as the client likes; a new one replaces
    the one open (which ends): a client that reconnects after a network blip does so before the server notices
    that its old connection is dead.

    A change made while no stream was open is announced when one opens (the session knows what it last listed);
    log messages wait for the next stream in the session's queue (``_mcp_logging``).

    Raises:
        HttpRefused: 409 when the open stream does not end within 5 s, 429 past the tenant's ``sse_streams``.
    """
    if session.stream_scope is not None:  # a client reconnecting before the server noticed its old stream died
        session.stream_scope.cancel()
        with trio.move_on_after(5):
            await session.stream_done.wait()
        if session.stream_scope is not None:
            raise HttpRefused(409, "this session's event stream is already open and did not close in time")
    if tenant.streams >= tenant.limits.limits.sse_streams:
        raise HttpRefused(
            429,
            f"tenant {session.principal.tenant!r} has {tenant.streams} event streams open, its "
            "limit (tenants.<name>.limits.sse_streams)",
            headers=[("retry-after", "10")],
        )
    stream_send, stream_receive = trio.open_memory_channel[dict[str, Any]](STREAM_QUEUE)
    session.stream = stream_send
    scope = session.stream_scope = trio.CancelScope()
    session.stream_done = trio.Event()
    tenant.streams += 1
    started = False
    try:
        with scope:
            await send_start(send, 200, "text/event-stream")
            # The head now, not with the first event (``keepalive_s`` later): a client or proxy waits for it.
            await send({"type": "http.response.body", "body": b"", "more_body": True})
            started = True
            async with trio.open_nursery() as nursery:
                await nursery.start(session.mcp.watch_tools)
                nursery.start_soon(cancel_on_disconnect, receive, nursery.cancel_scope)
                nursery.start_soon(session.mcp.log.pump, session.deliver)  # the session's log messages
                if session.mcp.changed_since_listed():  # changed while no stream was open to say so
                    stream_send.send_nowait({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
                while True:
                    with trio.move_on_after(keepalive_s):
                        message = await stream_receive.receive()
                        await send({"type": "http.response.body", "body": sse_event(message), "more_body": True})
                        continue
                    await send({"type": "http.response.body", "body": b": keepalive\n\n", "more_body": True})
        if started and session.ended:  # the session ended: the stream ends whole, saying why
            why = session.ended_why.replace("\n", " ")
            with trio.move_on_after(keepalive_s):
                await send(
                    {"type": "http.response.body", "body": f": session ended: {why}\n\n".encode(), "more_body": False}
                )
    finally:
        session.stream = None
        session.stream_scope = None
        session.stream_done.set()
        tenant.streams -= 1
        session.last_used = trio.current_time()
