"""The address rules of model requests: what the policy opens to the agent loops' model endpoints (pure, but the
clients' holder).

The supervisor runs as root, outside every sandbox, and an agent file names the URL of its model endpoint
(``modelUrl``). Without rules any agent file could make the supervisor POST to the host's loopback services, the
private network, a cloud metadata service or the supervisor's own HTTP port, and read part of the answer back in
the error text. So the agent loops' HTTP client decides every connection it makes as the egress proxy decides a
worker's (:func:`sandbox._egress_decide.decide`, the dialling in :mod:`supervisor.agents._model_dial`):

- a cloud metadata name or address is never dialled, nor an IPv6 form that carries one;
- a name is resolved once, by the supervisor's resolver as an absolute name, and only the addresses that passed
  are dialled, by number (no second lookup);
- the host's loopback only through the hosts ``localhost``, ``127.0.0.1``, ``::1`` and only where the policy opens
  it (``agent_loop.allow_loopback``), a private range only where the policy opens that range
  (``agent_loop.allow_private_ranges``); the host's own other addresses, link-local, multicast, reserved never;
- a loopback port the supervisor itself listens on (its HTTP frontend) never, whatever the policy opens;
- redirects are never followed (an answer's ``Location`` is an HTTP error of the endpoint).

An agent file opens no address class: :class:`ModelAccess` comes from the policy alone. Which host an agent may
name at all is bounded by the ceilings' ``model_hosts`` (``supervisor/plan/_ceilings.py``), checked by the loop
before its first request. A refusal is :class:`ModelEndpointRefused`; the model client makes it a
non-transient error naming the key.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from sandbox import (
    AllowedHosts,
    HostError,
    HostRule,
    Resolution,
    ResolveError,
    Resolver,
    decide,
    default_resolve,
    normalize_host,
    shown_host,
)
from supervisor.plan import agent_bounds, model_host_refusals, tenant_reach

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from sandbox import Host
    from supervisor.config import AgentLoop, Policy

__all__ = [
    "ModelAccess",
    "ModelEndpointRefused",
    "ModelHttp",
    "ceiling_refusal",
    "literal_refusal",
    "model_endpoint",
    "model_report",
]

#: The policy section whose keys open address classes to model endpoints (for refusals to name).
POLICY_KEY = "agent_loop"


class ModelEndpointRefused(Exception):
    """The address rules refuse a model endpoint's connection; the message says why and names the key that opens
    it, if any. Raised while a connection is made, it passes through httpcore and httpx as it is."""


def model_endpoint(url: str) -> str:
    """``host:port`` of a model endpoint's URL (an IPv6 host in brackets, the scheme's port when none is written),
    as the ceilings' ``model_hosts`` judge it.

    Raises:
        ModelEndpointRefused: the URL is not ``http://`` or ``https://`` with a host.
    """
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError) as exc:
        raise ModelEndpointRefused(f"its modelUrl {url!r} is not a URL ({exc})") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ModelEndpointRefused(f"its modelUrl {url!r} is not an http:// or https:// URL with a host")
    try:
        host = normalize_host(parsed.host)
    except HostError as exc:
        raise ModelEndpointRefused(f"its modelUrl {url!r} has no valid host ({exc})") from None
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    return f"{shown_host(host)}:{port}"


@dataclass(frozen=True)
class ModelAccess:
    """What the policy opens to model endpoints (``agent_loop.allow_loopback``, ``agent_loop.allow_private_ranges``);
    the defaults open nothing: public addresses only."""

    loopback: bool = False
    private_ranges: tuple[str, ...] = ()

    @classmethod
    def from_policy(cls, loop: AgentLoop) -> ModelAccess:
        """The access the policy's ``agent_loop`` section opens."""
        return cls(loop.allow_loopback, tuple(loop.allow_private_ranges))

    def rules(self, host: Host) -> AllowedHosts:
        """The egress rules that decide a connection to ``host`` (normalised): the host itself on any port (the
        agent's own endpoint), any CNAME target (the addresses are judged as always), and the address classes this
        access opens; refusals name the ``agent_loop`` keys and say "model endpoints"."""
        rule = HostRule("exact" if isinstance(host, str) else "ip", host, None, shown_host(host))
        nets = tuple(ipaddress.ip_network(n, strict=False) for n in self.private_ranges)
        return AllowedHosts(
            (rule,),
            nets,
            cname_any=True,
            loopback=self.loopback,
            policy_key=POLICY_KEY,
            subject="model endpoints",
            shared_key="",
        )


def ceiling_refusal(policy: Policy, subagents: Mapping[str, Sequence[str]], slug: str, url: str) -> str:
    """Why agent ``slug`` may not send model requests to ``url`` at all: not an http(s) URL with a host, or past a
    ceiling's ``model_hosts`` (``ceilings.<slug>``, ``ceilings."*"``, the ceiling of each tenant that reaches it,
    ``subagents``: slug -> the slugs it names); empty when it may (the address rules then decide each
    connection)."""
    try:
        endpoint = model_endpoint(url)
    except ModelEndpointRefused as exc:
        return str(exc)
    bounds = agent_bounds(policy, slug, tenant_reach(policy, subagents))
    return "; ".join(model_host_refusals(endpoint, bounds))


async def literal_refusal(url: str, access: ModelAccess) -> str:
    """Why a model request to ``url`` will be refused whatever a resolver answers, found without any lookup
    (``check`` warns with it): not an http(s) URL, a metadata name, or a literal address (``localhost`` included)
    of a class ``access`` does not open; the words name the key. Empty for a name (judged when its request
    connects) and for what passes. The supervisor's own ports are not known here (the connection refuses them)."""
    try:
        endpoint = model_endpoint(url)
    except ModelEndpointRefused as exc:
        return str(exc)
    shown, port = endpoint.rsplit(":", 1)
    host = normalize_host(shown)
    decision = await decide(shown, int(port), access.rules(host), resolve=_no_lookup)
    return decision.reason if decision.verdict == "refused" else ""


async def model_report(
    policy: Policy, subagents: Mapping[str, Sequence[str]], endpoints: Iterable[tuple[str, str]]
) -> dict[str, Any]:
    """What ``check`` shows of model requests (plain data): the loop's bounds, what ``agent_loop`` opens, and per
    agent (``endpoints``: slug, modelUrl) its endpoint and why it will be refused, if that is known without a lookup
    (:func:`ceiling_refusal`, :func:`literal_refusal`; ``""``: not refused so far)."""
    loop = policy.agent_loop
    access = ModelAccess.from_policy(loop)
    agents = []
    for slug, url in endpoints:
        refused = ceiling_refusal(policy, subagents, slug, url) or await literal_refusal(url, access)
        agents.append({"agent": slug, "model_url": url, "refused": refused})
    return {
        "max_steps": loop.max_steps,
        "request_timeout_s": loop.request_timeout_s,
        "retries": loop.retries,
        "allow_loopback": loop.allow_loopback,
        "allow_private_ranges": list(loop.allow_private_ranges),
        "agents": agents,
    }


async def _no_lookup(host: str) -> Resolution:
    raise ResolveError(f"{host} is looked up when its request connects, not before")


class ModelHttp:
    """The agent loops' HTTP clients: one per :class:`ModelAccess`, each made at the first model request under it
    (its TLS context, the CA bundle parsed, and httpcore's imports are 100-200 ms of CPU, which a supervisor whose
    loops never run need not pay at start), all closed with the supervisor.

    A reload that changes what the policy opens gives the loops that start after it a new client, so no connection
    made under the old rules is reused by them; loops already running keep theirs (a reload applies to root calls
    that start after it). ``own_ports``: the ports the supervisor listens on, asked at every connection;
    ``resolve``: the resolver of endpoint names (the system's, absolute names; its answers are judged as always).
    """

    def __init__(self, own_ports: Callable[[], frozenset[int]], resolve: Resolver = default_resolve) -> None:
        self._own_ports = own_ports
        self._resolve = resolve
        self._current: tuple[ModelAccess, httpx.AsyncClient] | None = None
        self._clients: list[httpx.AsyncClient] = []

    def client(self, access: ModelAccess) -> httpx.AsyncClient:
        """The client whose every connection is decided under ``access``."""
        if self._current is None or self._current[0] != access:
            from ._model_dial import checked_client

            client = checked_client(access, own_ports=self._own_ports, resolve=self._resolve)
            self._clients.append(client)
            self._current = (access, client)
        return self._current[1]

    async def aclose(self) -> None:
        """Close every client made."""
        for client in self._clients:
            await client.aclose()
        self._clients.clear()
        self._current = None
