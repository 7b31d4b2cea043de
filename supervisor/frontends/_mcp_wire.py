"""What MCP's JSON-RPC looks like on the wire, whatever carries it: error codes, the revisions served, strict JSON
encoding, the stateless revision's ``_meta`` envelope, and which revision a connection speaks
(:class:`RevisionGate`). Pure: no supervisor, no I/O."""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = [
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "META_CAPABILITIES",
    "META_LOG_LEVEL",
    "META_VERSION",
    "METHOD_NOT_FOUND",
    "MODERN_VERSIONS",
    "PARSE_ERROR",
    "REQUEST_CANCELLED",
    "RESOURCE_NOT_FOUND",
    "SUPPORTED_VERSIONS",
    "UNSUPPORTED_VERSION",
    "EncodedMessage",
    "Refusal",
    "RevisionGate",
    "encode_json",
    "encode_message",
    "modern_envelope_problem",
    "spliced",
    "valid_id",
]

#: a JSON-RPC error to answer with: code, message, data (``None``: none)
Refusal = tuple[int, str, Any]

#: Revisions with the ``initialize`` handshake and sessions, newest first.
SUPPORTED_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
#: Stateless revisions: no handshake, every request carries its protocol version and client facts in ``_meta``.
MODERN_VERSIONS = ("2026-07-28",)

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603
#: MCP's error for a resource that does not exist (or cannot be read)
RESOURCE_NOT_FOUND = -32002
#: a revision the server does not speak (2026-07-28's code)
UNSUPPORTED_VERSION = -32022
#: the stateless revision's per-request envelope: ``params._meta`` keys
META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_LOG_LEVEL = "io.modelcontextprotocol/logLevel"
#: the answer to a cancelled request on Streamable HTTP of the handshake revisions (the SDK's server's code)
REQUEST_CANCELLED = -32800


#: one encoder for every message (``json.dumps`` with options builds a new encoder per call)
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


class EncodedMessage(dict[str, Any]):
    """A message whose JSON line was made beforehand (a reply with a cached part spliced in: :func:`spliced`):
    :func:`encode_message` hands out :attr:`line` as it is; the mapping holds the same message for whoever reads
    it."""

    __slots__ = ("line",)

    line: bytes


def encode_json(value: Any) -> bytes:
    """Compact strict JSON of ``value`` (UTF-8), as messages are written. Raises ``ValueError``/``TypeError``
    (NaN, a value JSON has no form for) and ``UnicodeEncodeError`` (a lone surrogate)."""
    return _ENCODER.encode(value).encode()


def spliced(message: dict[str, Any], key: str, text: bytes) -> dict[str, Any]:
    """``message`` (``{"jsonrpc", "id", "result"}``, whose ``result`` has ``key`` last) as an
    :class:`EncodedMessage` whose line carries ``text`` (``encode_json(message["result"][key])``, made once and
    cached by the caller) instead of encoding that value again; ``message`` itself when its other parts cannot be
    written as they are (:func:`encode_message` then handles it)."""
    result = message["result"]
    head = {**message, "result": {**result, key: []}}
    try:
        line = encode_json(head)
    except (ValueError, TypeError, UnicodeEncodeError, RecursionError):
        return message
    tail = b'"' + key.encode() + b'":[]}}'
    if not line.endswith(tail):  # the key is not last: nothing spliced
        return message
    out = EncodedMessage(message)
    out.line = line[: -len(tail)] + tail[:-4] + text + b"}}\n"
    return out


def encode_message(message: dict[str, Any]) -> bytes:
    """One JSON line for ``message``; strict JSON even when a worker's structured value is not.

    A tool's ``structured`` value may hold NaN or infinities (JSON cannot spell them): it is left out and the text
    content, which says the same, stays. Anything else that cannot be written becomes a JSON-RPC error. An
    :class:`EncodedMessage` is its line.
    """
    if type(message) is EncodedMessage:
        return message.line
    try:
        return _ENCODER.encode(message).encode() + b"\n"
    except UnicodeEncodeError:  # a lone surrogate (from a client's own string): escaped, it is valid JSON
        return _encode_line_ascii(message)
    except (ValueError, TypeError, RecursionError) as exc:
        result = message.get("result")
        if isinstance(result, dict) and "structuredContent" in result:
            trimmed = {**message, "result": {k: v for k, v in result.items() if k != "structuredContent"}}
            return encode_message(trimmed)
        error = {"code": INTERNAL_ERROR, "message": f"the reply could not be written as JSON: {exc}"}
        return _encode_line_ascii({"jsonrpc": "2.0", "id": message.get("id"), "error": error})


def _encode_line_ascii(message: dict[str, Any]) -> bytes:
    try:
        return json.dumps(message, ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode() + b"\n"
    except (ValueError, TypeError, RecursionError) as exc:
        error = {"code": INTERNAL_ERROR, "message": f"the reply could not be written as JSON: {type(exc).__name__}"}
        return json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode() + b"\n"


def modern_envelope_problem(params: Any) -> Refusal | None:
    """What is wrong with a stateless-revision request's ``params._meta`` envelope (``None``: nothing), as a
    JSON-RPC error's code, message and data. Pure."""
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict) or META_VERSION not in meta or META_CAPABILITIES not in meta:
        return INVALID_PARAMS, f"params._meta must carry {META_VERSION!r} and {META_CAPABILITIES!r}", None
    if meta[META_VERSION] not in MODERN_VERSIONS:
        return (
            UNSUPPORTED_VERSION,
            f"protocol version {meta[META_VERSION]!r} is not served",
            {"supported": list(MODERN_VERSIONS), "requested": meta[META_VERSION]},
        )
    return None


def valid_id(req_id: Any) -> bool:
    """JSON-RPC ids are strings or numbers (``None`` marks a notification); JSON has no NaN or infinity."""
    if isinstance(req_id, float):
        return math.isfinite(req_id)
    return isinstance(req_id, str | int) and not isinstance(req_id, bool)


class RevisionGate:
    """Which revision one connection speaks, and the requests that do not belong to it.

    ``modern``: the stateless revision from the start (an HTTP request of it). ``dual_era``: the first request
    decides (stdio, as the SDK's own server): one that carries the 2026-07-28 ``_meta`` envelope and is not
    ``initialize`` opens a stateless-era connection, anything else a handshake one."""

    def __init__(self, *, modern: bool, dual_era: bool) -> None:
        self.modern = modern
        #: ``initialize`` was received (set as it is read, so a request pipelined behind it passes)
        self.handshake_seen = modern
        self._open = dual_era and not modern

    def check(self, method: str, params: dict[str, Any]) -> Refusal | None:
        """Why a request does not belong to this connection's revision (``None``: it does); at the first request
        of a ``dual_era`` connection, decides the revision first."""
        enveloped = isinstance(params.get("_meta"), dict) and META_VERSION in params["_meta"]
        if self._open:
            self._open = False
            if enveloped and method != "initialize":
                self.modern = self.handshake_seen = True
        if self.modern:
            if method == "initialize":
                return (
                    UNSUPPORTED_VERSION,
                    f"this connection speaks {', '.join(MODERN_VERSIONS)} (its first request said so), which has "
                    "no initialize",
                    {"supported": list(MODERN_VERSIONS), "requested": params.get("protocolVersion")},
                )
            return modern_envelope_problem(params)
        if enveloped:
            return (
                INVALID_REQUEST,
                "this connection began with initialize; a request of the stateless revision needs a connection of "
                "its own",
                None,
            )
        if method == "initialize":
            self.handshake_seen = True
        elif not self.handshake_seen and method != "ping":
            return (
                INVALID_REQUEST,
                f"{method} before initialize: this revision begins with the initialize handshake "
                f"(or send requests of {', '.join(MODERN_VERSIONS)} with its _meta envelope)",
                None,
            )
        return None
