"""The policy's ``frontends.http``: MCP over Streamable HTTP (listen address, TLS, origins, hosts, body,
request, session and connection bounds, drain). Who may use it is ``_tenants.py``; docs/HTTP.md."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field

from ._errors import problem
from ._http_address import normalise_host_name, normalise_origin, parse_listen
from ._model import StrictModel
from ._policy_fields import PolicyPath, Size

__all__ = ["Frontends", "HttpFrontend", "TlsFiles"]


def _listen(value: str) -> str:
    try:
        parse_listen(value)
    except ValueError as exc:
        raise problem(str(exc), "HOST:PORT, for example 127.0.0.1:8765 or [::1]:8765") from exc
    return value


def _origin(value: str) -> str:
    try:
        return normalise_origin(value)
    except ValueError as exc:
        raise problem(str(exc), "an origin such as https://app.example.com (scheme, host, optional port)") from exc


def _server_name(value: str) -> str:
    try:
        return normalise_host_name(value)
    except ValueError as exc:
        raise problem(str(exc), "a host name such as tools.example.com") from exc


def _public_url(value: str) -> str:
    if not re.match(r"^https?://[^/?#\s]+$", value):
        raise problem(f"invalid public_url {value!r}", "scheme and authority only, such as https://tools.example.com")
    return value


class TlsFiles(StrictModel):
    """A certificate chain and its private key (PEM files), for HTTPS."""

    cert: PolicyPath = Field(description="PEM certificate chain, leaf first")
    key: PolicyPath = Field(description="PEM private key of the leaf (readable by root only)")


class HttpFrontend(StrictModel):
    """MCP over Streamable HTTP (``agents-supervise serve --http``); every request is authenticated (``tenants``)."""

    listen: Annotated[str, AfterValidator(_listen)] = Field(
        default="127.0.0.1:8765", description="HOST:PORT to listen on; loopback unless you mean it"
    )
    tls: TlsFiles | None = Field(default=None, description="serve HTTPS with these files; null = plain HTTP")
    public_url: Annotated[str, AfterValidator(_public_url)] | None = Field(
        default=None, description="the URL clients reach this server at (OAuth resource); default from listen"
    )
    allowed_origins: list[Annotated[str, AfterValidator(_origin)]] = Field(
        default=[], description="Origin values of browser clients let in (a request with another Origin gets 403)"
    )
    max_body_bytes: Size = Field(default=4 * 1024**2, ge=1024, description="largest request body")
    max_body_bytes_in_flight: Size = Field(
        default=64 * 1024**2,
        ge=1024,
        description="request-body bytes held at once, all tenants together (never less than max_body_bytes)",
    )
    max_requests_in_flight: int = Field(
        default=256,
        ge=1,
        le=1_000_000,
        description="requests being answered at once, all tenants together; one more is answered 503 + Retry-After",
    )
    max_sessions: int = Field(default=10000, ge=1, description="MCP sessions held at once, all tenants together")
    session_idle_s: float = Field(default=900.0, gt=0, description="a session unused this long is ended")
    sse_keepalive_s: float = Field(default=15.0, gt=0, description="comment line sent on an idle SSE stream")
    max_connections: int = Field(
        default=4096,
        ge=1,
        le=1_000_000,
        description=("TCP connections open at once, all clients together; one more is answered 503 and closed"),
    )
    keepalive_s: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description=("an open connection with no request for this long is closed; also the bound on reading a request"),
    )
    head_timeout_s: float = Field(
        default=10.0,
        gt=0,
        le=600,
        description=(
            "a request head must arrive whole within this, however it trickles in (a connection that has not "
            "authenticated: from its accept or the end of its last answer)"
        ),
    )
    unauthenticated_share: float = Field(
        default=0.25,
        gt=0,
        le=1,
        description="the share of max_connections that connections which have not authenticated may hold",
    )
    max_unauthenticated_per_peer: int = Field(
        default=256, ge=1, le=1_000_000, description="connections that have not authenticated, from one address"
    )
    max_connections_per_tenant: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description=(
            "connections one tenant holds at once (a connection is the tenant's whose request came last on it); past "
            "it the tenant's idle keep-alive connections are closed first, else its request is answered 429; "
            "null = max_connections / max(2, number of tenants); tenants.<name>.limits.connections overrides it"
        ),
    )
    server_names: list[Annotated[str, AfterValidator(_server_name)]] = Field(
        default=[],
        description=(
            "host names clients reach this server by, besides localhost, IP addresses, the listen address and "
            "public_url's host (a request naming another Host is refused: DNS rebinding)"
        ),
    )
    drain_s: float = Field(
        default=0.0,
        ge=0,
        le=600,
        description=(
            "after SIGTERM, serve on this long with /readyz answering 503 (so a load balancer takes the instance "
            "out first), then stop; 0 = stop at once"
        ),
    )


class Frontends(StrictModel):
    http: HttpFrontend | None = Field(default=None, description="MCP over Streamable HTTP; null = stdio only")
