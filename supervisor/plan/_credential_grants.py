"""Which credentials a toolbox's egress proxy adds, and the placeholders its worker sees (pure).

A toolbox is granted a credential when its worker config holds the credential's placeholder (its agent file
referenced ``${NAME}`` in ``Token`` or ``Headers``: :func:`supervisor.config._credentials.reference_environ` put the
placeholder there) or when its policy entry names it (``credentials``, ``credential_env``). ``credential_env`` sets
environment variables of the worker to placeholders. A grant to a toolbox without network, or whose AllowedHosts
cannot reach a bound host, is a warning: the credential would never be sent.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sandbox import DEFAULT_PORTS, PLACEHOLDER_PREFIX, AllowedHosts, Credential, HostError, normalize_host
from supervisor._errors import PolicyRefused

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["CredentialGrant", "grant_credentials"]

_PLACEHOLDER_RE = re.compile(re.escape(PLACEHOLDER_PREFIX) + r"([A-Za-z0-9_]{1,64})(?![A-Za-z0-9_])")


@dataclass(frozen=True)
class CredentialGrant:
    """What one toolbox gets: the credentials its proxy adds, the worker's placeholder variables, warnings."""

    credentials: tuple[Credential, ...] = ()
    env: Mapping[str, str] | None = None
    warnings: tuple[str, ...] = ()

    def describe(self) -> list[dict[str, object]]:
        return [c.describe() for c in self.credentials]


def _referenced(cfg: Mapping[str, Any]) -> list[str]:
    text = json.dumps({k: v for k, v in cfg.items() if k != "policy"}, ensure_ascii=False)
    return list(dict.fromkeys(_PLACEHOLDER_RE.findall(text)))


def _unreachable(cred: Credential, rules: AllowedHosts | None) -> list[str]:
    if rules is None:
        return []
    out = []
    for binding in cred.bindings:
        for entry in binding.hosts:
            if entry.startswith("*."):
                continue  # a wildcard binding may well be wider than the hosts allowed
            try:
                host = normalize_host(entry)
            except HostError:
                continue
            ports = binding.ports or tuple(DEFAULT_PORTS[s] for s in binding.schemes)
            if not any(rules.match(host, p) for p in ports):
                out.append(entry)
    return out


def grant_credentials(
    cfg: Mapping[str, Any],
    *,
    granted: list[str],
    credential_env: Mapping[str, str],
    loaded: Mapping[str, Credential],
    hosts: tuple[str, ...],
    toolbox: str,
    agent: str,
) -> CredentialGrant:
    """The credentials of one toolbox from its worker config ``cfg``, the policy's ``granted`` names and
    ``credential_env``, given the ``loaded`` values and the toolbox's AllowedHosts ``hosts``.

    Raises:
        PolicyRefused: a granted name has no loaded value (the caller did not load the policy's credentials).
    """
    wanted = list(dict.fromkeys([*(n for n in _referenced(cfg) if n in loaded), *granted, *credential_env.values()]))
    if not wanted:
        return CredentialGrant()
    missing = [n for n in wanted if n not in loaded]
    if missing:
        raise PolicyRefused(f"toolbox {toolbox} (agent {agent}): the credential {missing[0]} has no value loaded")
    creds = tuple(loaded[n] for n in wanted)
    warnings: list[str] = []
    if not hosts:
        warnings.append(
            f"{toolbox}: it is granted the credentials {', '.join(wanted)} but has no AllowedHosts: they are never sent"
        )
    else:
        try:
            rules: AllowedHosts | None = AllowedHosts.parse(hosts)
        except HostError:
            rules = None
        for cred in creds:
            unreachable = _unreachable(cred, rules)
            if unreachable:
                warnings.append(
                    f"{toolbox}: the credential {cred.name} is bound to {', '.join(unreachable)}, which "
                    "its AllowedHosts do not allow on the bound ports: it is never sent there"
                )
    env = {var: loaded[name].placeholder for var, name in credential_env.items()}
    return CredentialGrant(creds, env, tuple(warnings))
