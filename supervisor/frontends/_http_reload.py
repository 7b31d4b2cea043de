"""The HTTP frontend's part of a policy reload: its tenants and their sessions, its credentials, its settings.

:func:`plan_tenants` (pure) says what a reload does to the tenants and to each live session: a session of a
removed tenant, of an agent no longer served, or of an agent its tenant may no longer use is *closed* (a request
naming it is told why); every other session is untouched (same id, same state, its next call served as before).
A tenant whose tokens changed keeps its sessions: they are the tenant's, not the token's, and a withdrawn token is
refused saying so.

:func:`prepare_http_reload` makes everything the new policy needs before anything changes: the authenticator (the
OAuth key set read or fetched again; keys added or withdrawn are named on the reload's line), the TLS context (the
cert and key files read again, so a renewed certificate is taken at a reload), a listener at a changed ``listen``
address (bound now: when the bind fails the whole reload is refused, saying why, and the old address keeps
serving). Its commit swaps them in: new requests are authenticated by the new tenants and tokens, new connections
get the new limits and TLS files, the old listeners close."""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from supervisor._errors import PolicyRefused
from supervisor._face import PreparedChange, ReloadRefused

from ._http_auth import http_frontend_from_policy
from ._http_server import bind, ssl_context_for, tls_digest

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from supervisor.config import HttpFrontend, LoadedConfig, OAuthResourceServer, Tenant

    from ._http_server import HttpService

__all__ = ["TenantPlan", "plan_tenants", "prepare_http_reload"]


@dataclass(frozen=True)
class TenantPlan:
    """What a reload does to the tenants (names in the new policy's order) and to the live sessions."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    #: tenant -> what of it changed (``tokens``, ``agents``, ``limits``)
    changed: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: session id -> why it is closed
    closing: dict[str, str] = field(default_factory=dict)


def plan_tenants(
    old: Mapping[str, Tenant],
    new: Mapping[str, Tenant],
    sessions: Iterable[tuple[str, str, str]],
    served_agents: set[str],
) -> TenantPlan:
    """Compare the running tenants with the reloaded policy's; ``sessions``: ``(id, tenant, agent)`` of each live
    session, ``served_agents``: the slugs the reloaded policy serves. Pure."""
    changed = {}
    for name, tenant in new.items():
        before = old.get(name)
        if before is not None and before != tenant:
            changed[name] = tuple(
                what for what in ("tokens", "agents", "limits") if getattr(before, what) != getattr(tenant, what)
            )
    closing = {}
    for session_id, owner, agent in sessions:
        if owner not in new:
            closing[session_id] = f"tenant {owner!r} is no longer configured on this server (a policy reload)"
        elif agent not in served_agents:
            closing[session_id] = f"agent {agent!r} is no longer served here (a policy reload)"
        elif agent not in new[owner].agents:
            closing[session_id] = f"tenant {owner!r} may no longer use agent {agent!r} (a policy reload)"
    return TenantPlan(
        added=tuple(n for n in new if n not in old),
        removed=tuple(n for n in old if n not in new),
        changed=changed,
        closing=closing,
    )


def _settings_changed(old: HttpFrontend, new: HttpFrontend) -> list[str]:
    before, after = old.model_dump(), new.model_dump()
    return [name for name in after if before.get(name) != after[name] and name != "listen"]


def _tenant_notes(plan: TenantPlan) -> list[str]:
    parts = []
    if plan.added:
        parts.append("added " + ", ".join(plan.added))
    if plan.removed:
        parts.append("removed " + ", ".join(plan.removed))
    for name, what in plan.changed.items():
        parts.append(f"{name}'s {' and '.join(what)} changed")
    if plan.closing:
        parts.append(f"{len(plan.closing)} session(s) closed")
    return ["tenants: " + ", ".join(parts)] if parts else []


def _key_set_note(oauth: OAuthResourceServer, after: set[str], before: set[str]) -> str:
    """What a reload read from the issuer's key set: how many keys it added and withdrew (keys by thumbprint)."""
    where = oauth.jwks_file or oauth.jwks_url
    added, withdrawn = len(after - before), len(before - after)
    return f"oauth: new key set from {where} ({added} key(s) added, {withdrawn} withdrawn, {len(after)} in all)"


async def prepare_http_reload(service: HttpService, config: LoadedConfig) -> PreparedChange:
    """Prepare ``service`` for the reloaded ``config`` (see the module docstring).

    Raises:
        ReloadRefused: the policy names no tenant, the OAuth key set cannot be read or fetched, the TLS files
            cannot be loaded, or the new ``listen`` address cannot be bound.
    """
    policy = config.policy
    try:
        settings, auth = await http_frontend_from_policy(policy, service.listen_override)
    except PolicyRefused as exc:
        raise ReloadRefused(str(exc)) from None
    try:
        ssl_context = ssl_context_for(settings)
    except (OSError, ssl.SSLError) as exc:
        tls = settings.tls
        where = f"{tls.cert}, {tls.key}" if tls is not None else ""
        raise ReloadRefused(f"frontends.http.tls ({where}): cannot load them ({exc})") from None
    try:
        tls_files = tls_digest(settings)
    except OSError as exc:
        raise ReloadRefused(f"frontends.http.tls: {exc.strerror or exc} ({exc.filename})") from None
    old = service.settings
    listeners = None
    if settings.listen != old.listen:
        try:
            listeners = await bind(settings.listen)
        except OSError as exc:
            raise ReloadRefused(
                f"frontends.http.listen {settings.listen}: cannot listen there ({exc.strerror or exc}); "
                f"still serving at {service.app.base_url}"
            ) from None
    app = service.app

    def commit() -> list[str]:
        sessions = [(s.id, s.principal.tenant, s.agent) for s in app.sessions.by_id.values()]
        plan = plan_tenants(
            {n: t.limits for n, t in app.tenants.items()},
            policy.tenants,
            sessions,
            {a.slug for a in config.agents},
        )
        for session_id, why in plan.closing.items():
            app.sessions.end(app.sessions.by_id[session_id], why, remember=True)
        app.set_tenants(policy.tenants)
        auth.carry_retired(app.auth)
        oauth_changed = app.oauth != policy.oauth
        keys_before, keys_after = set(app.auth.key_thumbprints), set(auth.key_thumbprints)
        app.auth, app.oauth = auth, policy.oauth
        service.settings = app.settings = settings
        app.sessions.max_sessions = settings.max_sessions
        app.load.configure(settings)
        service.gate.configure(settings, policy.tenants)
        service.ssl_context = ssl_context
        tls_renewed = tls_files != service.tls_files and old.tls == settings.tls
        service.tls_files = tls_files
        before = app.base_url
        if listeners is not None:
            service.listen_on(listeners, settings)
        else:
            service.refresh_url(settings)
        notes = _tenant_notes(plan)
        if oauth_changed:
            notes.append("oauth settings changed")
        if keys_after != keys_before and policy.oauth is not None:
            notes.append(_key_set_note(policy.oauth, keys_after, keys_before))
        if changed := _settings_changed(old, settings):
            notes.append("frontends.http: " + ", ".join(changed) + " changed")
        if tls_renewed:
            notes.append("frontends.http: new TLS certificate or key (for new connections)")
        if app.base_url != before:
            notes.append(f"frontends.http: serving at {app.base_url} (was {before})")
        return notes

    def abort() -> None:
        for listener in listeners or ():
            listener.socket.close()

    return PreparedChange(commit, abort)
