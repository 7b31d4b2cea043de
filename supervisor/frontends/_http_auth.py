"""Who is calling the HTTP frontend: a static bearer token or an OAuth 2.1 JWT access token, mapped to a tenant.

Every HTTP request carries ``Authorization: Bearer <token>``. A token is first looked up among the tenants'
static tokens (the policy stores only ``sha256:<hex>`` of each, so a leaked policy leaks no credential); when it is
not one of them and the policy has an ``oauth`` section, it is checked as a JWT access token with joserfc: the
signature against the issuer's JWK Set (only the algorithms the policy lists), ``iss``, ``exp``/``nbf`` (with the
policy's leeway), ``aud`` (RFC 8707: it must name this server's resource, either the endpoint's URL or the
server's public URL), the required scopes, and the tenant claim naming a tenant of the policy. Then the tenant
must be allowed the agent of the endpoint.

After a policy reload a token the policy no longer lists is refused with a reason that says so (its tenant was
removed, or the token was withdrawn: rotated), as is an OAuth token naming a tenant the reload removed.

Refusals follow RFC 6750 and RFC 9728: 401 with ``WWW-Authenticate: Bearer resource_metadata="..."`` (plus
``error`` and ``error_description`` when a token was presented) for a missing or bad token, 403 with
``error="insufficient_scope"`` for a good token that may not do this. The description says what was wrong in
words an operator can act on; it never echoes the token.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet

from supervisor._errors import PolicyRefused
from supervisor.config import HttpFrontend, OAuthResourceServer, Policy, Tenant, parse_listen

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = ["AuthRefusal", "Authenticator", "Principal", "hash_token", "http_frontend_from_policy", "load_key_set"]

#: Longest Authorization header value considered; a longer one is refused without parsing.
MAX_TOKEN_CHARS = 16 * 1024
#: Withdrawn tokens remembered (their refusal says they were withdrawn, not just unknown)
MAX_RETIRED = 10_000


def hash_token(token: str) -> str:
    """The form a static token is stored in the policy: ``sha256:<hex>``."""
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Principal:
    """An authenticated caller: its tenant, how it proved it, and (for OAuth) the token's subject."""

    tenant: str
    via: str  # "token" | "oauth"
    subject: str | None = None


@dataclass(frozen=True)
class AuthRefusal:
    """Why a request is not served: the HTTP status, the RFC 6750 error code (``None``: no token was sent)."""

    status: int
    error: str | None
    description: str

    def www_authenticate(self, resource_metadata: str) -> str:
        """The ``WWW-Authenticate`` value for this refusal."""
        parts = [f'resource_metadata="{resource_metadata}"']
        if self.error is not None:
            parts.append(f'error="{self.error}"')
            parts.append('error_description="{}"'.format(self.description.replace('"', "'")))
        return "Bearer " + ", ".join(parts)


def load_key_set(data: str | bytes) -> KeySet:
    """A JWK Set from its JSON text, public keys only.

    Raises:
        ValueError: not JSON, not a JWK Set, or a key joserfc cannot import.
    """
    try:
        value = json.loads(data)
        if not isinstance(value, dict) or not isinstance(value.get("keys"), list):
            raise ValueError("expected an object with a 'keys' array")
        return KeySet.import_key_set({"keys": [_public(k) for k in value["keys"]]})
    except (ValueError, TypeError, JoseError) as exc:
        raise ValueError(f"invalid JWK Set: {exc}") from exc


def _public(key: Any) -> dict[str, Any]:
    """The public half of one JWK; symmetric keys are refused (a resource server holding one could mint tokens)."""
    if not isinstance(key, dict):
        raise ValueError("a key of the set is not an object")
    if key.get("kty") == "oct":
        raise ValueError("symmetric (oct) keys are not accepted: a resource server holding one could mint tokens")
    return {k: v for k, v in key.items() if k not in ("d", "p", "q", "dp", "dq", "qi", "oth")}


class Authenticator:
    """Turns an ``Authorization`` header and an endpoint's agent into a :class:`Principal` or a refusal."""

    def __init__(
        self,
        tenants: Mapping[str, Tenant],
        oauth: OAuthResourceServer | None = None,
        key_set: KeySet | None = None,
        *,
        now: Callable[[], float] = time.time,
    ) -> None:
        if oauth is not None and key_set is None:
            raise ValueError("oauth needs the issuer's key set")
        self._tenants = dict(tenants)
        self._by_hash = {digest: name for name, tenant in tenants.items() for digest in tenant.tokens}
        self._oauth = oauth
        self._keys = key_set
        #: the RFC 7638 thumbprints of the key set's keys, sorted: what a reload compares to say the keys changed
        self.key_thumbprints: tuple[str, ...] = tuple(sorted(k.thumbprint() for k in key_set.keys)) if key_set else ()
        self._now = now
        #: token hashes a reload withdrew -> their tenant (:meth:`carry_retired`), and tenants a reload removed
        self._retired: dict[str, str] = {}
        self._gone: frozenset[str] = frozenset()

    def carry_retired(self, before: Authenticator) -> None:
        """Remember what ``before`` (the authenticator this one replaces at a reload) accepted and this one does
        not: its tokens no longer listed and its tenants no longer named, so that their refusals say why (the
        most recent :data:`MAX_RETIRED` tokens)."""
        retired = {**before._retired, **before._by_hash}
        kept = [(h, t) for h, t in retired.items() if h not in self._by_hash]
        self._retired = dict(kept[-MAX_RETIRED:])
        self._gone = frozenset((before._gone | set(before._tenants)) - set(self._tenants))

    def _withdrawn(self, token: str) -> AuthRefusal | None:
        tenant = self._retired.get(hash_token(token))
        if tenant is None:
            return None
        if tenant not in self._tenants:
            return AuthRefusal(401, "invalid_token", _gone(tenant))
        return AuthRefusal(
            401,
            "invalid_token",
            f"this token of tenant {tenant!r} was withdrawn by a policy reload; use the tenant's current token",
        )

    def authenticate(
        self, authorization: str | None, *, agent: str, resources: tuple[str, ...]
    ) -> Principal | AuthRefusal:
        """Check the credentials of one request for ``agent``'s endpoint.

        ``resources`` are the identifiers a token's audience may name (the endpoint's URL, the server's URL).
        """
        if not authorization:
            return AuthRefusal(401, None, "this server needs a bearer token (Authorization: Bearer ...)")
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return AuthRefusal(401, "invalid_request", "the Authorization header must be 'Bearer <token>'")
        if len(token) > MAX_TOKEN_CHARS:
            return AuthRefusal(401, "invalid_request", f"the token is longer than {MAX_TOKEN_CHARS} characters")
        principal = self._static(token)
        if principal is None and (withdrawn := self._withdrawn(token)) is not None:
            return withdrawn
        if principal is None and self._oauth is not None and token.count(".") == 2:
            checked = self._jwt(token, resources)
            if isinstance(checked, AuthRefusal):
                return checked
            principal = checked
        if principal is None:
            return AuthRefusal(401, "invalid_token", "the token is not known to this server")
        if agent not in self._tenants[principal.tenant].agents:
            return AuthRefusal(403, "insufficient_scope", f"tenant {principal.tenant!r} may not use agent {agent!r}")
        return principal

    def _static(self, token: str) -> Principal | None:
        tenant = self._by_hash.get(hash_token(token))
        return None if tenant is None else Principal(tenant, "token")

    def _jwt(self, token: str, resources: tuple[str, ...]) -> Principal | AuthRefusal:
        oauth, keys = self._oauth, self._keys
        if oauth is None or keys is None:
            raise RuntimeError("_jwt called without oauth settings")
        try:
            decoded = jwt.decode(token, keys, algorithms=oauth.algorithms)
        except (JoseError, ValueError) as exc:
            return AuthRefusal(401, "invalid_token", f"the access token's signature does not verify ({exc})")
        claims = decoded.claims
        registry = jwt.JWTClaimsRegistry(
            now=lambda: int(self._now()),
            leeway=oauth.leeway_s,
            iss={"essential": True, "value": oauth.issuer},
            exp={"essential": True},
        )
        try:
            registry.validate(claims)
        except JoseError as exc:
            return AuthRefusal(401, "invalid_token", _claim_problem(exc))
        audiences = claims.get("aud")
        audiences = [audiences] if isinstance(audiences, str) else audiences
        if not isinstance(audiences, list) or not set(resources) & {a for a in audiences if isinstance(a, str)}:
            return AuthRefusal(
                401, "invalid_token", f"the access token is for another audience; it must name {resources[0]}"
            )
        if oauth.required_scopes:
            held = set(str(claims.get("scope", "")).split())
            missing = [s for s in oauth.required_scopes if s not in held]
            if missing:
                return AuthRefusal(403, "insufficient_scope", f"the access token lacks scope {' '.join(missing)}")
        tenant = claims.get(oauth.tenant_claim)
        if isinstance(tenant, str) and tenant in self._gone:
            return AuthRefusal(403, "insufficient_scope", _gone(tenant))
        if not isinstance(tenant, str) or tenant not in self._tenants:
            return AuthRefusal(
                403,
                "insufficient_scope",
                f"the access token's {oauth.tenant_claim!r} claim names no tenant of this server",
            )
        subject = claims.get("sub")
        return Principal(tenant, "oauth", subject if isinstance(subject, str) else None)


def _gone(tenant: str) -> str:
    return f"tenant {tenant!r} is no longer configured on this server (a policy reload removed it)"


def _claim_problem(exc: JoseError) -> str:
    claim, error = getattr(exc, "claim", None), getattr(exc, "error", "")
    if error == "expired_token":
        return "the access token has expired"
    if claim == "nbf":
        return "the access token is not valid yet (nbf)"
    if claim == "iss":
        return "the access token was issued by another issuer"
    if error == "missing_claim":
        return f"the access token has no {claim} claim"
    return f"the access token's claims are not acceptable ({exc})"


async def http_frontend_from_policy(policy: Policy, listen: str | None = None) -> tuple[HttpFrontend, Authenticator]:
    """The HTTP settings (``listen`` overriding the policy's) and the authenticator the policy describes.

    Raises:
        PolicyRefused: no tenant is named (an HTTP service would serve nobody, or everybody), or the OAuth key set
            cannot be read or fetched.
    """
    settings = policy.frontends.http or HttpFrontend()
    if listen is not None:
        try:
            parse_listen(listen)
        except ValueError as exc:
            raise PolicyRefused(f"--http {listen}: {exc}") from None
        settings = settings.model_copy(update={"listen": listen})
    if not policy.tenants:
        raise PolicyRefused(
            "serving MCP over HTTP needs at least one tenant in the policy (tenants: NAME: {tokens: "
            "[sha256:...], agents: [...]}); every request is authenticated, none is anonymous"
        )
    key_set = None
    if policy.oauth is not None:
        key_set = load_key_set_from(await _jwks_text(policy.oauth), policy.oauth)
    return settings, Authenticator(policy.tenants, policy.oauth, key_set)


async def _jwks_text(oauth: OAuthResourceServer) -> bytes:
    if oauth.jwks_file is not None:
        try:  # the operator's file, named by the policy; read at start and at each reload
            return (await trio.Path(oauth.jwks_file).read_bytes())[: 1 << 20]
        except OSError as exc:
            raise PolicyRefused(f"oauth.jwks_file {oauth.jwks_file}: {exc.strerror or exc}") from None
    import httpx

    try:
        async with httpx.AsyncClient(timeout=10, follow_redirects=False) as client:
            response = await client.get(str(oauth.jwks_url))
            response.raise_for_status()
            return response.content[: 1 << 20]
    except httpx.HTTPError as exc:
        raise PolicyRefused(f"oauth.jwks_url {oauth.jwks_url}: could not fetch the key set ({exc})") from None


def load_key_set_from(data: bytes, oauth: OAuthResourceServer) -> KeySet:
    """The issuer's key set, or a :class:`PolicyRefused` naming where it came from."""
    try:
        return load_key_set(data)
    except ValueError as exc:
        where = oauth.jwks_file or oauth.jwks_url
        raise PolicyRefused(f"oauth key set {where}: {exc}") from None
