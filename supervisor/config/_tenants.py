"""Who may use the HTTP frontend: ``tenants`` (static token hashes, the agents each may use, its limits, budget
and ceiling) and ``oauth`` (JWT access tokens checked against an issuer's keys). docs/HTTP.md."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from ._budget import BudgetOverride
from ._ceilings import Ceiling
from ._errors import problem
from ._http_address import is_loopback_url
from ._model import StrictModel
from ._policy_fields import PolicyPath, Size, Slug

__all__ = ["OAuthResourceServer", "Tenant", "TenantLimits"]


_TOKEN_HASH_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


def _jwks_url(value: str) -> str:
    if not (value.startswith("https://") or is_loopback_url(value)):
        raise problem(f"the JWKS is fetched over https only: {value!r}", "an https:// URL (http:// on loopback only)")
    return value


def _token_hash(value: str) -> str:
    if not _TOKEN_HASH_RE.match(value):
        raise problem(
            "a static token is stored as its hash, never in clear",
            "sha256:<64 lowercase hex digits> (agents-supervise hash-token prints it)",
        )
    return value


class OAuthResourceServer(StrictModel):
    """OAuth 2.1 resource-server mode: JWT access tokens checked against the issuer's keys (RFC 9068, 8707, 9728)."""

    issuer: str = Field(min_length=1, description="the iss every token must carry")
    authorization_servers: list[str] = Field(
        default=[], description="announced in the protected-resource metadata; default [issuer]"
    )
    jwks_file: PolicyPath | None = Field(default=None, description="the issuer's public keys (a JWK Set file)")
    jwks_url: Annotated[str, AfterValidator(_jwks_url)] | None = Field(
        default=None, description="or where to fetch them (https; fetched at start)"
    )
    algorithms: list[
        Literal["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]
    ] = Field(default=["RS256", "ES256", "EdDSA"])
    tenant_claim: str = Field(default="tenant", min_length=1, description="the claim naming the tenant")
    required_scopes: list[str] = Field(default=[], description="scopes every token must hold (scope claim)")
    leeway_s: int = Field(default=30, ge=0, le=600, description="clock skew allowed on exp and nbf")

    @model_validator(mode="after")
    def _one_key_source(self) -> OAuthResourceServer:
        if (self.jwks_file is None) == (self.jwks_url is None):
            raise problem("oauth needs exactly one of jwks_file and jwks_url")
        return self


class TenantLimits(StrictModel):
    calls_per_second: float | None = Field(default=None, gt=0, description="tool calls per second; null = no cap")
    concurrent_calls: int = Field(default=16, ge=1, description="tool calls in flight at once")
    sessions: int = Field(default=64, ge=1, description="MCP sessions held at once")
    sse_streams: int = Field(default=16, ge=1, description="open SSE streams at once")
    connections: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="TCP connections held at once; null = frontends.http.max_connections_per_tenant",
    )
    body_bytes_in_flight: Size = Field(
        default=16 * 1024**2,
        ge=1024,
        description="request-body bytes the tenant's requests hold at once (never less than max_body_bytes)",
    )


class Tenant(StrictModel):
    """Who may use the HTTP frontend: credentials, the agents it may use, its limits."""

    tokens: list[Annotated[str, AfterValidator(_token_hash)]] = Field(
        default=[], description="static bearer tokens, each stored as sha256:<hex>"
    )
    agents: list[Slug] = Field(
        min_length=1,
        description="the agent slugs this tenant may use: its endpoints, and the agents the policy names that its "
        "agents may prompt as sub-agents",
    )
    limits: TenantLimits = TenantLimits()
    budget: BudgetOverride = Field(
        default=BudgetOverride(),
        description="this tenant's own call-tree budgets: the keys written replace the policy's budget",
    )
    ceiling: Ceiling | None = Field(
        default=None,
        description="the most the agent files of this tenant's agents (and their sub-agents) may grant: hosts, "
        "capabilities",
    )
