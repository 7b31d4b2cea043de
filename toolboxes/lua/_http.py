"""The Python half of the Lua ``http`` module: requests to ``AllowedHosts`` only, through the egress proxy.

The host of the URL is normalised and matched against the toolbox's ``AllowedHosts`` (``sandbox._hosts``, the same
rules the supervisor's proxy applies) before anything is sent; a host not allowed is a ``sandbox`` refusal and no
packet leaves. Allowed requests go through the proxy named by the worker's ``HTTP_PROXY``/``HTTPS_PROXY`` (the
supervisor's bridge: the worker's network namespace has no other way out), in absolute form for ``https://`` too
(``toolboxes._proxy_http``: the proxy originates TLS and adds the credentials bound to the host), with redirects
not followed (a script
sees the 3xx and may follow it itself, through the same check). Answers follow :mod:`._host`'s convention.
"""

from __future__ import annotations

import contextlib
import json
import urllib.parse
from typing import TYPE_CHECKING, Any

from sandbox import AllowedHosts, HostError, normalize_host

from .._proxy_http import proxy_for

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["DEFAULT_HTTP_TIMEOUT_S", "HttpClient"]

DEFAULT_HTTP_TIMEOUT_S = 30.0
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

Answer = tuple[Any, ...]


def _refused(message: str) -> Answer:
    return (False, "sandbox", f"sandbox: http: {message}")


class HttpClient:
    """HTTP for one toolbox. ``environ`` is where the proxy is read from (the worker's environment)."""

    def __init__(self, allowed_hosts: tuple[str, ...], environ: Mapping[str, str] | None = None) -> None:
        self.allowed = AllowedHosts.parse(allowed_hosts)
        self.proxies = {scheme: proxy_for(scheme, environ) for scheme in ("http", "https")}

    def check(self, method: str, url: str) -> tuple[str, str] | Answer:
        """Return ``(scheme, proxy)`` for a request the policy allows, or the refusal answer."""
        if method not in _METHODS:
            return (False, "fail", f"http: unsupported method {method!r}; use one of {', '.join(sorted(_METHODS))}")
        try:
            parts = urllib.parse.urlsplit(url)
            port = parts.port
        except ValueError as exc:
            return (False, "fail", f"http: {url!r} is not a valid URL: {exc}")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return (False, "fail", f"http: {url!r} is not an absolute http:// or https:// URL")
        try:
            host = normalize_host(parts.hostname)
        except HostError as exc:
            return _refused(f"{url!r}: {exc}")
        port = port or (443 if parts.scheme == "https" else 80)
        if self.allowed.match(host, port) is None:
            return _refused(f"{url!r}: {self.allowed.refusal(host, port)}")
        proxy = self.proxies[parts.scheme]
        if not proxy:
            return _refused(
                "no egress proxy is configured for this worker (HTTP_PROXY is unset), so no request can leave it"
            )
        return parts.scheme, proxy

    def request(
        self, method: str, url: str, headers_json: str, body: bytes | None, timeout_s: float, max_body_bytes: int
    ) -> Answer:
        """Send one request; answers ``(True, status, body, headers_json)`` or a failure/refusal."""
        checked = self.check(method, url)
        if checked[0] is False:
            return checked
        _, proxy = checked
        if timeout_s <= 0:
            return (False, "fail", "http: no time is left for the request")
        import httpx  # imported on first use: it costs tens of milliseconds

        headers = json.loads(headers_json) if headers_json else {}
        try:
            from .._proxy_http import build_request, open_client  # imports httpx

            with (
                open_client(timeout_s) as client,
                contextlib.closing(
                    client.send(
                        build_request(client, method, url, proxy=proxy, headers=headers, content=body), stream=True
                    )
                ) as resp,
            ):
                chunks: list[bytes] = []
                size = 0
                for chunk in resp.iter_bytes():
                    size += len(chunk)
                    if size > max_body_bytes:
                        return (
                            False,
                            "fail",
                            f"http: {method} {url}: the response body is larger than "
                            f"{max_body_bytes} bytes, more than the script can hold",
                        )
                    chunks.append(chunk)
                out_headers: dict[str, str] = {}
                for k, v in resp.headers.multi_items():
                    k = k.lower()
                    out_headers[k] = f"{out_headers[k]}, {v}" if k in out_headers else v
                return (True, resp.status_code, b"".join(chunks), json.dumps(out_headers))
        except httpx.HTTPError as exc:
            return (False, "fail", f"http: {method} {url}: {type(exc).__name__}: {exc}")
