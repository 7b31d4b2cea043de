"""What the egress proxy's two HTTP relays share (absolute-form requests in :mod:`sandbox._egress`, requests inside a
terminated tunnel in :mod:`sandbox._egress_tls`): the bound on a request head, the headers never forwarded, and the
head of the request sent upstream (:func:`upstream_head`, pure), and a :class:`Refusal` (status and reason) with the
plain answer the proxy gives for it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sandbox._credentials import apply_credentials, forwarding_header_names, matching_credentials

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sandbox._credentials import Credential
    from sandbox._host_names import Host

__all__ = ["HOP_BY_HOP", "MAX_HEAD_BYTES", "Refusal", "refusal_response", "upstream_head"]

#: The largest request head either relay reads (h11's ``max_incomplete_event_size``).
MAX_HEAD_BYTES = 16 * 1024
#: Headers of one hop, never relayed upstream (lower case): the connection's own, the proxy's, and ``Host``, which
#: the relay sets from the checked URL.
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authorization",
        b"proxy-authenticate",
        b"te",
        b"trailer",
        b"upgrade",
        b"host",
    }
)
#: Headers that frame a request body; kept even when the client names them in ``Connection``.
_FRAMING = frozenset({b"content-length", b"transfer-encoding"})
_REASONS = {400: b"Bad Request", 403: b"Forbidden", 502: b"Bad Gateway", 504: b"Gateway Timeout"}


class Refusal(Exception):
    """The proxy answers the client ``status`` with ``reason`` (403: the rules refuse; 400: not a request the proxy
    takes; 502/504: an allowed upstream failed) and the connection ends."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def refusal_response(status: int, reason: str) -> bytes:
    """The whole answer of a refusal: the status, a plain-text body naming the reason, ``Connection: close``."""
    body = f"agents-supervise egress proxy: {reason}\n".encode()
    return (
        b"HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n"
        b"Connection: close\r\nX-Agents-Supervise-Egress: refused\r\n\r\n"
        % (status, _REASONS.get(status, b"Error"), len(body))
    ) + body


def upstream_head(
    headers: Sequence[tuple[bytes, bytes]],
    *,
    scheme: str,
    host: Host,
    port: int,
    path: str,
    shown: str,
    credentials: Sequence[Credential],
    record: dict[str, Any],
    drop: frozenset[bytes] = HOP_BY_HOP,
) -> tuple[list[tuple[bytes, bytes]], str]:
    """The headers and origin-form path of a client's request as it is sent upstream.

    ``drop`` (hop-by-hop) headers go, and those the client names in ``Connection``, never the body's framing: h11
    framed the request body by it already, and the upstream request must carry the same framing; beside
    ``Transfer-Encoding`` a ``Content-Length`` goes (RFC 9112 6.3: TE wins). The credentials bound to
    ``scheme://host:port`` + ``path`` are applied (:mod:`sandbox._credentials`); their names, and the forwarding
    headers dropped for them, are added to ``record`` (each once). ``Host`` comes first, from the checked URL
    (``shown``, with the port unless it is the scheme's), and ``Connection: close`` last. Pure but for ``record``.
    """
    named = {t.strip().lower() for n, v in headers if n.lower() == b"connection" for t in v.split(b",")} - _FRAMING
    out = [(n, v) for n, v in headers if n.lower() not in drop and n.lower() not in named]
    if any(n.lower() == b"transfer-encoding" for n, _ in out):
        out = [(n, v) for n, v in out if n.lower() != b"content-length"]
    creds = matching_credentials(credentials, scheme, host, port, path)
    if creds:
        if dropped := forwarding_header_names(out):
            names = record.setdefault("dropped_headers", [])
            names += [n for n in dropped if n not in names]
        out, path = apply_credentials(creds, out, path)
        used = record.setdefault("credentials", [])
        used += [c.name for c in creds if c.name not in used]
    host_header = shown if port == (443 if scheme == "https" else 80) else f"{shown}:{port}"
    return [(b"Host", host_header.encode()), *out, (b"Connection", b"close")], path
