"""Whole HTTP/1.1 responses as bytes, written without h11's writer: the answer to a keep-alive request (one write,
head and body together) and the plain-text answers the server gives itself. Pure."""

from __future__ import annotations

import re
from http import HTTPStatus

__all__ = ["simple_response", "whole_response"]

#: RFC 9110 token (a header name) and field value (visible ASCII, inner spaces and tabs): what h11 accepts.
_TOKEN = re.compile(rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+")
_VALUE = re.compile(rb"(?:[\x21-\x7e]+(?:[ \t]+[\x21-\x7e]+)*)?")
#: statuses whose responses have no body (h11 writes those)
_NO_BODY = frozenset({204, 304})
_STATUS_LINES = {s.value: f"HTTP/1.1 {s.value} {s.phrase}\r\n".encode() for s in HTTPStatus}


def whole_response(
    status: int, headers: list[tuple[bytes, bytes]], body: bytes, *, close: bool = False
) -> bytes | None:
    """One complete HTTP/1.1 response with ``content-length`` as bytes (and ``connection: close`` when ``close``),
    or ``None`` when h11 must write it (a status without a body or below 200, a header h11 would refuse or frame
    differently). Pure."""
    if status < 200 or status in _NO_BODY or status > 999:
        return None
    out = [_STATUS_LINES.get(status) or f"HTTP/1.1 {status} \r\n".encode()]
    length = str(len(body)).encode()
    for name, value in headers:
        lower = name.lower()
        if lower == b"content-length":
            if value.strip() != length:
                return None
            continue
        if lower in (b"transfer-encoding", b"connection") or not _TOKEN.fullmatch(name) or not _VALUE.fullmatch(value):
            return None
        out.append(lower + b": " + value + b"\r\n")
    if close:
        out.append(b"connection: close\r\n")
    out.append(b"content-length: " + length + b"\r\n\r\n")
    out.append(body)
    return b"".join(out)


def simple_response(status: int, reason: str, headers: list[tuple[str, str]] | None = None) -> bytes:
    """A whole plain-text response saying ``reason`` that closes the connection, as bytes. Pure."""
    body = reason.encode() + b"\n"
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Error"
    head = [
        f"HTTP/1.1 {status} {phrase}",
        "content-type: text/plain; charset=utf-8",
        f"content-length: {len(body)}",
        "connection: close",
        *(f"{k}: {v}" for k, v in headers or []),
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
