"""JSON-RPC 2.0 over MCP's stdio transport, without I/O: framing, message kinds, the handshake's messages.

MCP's stdio transport sends one JSON-RPC message per line (UTF-8, no embedded newlines). :class:`LineSplitter`
cuts a byte stream into lines with a size cap (a line past it is dropped whole and reported, never buffered without
bound); :func:`parse_line` says what a line is: a response to one of our requests, a request or a notification from
the server, or garbage (with the reason). Nothing here reads or writes a pipe; :mod:`._connection` does.

What this does not do: batches (MCP 2025-06-18 removed them; a batch line is garbage here) and validation of the
``result`` of a response beyond "it is an object" (the callers check the fields they use).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = [
    "CLIENT_INFO",
    "KNOWN_PROTOCOL_VERSIONS",
    "MAX_LINE_BYTES",
    "METHOD_NOT_FOUND",
    "PROTOCOL_VERSION",
    "Garbage",
    "Incoming",
    "LineSplitter",
    "Notification",
    "Request",
    "Response",
    "encode",
    "error_reply",
    "initialize_params",
    "parse_line",
    "result_reply",
]

#: The protocol version this client asks for.
PROTOCOL_VERSION = "2025-06-18"
#: Versions a server may answer with that this client speaks (the stdio handshake-era versions).
KNOWN_PROTOCOL_VERSIONS = frozenset({"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"})
CLIENT_INFO = {"name": "agents-supervise", "version": "0.1"}
#: The longest line accepted from a server (an image in base64 fits; an endless line does not).
MAX_LINE_BYTES = 16 * 1024 * 1024
METHOD_NOT_FOUND = -32601


@dataclass(frozen=True)
class Response:
    """An answer to one of our requests: ``result`` (an object) or ``error`` (``{code, message, data?}``), or,
    when the answer has our id but not one of those shapes, ``malformed`` saying what is wrong."""

    id: int
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    malformed: str | None = None


@dataclass(frozen=True)
class Request:
    """A request the server sends us (``ping``, ``sampling/createMessage``, ``roots/list``, ...)."""

    id: int | str
    method: str
    params: dict[str, Any]


@dataclass(frozen=True)
class Notification:
    """A notification from the server (``notifications/tools/list_changed``, logging, progress...)."""

    method: str
    params: dict[str, Any]


@dataclass(frozen=True)
class Garbage:
    """A line that is no JSON-RPC message; ``reason`` says why, ``sample`` is its start (for messages)."""

    reason: str
    sample: str


Incoming = Response | Request | Notification | Garbage


def encode(message: dict[str, Any]) -> bytes:
    """One message as a line (``json.dumps`` never writes a raw newline inside a string)."""
    return json.dumps({"jsonrpc": "2.0", **message}, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def result_reply(req_id: int | str, result: dict[str, Any]) -> dict[str, Any]:
    return {"id": req_id, "result": result}


def error_reply(req_id: int | str, code: int, message: str) -> dict[str, Any]:
    return {"id": req_id, "error": {"code": code, "message": message}}


def initialize_params() -> dict[str, Any]:
    """The ``initialize`` request's params: no client capabilities (no roots, sampling or elicitation: a worker
    has no model and no user to ask)."""
    return {"protocolVersion": PROTOCOL_VERSION, "capabilities": {}, "clientInfo": dict(CLIENT_INFO)}


def _sample(line: bytes) -> str:
    text = line[:120].decode("utf-8", "replace")
    return text + ("..." if len(line) > 120 else "")


def parse_line(line: bytes) -> Incoming:
    """Classify one line from the server (without its newline). Never raises."""
    stripped = line.strip()
    try:
        msg = json.loads(stripped)
    except (ValueError, RecursionError):
        return Garbage("not JSON", _sample(stripped))
    if not isinstance(msg, dict):
        return Garbage("not a JSON-RPC object", _sample(stripped))
    if msg.get("jsonrpc") != "2.0":
        return Garbage('no "jsonrpc": "2.0"', _sample(stripped))
    method = msg.get("method")
    params = msg.get("params")
    if params is None:
        params = {}
    if method is not None:
        if not isinstance(method, str) or not isinstance(params, dict):
            return Garbage("a request or notification with a bad method or params", _sample(stripped))
        if "id" in msg:
            if not isinstance(msg["id"], int | str) or isinstance(msg["id"], bool):
                return Garbage("a request with a bad id", _sample(stripped))
            return Request(msg["id"], method, params)
        return Notification(method, params)
    req_id = msg.get("id")
    if not isinstance(req_id, int) or isinstance(req_id, bool):
        return Garbage("a response whose id is not one of ours", _sample(stripped))
    if "error" in msg:
        err = msg["error"]
        if not (isinstance(err, dict) and isinstance(err.get("code"), int) and isinstance(err.get("message"), str)):
            return Response(req_id, malformed=f"an error without code and message: {_sample(stripped)}")
        return Response(req_id, error=err)
    result = msg.get("result")
    if not isinstance(result, dict):
        return Response(req_id, malformed=f"a result that is not an object: {_sample(stripped)}")
    return Response(req_id, result=result)


class LineSplitter:
    """Cuts a byte stream into lines of at most ``max_bytes``; a longer line is dropped whole.

    ``feed`` yields ``bytes`` for each complete line and a :class:`Garbage` for each line dropped for its size.
    """

    def __init__(self, max_bytes: int = MAX_LINE_BYTES) -> None:
        self._max = max_bytes
        self._buf = bytearray()
        self._dropping = False

    def feed(self, data: bytes) -> Iterator[bytes | Garbage]:
        start = 0
        while True:
            nl = data.find(b"\n", start)
            chunk = data[start:] if nl < 0 else data[start:nl]
            if not self._dropping:
                if len(self._buf) + len(chunk) > self._max:
                    self._dropping = True
                    self._buf.clear()
                else:
                    self._buf += chunk
            if nl < 0:
                return
            if self._dropping:
                self._dropping = False
                yield Garbage(f"a line longer than {self._max} bytes", "")
            elif self._buf.strip():
                yield bytes(self._buf)
            self._buf.clear()
            start = nl + 1
