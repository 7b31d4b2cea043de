"""HTTP for the toolboxes that call web APIs (OpenAPI, PostgREST): one request, one :class:`ToolResult`.

Everything goes through the egress proxy named by the worker's ``HTTP_PROXY``/``HTTPS_PROXY`` (the supervisor's
bridge; the worker's network namespace has no other way out), which enforces the toolbox's AllowedHosts, in
absolute form for ``https://`` too (:mod:`._proxy_http`: the proxy originates TLS and adds the credentials the
policy binds to the host; the worker holds at most a placeholder). This
module adds what a tool call needs on top: the call's deadline as the request timeout, cancellation between body
chunks, a response-size cap (``truncated``), no redirects followed, and the mapping of a response to a result:
``passed`` for 2xx, ``failed`` otherwise, summary ``HTTP <status>``, JSON bodies as JSON, other text as text, binary
bodies written to a file in the work folder (``data_path``; images also as attachments). A refusal by the proxy
(its ``X-Agents-Supervise-Egress: refused`` answer, or a refused CONNECT) is an ``error`` naming the reason.

The URL helpers (:func:`quote_path_value`, :func:`encode_query`) percent-encode every character that is not
unreserved (RFC 3986), except the few the caller names as grammar (PostgREST's ``.,()``).
"""

from __future__ import annotations

import hashlib
import json
import mimetypes
import os
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import httpx

from ._proxy_http import build_request, open_client, proxy_for
from ._result import Attachment, Status, ToolResult

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ._toolbox import CallContext

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "FetchError",
    "HttpRequest",
    "encode_query",
    "fetch_bytes",
    "header_value_problem",
    "json_body",
    "quote_path_value",
    "send_request",
]

#: Timeout of a request made outside a call (fetching a spec), and of a call without a deadline.
DEFAULT_TIMEOUT_S = 20.0
_CHUNK = 64 * 1024
_CTL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


class FetchError(Exception):
    """A document could not be fetched (refused by the proxy, network failure, HTTP error, too large). The message
    says which and why; callers turn it into a load error."""


@dataclass
class HttpRequest:
    """A request ready to send: ``url`` already encoded (path values and query), ``content`` the encoded body."""

    method: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    content: bytes | None = None


def quote_path_value(value: str) -> str:
    """Percent-encode one path parameter value: ``/``, ``?``, ``#`` and ``%`` are encoded, so a value never adds a
    path segment; a value of exactly ``.`` or ``..`` is encoded too, so it never walks up the path."""
    encoded = quote(value, safe="")
    if encoded in (".", ".."):
        encoded = encoded.replace(".", "%2E")
    return encoded


def encode_query(pairs: Iterable[tuple[str, str]], *, safe: str = "") -> str:
    """``k=v&k=v`` with names and values percent-encoded (space as ``%20``, ``+`` as ``%2B``); ``safe`` lists
    characters of the value left as they are (query grammar such as PostgREST's ``.,()``)."""
    return "&".join(f"{quote(k, safe='')}={quote(v, safe=safe)}" for k, v in pairs)


def header_value_problem(name: str, value: str) -> str | None:
    """Why ``name: value`` cannot be sent as a header (a control character, CR or LF), or ``None``."""
    if not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", name):
        return f"header name {name!r} is not a valid HTTP token"
    if _CTL.search(value):
        return f"header {name} contains a control character (CR, LF or another one), which HTTP does not allow"
    return None


def _build(
    client: httpx.Client, method: str, url: str, headers: dict[str, str] | None, content: bytes | None = None
) -> httpx.Request:
    return build_request(client, method, url, proxy=proxy_for(httpx.URL(url).scheme), headers=headers, content=content)


def _proxy_refusal(response: httpx.Response, body: bytes) -> str | None:
    if response.headers.get("x-agents-supervise-egress") != "refused":
        return None
    text = body.decode("utf-8", "replace").strip()
    return text.removeprefix("agents-supervise egress proxy: ") or f"HTTP {response.status_code}"


def fetch_bytes(
    url: str,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_bytes: int = 16 * 1024 * 1024,
    headers: dict[str, str] | None = None,
) -> bytes:
    """GET ``url`` through the proxy and return its body. Raises :class:`FetchError` saying why it failed."""
    try:
        with open_client(timeout_s) as client:
            response = client.send(_build(client, "GET", url, headers), stream=True)
            try:
                body = bytearray()
                for chunk in response.iter_bytes(_CHUNK):
                    body += chunk
                    if len(body) > max_bytes:
                        raise FetchError(f"{url}: the document is larger than {max_bytes} bytes")
                refusal = _proxy_refusal(response, bytes(body))
                if refusal is not None:
                    raise FetchError(f"{url}: refused by the egress proxy (HTTP {response.status_code}): {refusal}")
                if not 200 <= response.status_code < 300:
                    raise FetchError(f"{url}: HTTP {response.status_code} {response.reason_phrase}")
                return bytes(body)
            finally:
                response.close()
    except httpx.ProxyError as exc:
        raise FetchError(f"{url}: refused by the egress proxy: {exc} (is the host in AllowedHosts?)") from exc
    except httpx.TimeoutException as exc:
        raise FetchError(f"{url}: no answer within {timeout_s:g} s") from exc
    except httpx.HTTPError as exc:
        raise FetchError(f"{url}: {type(exc).__name__}: {exc}") from exc


def _media_type(response: httpx.Response) -> str:
    return str(response.headers.get("content-type", "")).split(";")[0].strip().lower()


def _is_json(media: str) -> bool:
    return media == "application/json" or media.endswith("+json")


def _is_text(media: str) -> bool:
    return (
        not media
        or media.startswith("text/")
        or _is_json(media)
        or media.endswith("+xml")
        or media in {"application/xml", "application/javascript", "application/x-www-form-urlencoded"}
    )


def _binary_result(
    body: bytes, media: str, workdir: str, status: Status, summary: str, meta: list[tuple[str, str]], truncated: bool
) -> ToolResult:
    digest = hashlib.sha256(body).hexdigest()[:16]
    ext = mimetypes.guess_extension(media) or ".bin"
    name = os.path.join("http-responses", f"{digest}{ext}")
    os.makedirs(os.path.join(workdir, "http-responses"), exist_ok=True)
    with open(os.path.join(workdir, name), "wb") as f:
        f.write(body)
    # Any media, checked by the supervisor against its bytes and its class's limit (a cut body is never attached).
    attachments = [Attachment(media or "application/octet-stream", name)] if not truncated else []
    return ToolResult(
        status,
        summary=summary,
        data=f"{len(body)} bytes of {media or 'unknown type'} saved to {name}",
        data_path=name,
        truncated=truncated,
        metadata=meta,
        attachments=attachments,
    )


def _result(
    response: httpx.Response, body: bytes, truncated: bool, workdir: str, meta: list[tuple[str, str]]
) -> ToolResult:
    code = response.status_code
    status: Status = "passed" if 200 <= code < 300 else "failed"
    summary = f"HTTP {code}"
    media = _media_type(response)
    if not body:
        return ToolResult(status, summary=summary, data="", metadata=meta)
    if _is_json(media) and not truncated:
        try:
            value = json.loads(body)
        except ValueError:
            pass
        else:
            return ToolResult.json(value, status=status, summary=summary, metadata=meta)
    if _is_text(media):
        return ToolResult(
            status, summary=summary, data=body.decode("utf-8", "replace"), truncated=truncated, metadata=meta
        )
    return _binary_result(body, media, workdir, status, summary, meta, truncated)


def send_request(
    request: HttpRequest, ctx: CallContext, *, max_bytes: int, workdir: str, state_effect: str, resource_id: str
) -> ToolResult:
    """Send ``request`` within the call's deadline and map the answer to a result (never raises for network
    problems: they are ``error`` results). A body past ``max_bytes`` is cut and the result marked ``truncated``."""
    timeout = ctx.remaining()
    timeout_s = DEFAULT_TIMEOUT_S if timeout is None else timeout
    if timeout_s <= 0:
        return ToolResult.error("the call's time limit was reached before the request was sent")
    for name, value in request.headers.items():
        problem = header_value_problem(name, value)
        if problem:
            return ToolResult.error(f"cannot send the request: {problem}")
    meta = [("state_effect", state_effect), ("resource_id", resource_id)]
    started = time.monotonic()
    try:
        with open_client(timeout_s) as client:
            req = _build(client, request.method, request.url, request.headers, request.content)
            response = client.send(req, stream=True)
            try:
                body = bytearray()
                truncated = False
                for chunk in response.iter_bytes(_CHUNK):
                    if ctx.cancelled.is_set():
                        return ToolResult.error("the call was cancelled")
                    body += chunk
                    if len(body) > max_bytes:
                        del body[max_bytes:]
                        truncated = True
                        break
                refusal = _proxy_refusal(response, bytes(body))
                if refusal is not None:
                    return ToolResult.error(
                        f"the egress proxy refused {request.method} {request.url} (HTTP {response.status_code}): "
                        f"{refusal}",
                        summary=f"HTTP {response.status_code} (egress proxy)",
                        metadata=meta,
                    )
                meta.append(("http_status", str(response.status_code)))
                meta.append(("duration_s", f"{time.monotonic() - started:.3f}"))
                return _result(response, bytes(body), truncated, workdir, meta)
            finally:
                response.close()
    except httpx.ProxyError as exc:
        return ToolResult.error(
            f"the egress proxy refused {request.method} {request.url}: {exc} (only the "
            "toolbox's AllowedHosts are reachable)",
            metadata=meta,
        )
    except httpx.TimeoutException:
        return ToolResult.error(
            f"{request.method} {request.url}: no answer within the call's time limit ({timeout_s:.1f} s)", metadata=meta
        )
    except httpx.HTTPError as exc:
        return ToolResult.error(f"{request.method} {request.url}: {type(exc).__name__}: {exc}", metadata=meta)


def json_body(value: Any) -> bytes:
    """The JSON encoding of a request body (UTF-8, no ASCII escaping)."""
    return json.dumps(value, ensure_ascii=False).encode()
