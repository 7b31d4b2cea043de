"""The ASGI plumbing of the HTTP frontend: reading a bounded body, writing JSON, SSE and refusals. No MCP here."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from ._mcp_wire import INVALID_REQUEST, PARSE_ERROR, UNSUPPORTED_VERSION, encode_message

if TYPE_CHECKING:
    import trio

__all__ = [
    "HEADER_MISMATCH",
    "HttpRefused",
    "MessageSink",
    "Receive",
    "Scope",
    "Send",
    "cancel_on_disconnect",
    "drop_body",
    "lifespan",
    "read_body",
    "refusal_body",
    "request_headers",
    "rpc_status",
    "send_empty",
    "send_json",
    "send_refusal",
    "send_start",
    "sse_event",
    "too_large",
]

HEADER_MISMATCH = -32020

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class MessageSink(Protocol):
    """Where a request's messages go (its reply, its progress): a memory channel, or a plain reply slot."""

    async def send(self, message: dict[str, Any]) -> None: ...


class HttpRefused(Exception):
    """An HTTP answer other than success, raised from deep in a request and written by the app."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        headers: list[tuple[str, str]] | None = None,
        rpc_code: int | None = None,
        req_id: Any = None,
        data: Any = None,
        flood: bool = False,
    ) -> None:
        """``data``: the JSON-RPC error's ``data``; ``flood``: a refusal that can come in floods (load), traced at
        most once a second per status and tenant (``_http_load.RefusalLog``)."""
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or []
        self.rpc_code = rpc_code
        self.req_id = req_id
        self.data = data
        self.flood = flood
        self.tenant: str | None = None  # set once the caller is known


def request_headers(scope: Scope) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in scope.get("headers", []):
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        out[key] = f"{out[key]}, {text}" if key in out and key in ("accept",) else text
    return out


async def read_body(receive: Receive, limit: int, take: Callable[[int], None] | None = None) -> bytes:
    """The request's body, at most ``limit`` bytes; ``take(n)`` is told of each ``n`` bytes before they are kept
    (it raises :class:`HttpRefused` to refuse them: the rest of the body is then read and dropped, so that the
    client, still sending, reads the refusal instead of a reset)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        event = await receive()
        if event["type"] == "http.disconnect":
            raise HttpRefused(400, "the client went away before the body was read")
        chunk = event.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        if take is not None and chunk:
            try:
                take(len(chunk))
            except HttpRefused:
                if event.get("more_body", False):
                    await drop_body(receive, limit - size)
                raise
        chunks.append(chunk)
        if not event.get("more_body", False):
            return b"".join(chunks)


def too_large(limit: int) -> HttpRefused:
    """The refusal of a body past ``limit`` bytes."""
    return HttpRefused(413, f"the body is larger than {limit} bytes, the limit (frontends.http.max_body_bytes)")


async def drop_body(receive: Receive, limit: int) -> None:
    """Read and drop the rest of the request's body, at most ``limit`` more bytes (past them, or when the client
    goes away, the connection closes after the answer)."""
    while limit >= 0:
        event = await receive()
        if event["type"] == "http.disconnect":
            return
        limit -= len(event.get("body", b""))
        if not event.get("more_body", False):
            return


async def cancel_on_disconnect(receive: Receive, scope: trio.CancelScope) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


def rpc_status(reply: dict[str, Any]) -> int:
    """The HTTP status of a JSON-RPC answer: 200, except protocol errors the transport maps (as the spec's table)."""
    code = (reply.get("error") or {}).get("code") if isinstance(reply.get("error"), dict) else None
    return (
        {
            PARSE_ERROR: 400,
            INVALID_REQUEST: 400,
            -32602: 400,
            HEADER_MISMATCH: 400,
            UNSUPPORTED_VERSION: 400,
            -32601: 404,
        }.get(code, 200)
        if code is not None
        else 200
    )


def sse_event(message: dict[str, Any]) -> bytes:
    return b"event: message\ndata: " + encode_message(message).rstrip(b"\n") + b"\n\n"


async def send_start(send: Send, status: int, content_type: str, extra: list[tuple[str, str]] | None = None) -> None:
    headers = [(b"content-type", content_type.encode()), (b"cache-control", b"no-store")]
    headers += [(k.encode(), v.encode()) for k, v in extra or []]
    await send({"type": "http.response.start", "status": status, "headers": headers})


async def send_json(send: Send, status: int, value: dict[str, Any], extra: list[tuple[str, str]] | None = None) -> None:
    body = encode_message(value)
    await send_start(send, status, "application/json", [*(extra or []), ("content-length", str(len(body)))])
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def send_empty(send: Send, status: int) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-length", b"0")]})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def refusal_body(refused: HttpRefused) -> dict[str, Any]:
    """The JSON-RPC error that answers ``refused``. Pure."""
    code = refused.rpc_code if refused.rpc_code is not None else INVALID_REQUEST
    error: dict[str, Any] = {"code": code, "message": refused.message}
    if refused.data is not None:
        error["data"] = refused.data
    return {"jsonrpc": "2.0", "id": refused.req_id, "error": error}


async def send_refusal(send: Send, refused: HttpRefused) -> None:
    try:
        await send_json(send, refused.status, refusal_body(refused), refused.headers)
    except Exception:  # the response had started or the client is gone: nothing more can be said
        pass


async def lifespan(receive: Receive, send: Send) -> None:
    while True:
        event = await receive()
        if event["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif event["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
