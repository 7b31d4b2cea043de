"""The policy is the ceiling of everything an agent file grants: what the policy caps for each agent, and the
refusals of what an agent file asks past it (pure: no file, no socket).

- **Address classes.** An ``AllowedHosts`` entry opens a host, never an address class: the entries ``localhost``,
  ``127.0.0.1`` and ``::1`` reach the host's loopback only where the policy opens it to that toolbox
  (``toolboxes.<agent>/<name>.allow_loopback`` or ``network.allow_loopback``), an IP literal in a private range
  only where the policy opens that range (``toolboxes.<agent>/<name>.allow_private_ranges`` or
  ``network.allow_private_ranges``). The egress proxy enforces it (``sandbox._addresses``); here an entry that would
  reach nothing is found at load: under a strict policy the toolbox's load error, else a warning, each naming the
  key that opens it. The supervisor's own listening sockets stay closed whatever is opened (the proxy refuses them).
- **Ceilings** (``ceilings.<slug>``, ``ceilings."*"``, ``tenants.<name>.ceiling``, ``config/_ceilings.py``):
  every host an agent file grants a toolbox must fall within each ceiling's ``allowed_hosts``, and no capability it
  enables may be in a ``forbidden_capabilities`` (nor a method its PostgREST ``AllowedMethods`` names outside an
  ``http_methods``; OpenAPI and PostgREST tools of other methods are not offered: :func:`method_cap`, applied in
  the worker; nor a path it names outside a ``paths``: :func:`path_refusals`); otherwise the toolbox does not
  load (whatever ``strict`` says: the operator wrote the ceiling), and the load error names the key. The agent
  file's ``modelUrl`` must fall within each ``model_hosts`` (:func:`model_host_refusals`, checked by the agent
  loop before its first model request). A tenant's ceiling bounds the agents it may use and every sub-agent they
  reach (a sub-agent's tools are the tenant's reach too).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sandbox import HostError, HostRule, address_class, embedded_ipv4, is_loopback_entry
from supervisor._errors import PolicyRefused
from supervisor.config import ANY_HOST, HTTP_METHODS, path_within

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from supervisor.config import Ceiling, LoadedConfig, Policy

__all__ = [
    "Bound",
    "ToolboxRefused",
    "agent_bounds",
    "caps_report",
    "ceiling_refusals",
    "class_refusals",
    "method_cap",
    "method_refusals",
    "model_host_refusals",
    "path_refusals",
    "subagent_slugs",
    "tenant_reach",
]


class ToolboxRefused(PolicyRefused):
    """The policy refuses one toolbox: what its agent file asks is past the policy's ceiling, or reaches an address
    class the policy does not open to it under a strict policy. Unlike its parent, it stops only that toolbox: the
    compile makes it that toolbox's load error (the message names the key that would open it), the others start."""


@dataclass(frozen=True)
class Bound:
    """One ceiling that applies to an agent, with the policy key it comes from (``ceilings.coder``,
    ``ceilings."*"``, ``tenants.acme.ceiling``)."""

    key: str
    ceiling: Ceiling


def subagent_slugs(config: LoadedConfig) -> dict[str, list[str]]:
    """Per agent of ``config``, the slugs of the sub-agents the policy lets it prompt (as its tree was expanded,
    ``config/_subagent_rules.py``; none when it was not)."""
    return {slug: list(subs) for slug, subs in (config.subagents or {}).items()}


def tenant_reach(policy: Policy, subagents: Mapping[str, Sequence[str]]) -> dict[str, set[str]]:
    """Per tenant, the agent slugs it reaches: those it lists and, transitively, their sub-agents (``subagents``:
    slug -> the slugs it names in ``extraAgents`` and ``toolDirectory``)."""
    reach: dict[str, set[str]] = {}
    for name, tenant in policy.tenants.items():
        seen: set[str] = set()
        queue = list(tenant.agents)
        while queue:
            slug = queue.pop()
            if slug not in seen:
                seen.add(slug)
                queue += subagents.get(slug, ())
        reach[name] = seen
    return reach


def agent_bounds(policy: Policy, slug: str, reach: Mapping[str, set[str]]) -> list[Bound]:
    """Every ceiling that bounds the agent ``slug``: ``ceilings."*"``, ``ceilings.<slug>`` and the ceiling of each
    tenant that reaches it (:func:`tenant_reach`)."""
    keys = [k for k in dict.fromkeys(("*", slug)) if k in policy.ceilings]
    bounds = [Bound('ceilings."*"' if k == "*" else f"ceilings.{k}", policy.ceilings[k]) for k in keys]
    for name, tenant in policy.tenants.items():
        if tenant.ceiling is not None and slug in reach.get(name, ()):
            bounds.append(Bound(f"tenants.{name}.ceiling", tenant.ceiling))
    return bounds


def _rule(entry: str) -> HostRule | None:
    try:
        return HostRule.parse(entry)
    except HostError:
        return None  # a malformed entry is refused by the caller's own parse, with its JSON path


def _private(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The private addresses ``ip`` is or carries (IPv4-mapped, NAT64, ...)."""
    judged = [ip, *(v4 for _, v4 in embedded_ipv4(ip))]
    return [a for a in judged if address_class(a) == "private"]


def class_refusals(
    entries: Iterable[str], *, loopback: bool, private_ranges: Sequence[str], policy_key: str
) -> list[str]:
    """Why each of ``entries`` (a toolbox's hosts, the agent file's and the policy's) would reach nothing: a
    loopback entry where the policy does not open the loopback, an IP literal in a private range it does not open.
    Each names the key that opens it (``policy_key``: ``toolboxes.<agent>/<name>``)."""
    nets = [ipaddress.ip_network(n, strict=False) for n in private_ranges]
    out: list[str] = []
    for entry in entries:
        rule = _rule(entry)
        if rule is None:
            continue
        if is_loopback_entry(rule) and not loopback:
            out.append(
                f"AllowedHosts entry {entry!r} is the host's loopback, which this policy does not open to the toolbox "
                f"(an agent file cannot open it); the operator's key that opens it: {policy_key}.allow_loopback: "
                "true (or network.allow_loopback: true for every toolbox; the supervisor's own ports stay closed)"
            )
        elif rule.kind == "ip" and not isinstance(rule.value, str):
            closed = [a for a in _private(rule.value) if not any(a in n for n in nets if n.version == a.version)]
            if closed:
                out.append(
                    f"AllowedHosts entry {entry!r} is in a private range ({closed[0]}), which this policy does not "
                    f"open to the toolbox (naming the address does not open it); the operator's key that opens it: "
                    f"{policy_key}.allow_private_ranges: [{ipaddress.ip_network(closed[0])}] (or "
                    "network.allow_private_ranges)"
                )
    return out


def _within(rule: HostRule, patterns: Sequence[str]) -> bool:
    return any(p == ANY_HOST or ((cap := _rule(p)) is not None and cap.covers(rule)) for p in patterns)


def ceiling_refusals(entries: Iterable[str], capabilities: Iterable[str], bounds: Sequence[Bound]) -> list[str]:
    """Why the agent file's ``entries`` (hosts it grants the toolbox) and ``capabilities`` (System/Developer) are past
    ``bounds``: each names the entry or capability and the key that would open it."""
    out: list[str] = []
    for entry in entries:
        rule = _rule(entry)
        if rule is None:
            continue
        for bound in bounds:
            allowed = bound.ceiling.allowed_hosts
            if allowed is not None and not _within(rule, allowed):
                out.append(
                    f"the agent file grants the host {entry!r}, past the policy's ceiling {bound.key}.allowed_hosts "
                    f"({', '.join(allowed) or 'none: no network'}); the key that would open it: add a pattern covering "
                    f"it to {bound.key}.allowed_hosts"
                )
    for capability in capabilities:
        for bound in bounds:
            if capability in bound.ceiling.forbidden_capabilities:
                out.append(
                    f"the agent file enables the capability {capability!r}, which the policy forbids "
                    f"({bound.key}.forbidden_capabilities); remove it from the agent file's Capabilities, or from "
                    "that list"
                )
    return out


def method_cap(bounds: Sequence[Bound]) -> list[str] | None:
    """The HTTP methods every ceiling of ``bounds`` lets the agent's OpenAPI and PostgREST tools have (in
    :data:`HTTP_METHODS` order); ``None`` when none bounds them."""
    caps = [set(b.ceiling.http_methods) for b in bounds if b.ceiling.http_methods is not None]
    if not caps:
        return None
    return [m for m in HTTP_METHODS if all(m in cap for cap in caps)]


def method_refusals(asked: Iterable[str], bounds: Sequence[Bound]) -> list[str]:
    """Why the methods the agent file asks for (a PostgREST ``AllowedMethods``) are past ``bounds``: each names the
    method and the key that would open it."""
    out: list[str] = []
    for method in dict.fromkeys(str(m).upper() for m in asked):
        for bound in bounds:
            allowed = bound.ceiling.http_methods
            if allowed is not None and method not in allowed:
                out.append(
                    f"the agent file allows the HTTP method {method} (AllowedMethods), past the policy's ceiling "
                    f"{bound.key}.http_methods ({', '.join(allowed) or 'none'}); remove it from AllowedMethods, or add "
                    f"it to {bound.key}.http_methods"
                )
    return out


def path_refusals(named: Iterable[tuple[str, str]], bounds: Sequence[Bound], granted: Sequence[str] = ()) -> list[str]:
    """Why the paths the agent file names (``(canonical path, what names it)``) are past the ``paths`` of
    ``bounds``: each names the path and the key that would open it. A path within ``granted`` (what the policy
    gives the worker anyway: its system paths, its ``read_paths``) grants nothing new and is never past."""
    out: list[str] = []
    for path, what in dict.fromkeys(named):
        if any(path_within(path, top) for top in granted):
            continue
        for bound in bounds:
            trees = bound.ceiling.paths
            if trees is not None and not any(path_within(path, top) for top in trees):
                out.append(
                    f"the agent file names the path {path} ({what}), past the policy's ceiling {bound.key}.paths "
                    f"({', '.join(trees) or 'none'}); the key that would open it: add a folder holding it to "
                    f"{bound.key}.paths"
                )
    return out


def model_host_refusals(endpoint: str, bounds: Sequence[Bound]) -> list[str]:
    """Why the model endpoint ``endpoint`` (``host:port`` of an agent file's ``modelUrl``, IPv6 in brackets) is past
    the ``model_hosts`` of ``bounds``: each names the key that would open it. Empty when every bound covers it."""
    bounding = [b for b in bounds if b.ceiling.model_hosts is not None]
    if not bounding:
        return []
    try:
        rule = HostRule.parse(endpoint)
    except HostError as exc:
        return [f"its modelUrl names the model endpoint {endpoint}, which no ceiling can cover: {exc}"]
    out: list[str] = []
    for bound in bounding:
        allowed = bound.ceiling.model_hosts or []
        if not _within(rule, allowed):
            out.append(
                f"its modelUrl names the model endpoint {endpoint}, past the policy's ceiling {bound.key}.model_hosts "
                f"({', '.join(allowed) or 'none: no model'}); the key that would open it: add a pattern covering it "
                f"to {bound.key}.model_hosts"
            )
    return out


def caps_report(
    bounds: Sequence[Bound], *, loopback: bool, private_ranges: Sequence[str], policy_key: str
) -> dict[str, Any]:
    """What the policy caps for one toolbox, as ``check`` shows it (``--json``: the ``caps`` of each toolbox)."""
    hosts = [{"key": f"{b.key}.allowed_hosts", "patterns": b.ceiling.allowed_hosts} for b in bounds]
    return {
        "hosts": [h for h in hosts if h["patterns"] is not None],
        "forbidden_capabilities": [
            {"key": f"{b.key}.forbidden_capabilities", "capabilities": b.ceiling.forbidden_capabilities}
            for b in bounds
            if b.ceiling.forbidden_capabilities
        ],
        "paths": [{"key": f"{b.key}.paths", "trees": b.ceiling.paths} for b in bounds if b.ceiling.paths is not None],
        "http_methods": [
            {"key": f"{b.key}.http_methods", "methods": b.ceiling.http_methods}
            for b in bounds
            if b.ceiling.http_methods is not None
        ],
        "loopback": loopback,
        "private_ranges": list(private_ranges),
        "opened_by": policy_key,
    }
