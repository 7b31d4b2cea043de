"""Requests to the egress proxy in absolute form, https included: the proxy sees (and can add credentials to) them.

A client that tunnels ``https://`` through ``CONNECT`` hides the request from the proxy, which then cannot add the
credentials the policy binds to the host (``sandbox._credentials``). The project's own HTTP clients (OpenAPI,
PostgREST, Lua ``http``) therefore send every request to the proxy as a plain HTTP request whose target is the whole
URL (``GET https://api.example.com/v1/x HTTP/1.1``); the proxy checks the host, originates TLS to it and verifies
its certificate. Inside the worker no TLS is spoken and no secret is held: at most a placeholder the proxy swaps.

:func:`open_client` makes the one client they share. The worker's proxy is its ``HTTPS_PROXY``/``HTTP_PROXY`` (upper or
lower case, or ``ALL_PROXY``): the bridge at ``http://127.0.0.1:3128``. Without one the request goes directly (outside a
worker, in tests of a toolbox alone).
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import ssl
    from collections.abc import Mapping

    import httpx

__all__ = ["build_request", "open_client", "proxy_for"]


def proxy_for(scheme: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The proxy URL for ``scheme`` (``http`` or ``https``) from ``environ`` (default: the process's), or ``None``."""
    env = os.environ if environ is None else environ
    names = ("HTTPS_PROXY", "https_proxy") if scheme == "https" else ("HTTP_PROXY", "http_proxy")
    for name in (*names, "ALL_PROXY", "all_proxy"):
        if env.get(name):
            return env[name]
    return None


def open_client(timeout_s: float) -> httpx.Client:
    """The one HTTP client of the workers (OpenAPI, PostgREST, spec fetches, Lua ``http``): no proxy of httpx's own
    (requests go to the bridge in absolute form, :func:`build_request`), nothing from the environment, no redirects
    followed (a 3xx is the answer), ``timeout_s`` for each phase."""
    import httpx  # here, not at the top: proxy_for is needed before any request, httpx costs tens of ms

    return httpx.Client(
        timeout=httpx.Timeout(timeout_s), follow_redirects=False, trust_env=False, verify=_ssl_context()
    )


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """The one TLS context of this process's clients: httpx would load the CA store into a new one for every client,
    that is for every request (tens of milliseconds of CPU and megabytes of allocator churn: issue 19's soak)."""
    import httpx

    return httpx.create_ssl_context()


def build_request(
    client: httpx.Client,
    method: str,
    url: str,
    *,
    proxy: str | None,
    headers: Mapping[str, str] | None = None,
    content: bytes | None = None,
) -> httpx.Request:
    """A request for ``url``, sent to ``proxy`` in absolute form when there is one (``client`` must not have a
    proxy of its own: ``trust_env=False``). ``Host`` is the URL's authority either way."""
    import httpx

    if proxy is None:
        return client.build_request(method, url, headers=dict(headers or {}), content=content)
    target = httpx.URL(url)
    proxy_url = httpx.URL(proxy)
    if proxy_url.scheme != "http":
        raise httpx.UnsupportedProtocol(f"the egress proxy {proxy!r} is not an http:// proxy")
    authority = urlsplit(str(target)).netloc.rsplit("@", 1)[-1]
    wanted = {k: v for k, v in (headers or {}).items() if k.lower() != "host"}
    return client.build_request(
        method,
        proxy_url.copy_with(raw_path=target.raw_path),
        headers={"Host": authority, **wanted},
        content=content,
        extensions={"target": str(target).encode("ascii")},
    )
