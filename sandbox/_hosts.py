"""Host names, ``AllowedHosts`` rules and address classes: the pure half of egress control.

Everything here is a plain function of its arguments (no sockets, no lookups), so the proxy
(:mod:`sandbox._egress`) and the DNS stub (:mod:`sandbox._dns_stub`) decide with the same code, and the tests
can check every spelling without a network.

* :mod:`sandbox._host_names` makes what a client wrote canonical (:func:`~sandbox._host_names.normalize_host`:
  a lower-case ASCII (IDNA) name, or an :mod:`ipaddress` object; numeric IPv4 spellings are IPs, never names).
* :class:`AllowedHosts` holds a toolbox's entries: exact names, ``*.suffix`` (strict subdomains only), IP
  literals, each with an optional ``:port`` or ``:first-last`` port range (``api.example.com:443``,
  ``*.example.org:443``, ``[2001:db8::1]:443``, ``host:8000-8100``); an entry without a port allows every port.
  An IP is reachable by literal only when that literal is listed. No entries means no network at all. Cloud
  metadata names and addresses (:mod:`sandbox._metadata`) are refused as entries.
* :mod:`sandbox._addresses` judges the resolved addresses (cloud metadata first, then the address classes).

What this module does not do: resolve names, look at interfaces (the caller passes the host's own addresses),
or see inside TLS (a client may send another name in SNI or ``Host`` inside a CONNECT tunnel; the tunnel still
only reaches the checked address).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sandbox._addresses import metadata_refusal
from sandbox._host_names import Host, HostError, IPNetwork, normalize_host, parse_port
from sandbox._metadata import metadata_name

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["AllowedHosts", "HostRule", "parse_cname_targets"]


def _parse_ports(text: str, entry: str) -> tuple[int, int]:
    """``443`` or ``8000-8100`` (inclusive, first <= last) from an ``AllowedHosts`` entry."""
    if not text:
        raise HostError(f"{entry!r}: a port is missing after ':' (write host:443, host:8000-8100, or no ':')")
    first_text, dash, last_text = text.partition("-")
    first = parse_port(first_text, entry)
    last = parse_port(last_text, entry) if dash else first
    if last < first:
        raise HostError(f"{entry!r}: the port range {text} is empty (write the lower port first)")
    return first, last


def _split_entry(body: str, entry: str) -> tuple[str, str | None]:
    """Split an entry (without its ``*.``) into its host and port parts (``None``: no port written)."""
    if body.startswith("["):
        end = body.find("]")
        if end < 0:
            raise HostError(f"{entry!r}: unbalanced brackets")
        rest = body[end + 1 :]
        if rest and not rest.startswith(":"):
            raise HostError(f"{entry!r}: expected ':port' after the bracketed address")
        return body[: end + 1], (rest[1:] if rest else None)
    if body.count(":") > 1:
        return body, None  # a bare IPv6 address; with a port it must be written [address]:port
    if ":" in body:
        host, port = body.split(":", 1)
        return host, port
    return body, None


@dataclass(frozen=True)
class HostRule:
    """One ``AllowedHosts`` entry, normalised.

    Attributes:
        kind: ``"exact"`` (a name), ``"suffix"`` (``*.name``: strict subdomains of ``value``) or ``"ip"``.
        value: the name (for ``exact``/``suffix``) or the address (for ``ip``).
        ports: the allowed ports as an inclusive ``(first, last)`` range, or ``None`` for any port (an entry
            written without a port).
        text: the entry as written, for messages and traces.
    """

    kind: str
    value: Host
    ports: tuple[int, int] | None
    text: str

    @classmethod
    def parse(cls, entry: str) -> HostRule:
        """Parse one entry: ``name``, ``*.suffix``, ``1.2.3.4``, ``[2001:db8::1]`` or bare ``2001:db8::1``, each
        (but the bare IPv6 form) with an optional ``:port`` or ``:first-last`` port range.

        Raises :class:`HostError` on anything else: wildcards other than a leading ``*.``, ``*`` alone, a
        wildcard over an IP, bad ports or ranges, and cloud metadata names and addresses
        (:mod:`sandbox._metadata`), which no entry can open.
        """
        text = entry.strip()
        if not text:
            raise HostError("an AllowedHosts entry is empty")
        if "@" in text or "/" in text:
            raise HostError(f"{entry!r}: an entry is a host with an optional port, without scheme, user or path")
        wildcard = text.startswith("*.")
        body = text[2:] if wildcard else text
        if "*" in body:
            raise HostError(f"{entry!r}: a wildcard is only allowed as a whole first label ('*.example.com')")
        host_part, port_part = _split_entry(body, entry)
        host = normalize_host(host_part)
        ports = _parse_ports(port_part, entry) if port_part is not None else None
        if isinstance(host, str):
            what = metadata_name(host)
            if what is not None:
                raise HostError(f"{entry!r} names a cloud metadata service ({what}); it can never be allowed")
            return cls("suffix" if wildcard else "exact", host, ports, text)
        if wildcard:
            raise HostError(f"{entry!r}: a wildcard cannot stand before an IP address")
        refused = metadata_refusal(host)
        if refused is not None:
            raise HostError(f"{entry!r}: {refused}; it can never be allowed")
        return cls("ip", host, ports, text)

    def allows_port(self, port: int | None) -> bool:
        """Whether ``port`` is in this rule's ports (``None``: any port is asked, which every rule allows)."""
        return port is None or self.ports is None or self.ports[0] <= port <= self.ports[1]

    def covers(self, other: HostRule) -> bool:
        """Whether every host and port ``other`` allows, this rule allows too (a policy's ceiling entry over an
        agent file's entry): the same IP or name, or a name or ``*.``-pattern under this ``*.suffix``; ports within
        this rule's (an entry without ports is covered only by a rule without ports)."""
        if self.ports is not None and (
            other.ports is None or not self.ports[0] <= other.ports[0] <= other.ports[1] <= self.ports[1]
        ):
            return False
        if self.kind != "suffix" or other.kind == "ip":
            return (self.kind, self.value) == (other.kind, other.value)
        name = str(other.value)
        return name.endswith("." + str(self.value)) or (other.kind == "suffix" and name == self.value)

    def matches(self, host: Host, port: int | None) -> bool:
        """Whether ``host`` (normalised) on ``port`` matches this rule; ``port=None`` ignores the rule's
        ports."""
        if not self.allows_port(port):
            return False
        if self.kind == "ip":
            return not isinstance(host, str) and host == self.value
        if not isinstance(host, str):
            return False
        if self.kind == "exact":
            return host == self.value
        return host.endswith("." + str(self.value))


def parse_cname_targets(entries: Iterable[str]) -> tuple[tuple[HostRule, ...], bool]:
    """Parse a policy's ``cname_targets``: host patterns without ports (``cdn.example.net``, ``*.fastly.net``), or
    ``*`` alone for any name. Returns ``(rules, any_name)``; raises :class:`HostError` naming the bad entry."""
    rules: list[HostRule] = []
    any_name = False
    for entry in entries:
        if entry.strip() == "*":
            any_name = True
            continue
        rule = HostRule.parse(entry)
        if rule.kind == "ip":
            raise HostError(f"{entry!r}: a CNAME target is a name, not an IP address")
        if rule.ports is not None:
            raise HostError(f"{entry!r}: a CNAME target has no port (the request's port is the one judged)")
        rules.append(rule)
    return tuple(rules), any_name


@dataclass(frozen=True)
class AllowedHosts:
    """A toolbox's egress policy: its host rules, the address classes and the CNAME targets the policy opens.

    Attributes:
        rules: the parsed entries; empty means no network at all.
        private_networks: private/shared ranges (RFC 1918, CGNAT, ULA...) the policy lets the proxy dial for
            any matching entry. Only private ranges can be opened this way: cloud metadata, link-local, multicast,
            reserved, unspecified and broadcast stay refused whatever the policy says. No entry opens a range by
            itself, not even that very IP literal: an agent file cannot reach past the policy.
        cname_rules: names an allowed name may be an alias (CNAME) of without being allowed themselves.
        cname_any: every CNAME target is accepted (the policy said ``*``); the addresses are still judged.
        loopback: the policy opens the host's loopback to this toolbox: the entries ``localhost``, ``127.0.0.1``
            and ``::1`` reach it (never a name that resolves there). Without it they reach nothing.
        policy_key: where the policy opens this toolbox's address classes (``toolboxes.<agent>/<name>``), for
            the refusals to name.
        subject: what these rules are for, as the refusals name it (``this toolbox``; ``model endpoints`` for the
            agent loops' model requests, ``supervisor/agents/_model_network.py``).
        shared_key: the policy section that opens an address class for every toolbox too (``network``), named
            beside ``policy_key`` in a refusal; empty when there is none.
    """

    rules: tuple[HostRule, ...] = ()
    private_networks: tuple[IPNetwork, ...] = field(default=())
    cname_rules: tuple[HostRule, ...] = ()
    cname_any: bool = False
    loopback: bool = False
    policy_key: str = ""
    subject: str = "this toolbox"
    shared_key: str = "network"

    @classmethod
    def parse(
        cls,
        entries: Iterable[str],
        *,
        private_networks: Iterable[str] = (),
        cname_targets: Iterable[str] = (),
        loopback: bool = False,
        policy_key: str = "",
    ) -> AllowedHosts:
        """Parse ``AllowedHosts`` entries, CIDR strings and CNAME targets (:func:`parse_cname_targets`); raises
        :class:`HostError` naming the bad entry."""
        rules = tuple(HostRule.parse(e) for e in entries)
        nets: list[IPNetwork] = []
        for text in private_networks:
            try:
                nets.append(ipaddress.ip_network(text, strict=False))
            except ValueError:
                raise HostError(f"{text!r} is not a network in CIDR form (like 10.0.0.0/8)") from None
        cname_rules, cname_any = parse_cname_targets(cname_targets)
        return cls(rules, tuple(nets), cname_rules, cname_any, loopback, policy_key)

    def opener(self, key: str) -> str:
        """The policy key ``key`` of this toolbox (``toolboxes.<agent>/<name>.<key>``), for messages."""
        return f"{self.policy_key or 'toolboxes.<agent>/<name>'}.{key}"

    def cname_refusal(self, target: str, port: int | None) -> str:
        """Why an allowed name may not be an alias of ``target`` on ``port``; empty when it may.

        ``target`` may be a CNAME target when it names no metadata service and either an ``AllowedHosts`` rule
        allows it on ``port`` (as if the request had named it) or the policy's CNAME targets cover it (``*``:
        any name). Judging the target does not replace judging the addresses: those are checked as always.
        """
        try:
            host = normalize_host(target)
        except HostError as exc:
            return f"the CNAME target is not a valid host name ({exc})"
        if not isinstance(host, str):
            return "the CNAME target is not a host name"
        what = metadata_name(host)
        if what is not None:
            return f"{host} names a cloud metadata service ({what}) and is never reachable"
        if self.cname_any or self.match(host, port) is not None or any(r.matches(host, None) for r in self.cname_rules):
            return ""
        where = f" on port {port}" if port is not None else ""
        return (
            f"{host} is not allowed{where} by AllowedHosts ({self._listed()}) nor by the policy's cname_targets "
            f"for this toolbox; add it (or a pattern such as '*.{host.split('.', 1)[-1]}') to one of them"
        )

    @property
    def empty(self) -> bool:
        """True when no host at all may be reached."""
        return not self.rules

    def match(self, host: Host, port: int | None) -> HostRule | None:
        """Return the first rule matching ``host`` (normalised) and ``port`` (``None``: any port), or
        ``None``."""
        for rule in self.rules:
            if rule.matches(host, port):
                return rule
        return None

    def refusal(self, host: Host, port: int | None) -> str:
        """Explain, in words an agent can act on, why ``host``:``port`` matched no rule."""
        shown = f"[{host}]" if isinstance(host, ipaddress.IPv6Address) else str(host)
        if self.empty:
            return "this toolbox has no network access (AllowedHosts is empty)"
        if self.match(host, None) is not None and port is not None:
            return (
                f"{shown} is not allowed on port {port}; AllowedHosts lists it only with other ports ({self._listed()})"
            )
        if not isinstance(host, str):
            listed = self._listed()
            return f"the IP address {shown} is not listed in AllowedHosts ({listed}); use a listed host name"
        return f"{shown} is not in AllowedHosts ({self._listed()})"

    def _listed(self) -> str:
        return ", ".join(r.text for r in self.rules)
