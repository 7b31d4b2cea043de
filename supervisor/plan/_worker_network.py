"""A worker's network: the hosts it may reach, its egress bridge, its credentials and TLS termination (pure; one
step of ``_worker_plan.plan_worker``).

The hosts are the agent file's AllowedHosts (for kinds whose hosts reach the worker) and the policy's grant to the
toolbox; each must parse, lie within every ceiling that bounds its agent (``_ceilings.py``: past one, the toolbox
does not load; so must a PostgREST toolbox's HTTP methods, and the ceilings' methods bound an OpenAPI or PostgREST
toolbox's tools) and within the address classes the policy opens (loopback, private ranges: a strict policy refuses an
entry that can reach nothing). A worker with hosts gets the bridge to its proxy and DNS stub and the proxy variables;
its credentials are granted by ``_credential_grants.py``; with ``tls_termination`` it trusts the supervisor's CA
alone (``_tls_termination.py``), read from one file the worker is granted. What the proxy enforces at each
connection is ``sandbox/_egress*.py``'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sandbox import READ, AllowedHosts, BridgePorts, FsRule, HostError, worker_network_env
from supervisor._errors import PolicyRefused

from ._ceilings import ToolboxRefused, caps_report, ceiling_refusals, class_refusals, method_cap, method_refusals
from ._credential_grants import CredentialGrant, grant_credentials
from ._tls_termination import ca_file_path, termination_env

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from sandbox import Credential, SupervisorCA
    from supervisor.config import Policy, ToolboxConfig

    from ._ceilings import Bound
    from ._kinds import KindPlan

__all__ = ["WorkerNetwork", "plan_network"]


@dataclass
class WorkerNetwork:
    """What :func:`plan_network` decided for one worker."""

    hosts: tuple[str, ...]
    private_ranges: tuple[str, ...]
    loopback: bool
    #: where the policy opens this toolbox's address classes, for refusals to name
    policy_key: str
    cname_targets: tuple[str, ...]
    ports: BridgePorts
    grant: CredentialGrant
    #: the supervisor's CA when the worker's TLS is terminated by its proxy (``None``: tunnels)
    terminator: SupervisorCA | None
    #: what the worker's environment gains (proxy variables, credential variables, the CA bundle's variables)
    env: dict[str, str] = field(default_factory=dict)
    #: rules the worker gains (the CA's file)
    rules: list[FsRule] = field(default_factory=list)
    #: ``check``'s account of what the policy caps for this toolbox
    caps: dict[str, Any] = field(default_factory=dict)
    #: the HTTP methods the ceilings leave its tools (OpenAPI, PostgREST; ``None``: not bounded): tools of other
    #: methods are not offered
    http_methods: list[str] | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def bridge(self) -> bool:
        """The worker gets a bridge (and so any network beyond its own loopback)."""
        return bool(self.hosts)


def _checked_hosts(
    policy: Policy, tb: ToolboxConfig, kind: KindPlan, cfg: Mapping[str, Any], bounds: Sequence[Bound]
) -> tuple[tuple[str, ...], list[str]]:
    """The worker's hosts and the warnings on them, after every check of the module docstring.

    Raises:
        ToolboxRefused: a host, capability or (PostgREST) HTTP method past a ceiling, or (strict) an entry its
            address class keeps from reaching anything.
        PolicyRefused: a host that does not parse, or (strict) hosts for a kind that has no network.
    """
    overrides = policy.toolbox_policy(tb.name, tb.agent_slug)
    tb_hosts = tb.allowed_hosts if kind.worker_hosts else ()
    hosts = tuple(dict.fromkeys([*tb_hosts, *overrides.allowed_hosts]))
    private = policy.private_ranges_for(tb.name, tb.agent_slug)
    try:
        AllowedHosts.parse(hosts, private_networks=private, cname_targets=tuple(overrides.cname_targets))
    except HostError as exc:
        raise PolicyRefused(f"toolbox {tb.name} (agent {tb.agent_slug}): AllowedHosts: {exc}") from exc
    capabilities = cfg.get("Capabilities") or () if tb.kind in ("system", "developer") else ()
    past = ceiling_refusals(tb.allowed_hosts, capabilities, bounds)
    past += method_refusals(cfg.get("AllowedMethods") or (), bounds) if tb.kind == "postgrest" else []
    if past:
        raise ToolboxRefused("; ".join(past))
    closed = class_refusals(
        dict.fromkeys([*tb.allowed_hosts, *overrides.allowed_hosts]),
        loopback=policy.loopback_for(tb.name, tb.agent_slug),
        private_ranges=private,
        policy_key=f"toolboxes.{tb.agent_slug}/{tb.name}",
    )
    if closed and policy.strict:
        raise ToolboxRefused("; ".join(closed) + ". A strict policy refuses a setting that cannot hold.")
    warnings = [f"{tb.name}: {c}; it reaches nothing" for c in closed]
    if kind.no_network is not None and hosts:
        message = f"toolbox {tb.name} (agent {tb.agent_slug}): AllowedHosts gives {kind.no_network}"
        if policy.strict:
            raise PolicyRefused(message + " A strict policy refuses a setting that cannot hold.")
        warnings.append(message)
    return hosts, warnings


def plan_network(
    policy: Policy,
    tb: ToolboxConfig,
    kind: KindPlan,
    cfg: Mapping[str, Any],
    *,
    state_dir: str,
    credentials: Mapping[str, Credential],
    bounds: Sequence[Bound] = (),
    ca: SupervisorCA | None = None,
) -> WorkerNetwork:
    """The network of ``tb``'s worker (module docstring). ``cfg``: its worker config (after its kind's grants);
    ``credentials``: the policy's, with their values (``_host_facts.HostFacts.credentials``); ``bounds``: the
    ceilings that bound its agent; ``ca``: the supervisor's CA (``HostFacts.ca``; needed when the policy terminates
    this toolbox's TLS).

    Raises:
        ToolboxRefused: what only this toolbox asks past the policy (its load error).
        PolicyRefused: what the policy cannot hold (nothing starts).
    """
    overrides = policy.toolbox_policy(tb.name, tb.agent_slug)
    hosts, warnings = _checked_hosts(policy, tb, kind, cfg, bounds)
    private = policy.private_ranges_for(tb.name, tb.agent_slug)
    loopback = policy.loopback_for(tb.name, tb.agent_slug)
    policy_key = f"toolboxes.{tb.agent_slug}/{tb.name}"
    ports = BridgePorts()
    env = dict(worker_network_env(ports)) if hosts else {}
    grant = grant_credentials(
        dict(cfg),
        granted=overrides.credentials,
        credential_env=overrides.credential_env,
        loaded=credentials,
        hosts=hosts if kind.worker_hosts else tuple(tb.allowed_hosts),  # a skills toolbox's: its git clones
        toolbox=tb.name,
        agent=tb.agent_slug,
    )
    env.update(grant.env or {})
    warnings += grant.warnings
    rules: list[FsRule] = []
    terminator = None
    if overrides.tls_termination and hosts:
        if ca is None:
            raise ValueError(f"toolbox {tb.name}: tls_termination needs the supervisor's CA (HostFacts.ca)")
        terminator = ca
        ca_path = ca_file_path(state_dir, ca)
        env.update(termination_env(ca_path))
        rules.append(FsRule(ca_path, READ))
    elif overrides.tls_termination:
        warnings.append(f"{tb.name}: tls_termination has no effect: the toolbox has no AllowedHosts")
    return WorkerNetwork(
        hosts=hosts,
        private_ranges=private,
        loopback=loopback,
        policy_key=policy_key,
        cname_targets=tuple(overrides.cname_targets),
        ports=ports,
        grant=grant,
        terminator=terminator,
        env=env,
        rules=rules,
        caps=caps_report(bounds, loopback=loopback, private_ranges=private, policy_key=policy_key),
        http_methods=method_cap(bounds) if tb.kind in ("openapi", "postgrest") else None,
        warnings=warnings,
    )
