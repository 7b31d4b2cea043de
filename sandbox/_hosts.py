"""Host names, ``AllowedHosts`` rules and address classes: the pure half of egress control.

Everything here is a plain function of its arguments (no sockets, no lookups), so the proxy
(:mod:`sandbox._egress`) and the DNS stub (:mod:`sandbox._dns_stub`) decide with the same code, and the tests
can check every spelling without a network.

* :func:`normalize_host` turns what a client wrote (``EXAMPLE.com.``, ``[::1]``, ``0x7f.1``,
  ``bücher.example``) into one canonical form: a lower-case ASCII (IDNA) name, or an :mod:`ipaddress` object.
  Numeric IPv4 spellings that ``inet_aton`` accepts (``2130706433``, ``0x7f.1``, ``017700000001``, ``127.1``)
  are IPs, never names; a name whose last label is numeric but is not a valid IPv4 is refused (fail closed).
  ``%`` zone ids are refused.
* :class:`AllowedHosts` holds a toolbox's entries: exact names, ``*.suffix`` (strict subdomains only), IP
  literals, each with an optional ``:port``. An IP is reachable by literal only when that literal is listed.
  No entries means no network at all.
* :func:`address_verdict` says whether the proxy may dial one resolved address. Loopback only for the entries
  ``localhost``/``127.0.0.1``/``::1``; never link-local (cloud metadata 169.254.169.254), multicast,
  unspecified, broadcast, reserved, or the host's own non-loopback addresses; private ranges only when the
  policy opens them (or the entry is that very IP literal). IPv6 forms that carry an IPv4 (mapped, compatible,
  6to4, Teredo, NAT64 ``64:ff9b::/96`` and ``64:ff9b:1::/48``) are judged by the IPv4 they carry.

What this module does not do: resolve names, look at interfaces (the caller passes the host's own addresses),
or see inside TLS (a client may send another name in SNI or ``Host`` inside a CONNECT tunnel; the tunnel still
only reaches the checked address).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import idna

__all__ = [
    "AllowedHosts",
    "HostError",
    "HostRule",
    "IPAddress",
    "address_verdict",
    "embedded_ipv4",
    "is_loopback_entry",
    "normalize_host",
    "parse_ipv4_number",
    "split_host_port",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Host = str | IPAddress


class HostError(ValueError):
    """A host, port or ``AllowedHosts`` entry that cannot be understood; the message says what was expected.

    Raised by the parsing functions of this module only. Callers turn it into a refusal (403/400, REFUSED) or
    a policy load error; it never means the network is broken.
    """


_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")
_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")
_LOOPBACK_NAMES = frozenset({"localhost"})
_LOOPBACK_IPS = frozenset({ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")})


def parse_ipv4_number(text: str) -> ipaddress.IPv4Address | None:
    """Parse the ``inet_aton`` spellings of an IPv4 address; ``None`` when ``text`` is not numeric at all.

    One to four dot-separated parts, each decimal, ``0x`` hex or ``0``-prefixed octal; the last part fills the
    remaining bytes (``127.1`` is 127.0.0.1, ``2130706433`` is 127.0.0.1). Raises :class:`HostError` when the
    text looks numeric (its last label is a number) but is not a valid address, because a resolver or a client
    library might read it as an IP while we would read it as a name.
    """
    parts = text.split(".")
    if not parts or not _NUMERIC_LABEL.match(parts[-1]):
        return None
    if len(parts) > 4:
        raise HostError(f"{text!r} looks like an IPv4 address but has more than four parts")
    values: list[int] = []
    for part in parts:
        if not _NUMERIC_LABEL.match(part):
            raise HostError(f"{text!r} looks like an IPv4 address but {part!r} is not a number")
        try:
            if part.startswith("0x"):
                value = int(part[2:], 16)  # a bare "0x" fails here, as in inet_aton
            elif len(part) > 1 and part.startswith("0"):
                value = int(part, 8)
            else:
                value = int(part, 10)
        except ValueError:
            raise HostError(f"{text!r} looks like an IPv4 address but {part!r} is no valid number") from None
        values.append(value)
    *head, last = values
    if any(v > 255 for v in head) or last >= 256 ** (5 - len(values)):
        raise HostError(f"{text!r} looks like an IPv4 address but a part is out of range")
    number = last
    for i, v in enumerate(head):
        number |= v << (8 * (3 - i))
    return ipaddress.IPv4Address(number)


def _ascii_name(text: str) -> str:
    """Return the IDNA (UTS 46) ASCII form of a name, lower case; raise :class:`HostError` when invalid."""
    if text.isascii():
        name = text.lower()
    else:
        try:
            name = idna.encode(text, uts46=True, transitional=False).decode("ascii")
        except idna.IDNAError as exc:
            raise HostError(f"{text!r} is not a valid internationalised host name: {exc}") from None
    return name


def normalize_host(host: str) -> Host:
    """Return the canonical form of a host: a lower-case ASCII name, or an IPv4/IPv6 address object.

    Accepts names (upper case, one trailing dot, Unicode via IDNA/UTS 46), bracketed or bare IPv6, dotted and
    numeric IPv4 spellings. Raises :class:`HostError` for empty hosts, ``%`` zone ids, empty or over-long
    labels, characters outside letters, digits, ``-`` and ``_``, and numeric-looking names that are no valid
    IPv4.
    """
    text = host.strip()
    if not text:
        raise HostError("the host is empty")
    if "%" in text:
        raise HostError(f"{host!r}: zone ids ('%') are not allowed in hosts")
    if text.startswith("[") or text.endswith("]"):
        if not (text.startswith("[") and text.endswith("]")):
            raise HostError(f"{host!r}: unbalanced brackets")
        try:
            return ipaddress.IPv6Address(text[1:-1])
        except ValueError:
            raise HostError(f"{host!r}: brackets must hold an IPv6 address") from None
    if ":" in text:
        try:
            return ipaddress.IPv6Address(text)
        except ValueError:
            raise HostError(f"{host!r} is neither a host name nor an IPv6 address") from None
    name = _ascii_name(text)
    if name.endswith("."):
        name = name[:-1]
    if not name:
        raise HostError(f"{host!r}: the host is empty")
    ip = parse_ipv4_number(name)
    if ip is not None:
        return ip
    if len(name) > 253:
        raise HostError(f"{host!r}: a host name has at most 253 characters")
    for label in name.split("."):
        if not _LABEL.match(label):
            raise HostError(
                f"{host!r}: the label {label!r} is not valid (1-63 letters, digits, '-' or '_', "
                "not starting or ending with '-')"
            )
    return name


def split_host_port(authority: str, *, default_port: int | None = None) -> tuple[Host, int]:
    """Split ``host:port`` (``[v6]:port`` for IPv6) and normalise the host.

    Raises :class:`HostError` when the port is missing (and there is no ``default_port``), not a decimal
    number,
    or outside 1-65535; ``userinfo@`` is refused rather than silently dropped.
    """
    text = authority.strip()
    if "@" in text:
        raise HostError(f"{authority!r}: credentials ('user@') are not allowed in a host")
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise HostError(f"{authority!r}: unbalanced brackets")
        host_part, rest = text[: end + 1], text[end + 1 :]
        if rest and not rest.startswith(":"):
            raise HostError(f"{authority!r}: expected ':port' after the bracketed address")
        port_part = rest[1:] if rest else None
    elif text.count(":") > 1:
        raise HostError(f"{authority!r}: an IPv6 address with a port must be written [address]:port")
    elif ":" in text:
        host_part, port_part = text.split(":", 1)
    else:
        host_part, port_part = text, None
    if port_part is None or port_part == "":
        if default_port is None:
            raise HostError(f"{authority!r}: a port is required")
        port = default_port
    else:
        port = _parse_port(port_part, authority)
    return normalize_host(host_part), port


def _parse_port(text: str, context: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 5:
        raise HostError(f"{context!r}: the port {text!r} is not a number")
    port = int(text)
    if not 1 <= port <= 65535:
        raise HostError(f"{context!r}: the port {port} is outside 1-65535")
    return port


@dataclass(frozen=True)
class HostRule:
    """One ``AllowedHosts`` entry, normalised.

    Attributes:
        kind: ``"exact"`` (a name), ``"suffix"`` (``*.name``: strict subdomains of ``value``) or ``"ip"``.
        value: the name (for ``exact``/``suffix``) or the address (for ``ip``).
        port: the only port allowed, or ``None`` for any port.
        text: the entry as written, for messages and traces.
    """

    kind: str
    value: Host
    port: int | None
    text: str

    @classmethod
    def parse(cls, entry: str) -> HostRule:
        """Parse one entry (``name``, ``*.suffix``, ``1.2.3.4``, ``[::1]``, ``::1``, each with optional
        ``:port``).

        Raises :class:`HostError` on anything else: wildcards other than a leading ``*.``, ``*`` alone, a
        wildcard over an IP, bad ports.
        """
        text = entry.strip()
        if not text:
            raise HostError("an AllowedHosts entry is empty")
        if text.count(":") > 1 and not text.startswith("["):
            host, port = normalize_host(text), None
        else:
            wildcard = text.startswith("*.")
            body = text[2:] if wildcard else text
            if "*" in body:
                raise HostError(
                    f"{entry!r}: a wildcard is only allowed as a whole first label ('*.example.com')"
                )
            if body.startswith("[") or ":" in body:
                host, port = split_host_port(body)
            else:
                host, port = normalize_host(body), None
            if wildcard:
                if not isinstance(host, str):
                    raise HostError(f"{entry!r}: a wildcard cannot stand before an IP address")
                return cls("suffix", host, port, text)
        if isinstance(host, str):
            return cls("exact", host, port, text)
        return cls("ip", host, port, text)

    def matches(self, host: Host, port: int | None) -> bool:
        """Whether ``host`` (normalised) on ``port`` matches this rule; ``port=None`` ignores the rule's
        port."""
        if port is not None and self.port is not None and port != self.port:
            return False
        if self.kind == "ip":
            return not isinstance(host, str) and host == self.value
        if not isinstance(host, str):
            return False
        if self.kind == "exact":
            return host == self.value
        return host.endswith("." + str(self.value))


def is_loopback_entry(rule: HostRule | None) -> bool:
    """Whether ``rule`` is one of the entries that may reach the host's loopback: localhost, 127.0.0.1,
    ::1."""
    if rule is None:
        return False
    if rule.kind == "exact":
        return rule.value in _LOOPBACK_NAMES
    return rule.kind == "ip" and rule.value in _LOOPBACK_IPS


@dataclass(frozen=True)
class AllowedHosts:
    """A toolbox's egress policy: its host rules and the private networks the policy opens.

    Attributes:
        rules: the parsed entries; empty means no network at all.
        private_networks: private/shared ranges (RFC 1918, CGNAT, ULA...) the policy lets the proxy dial for
            any matching name. Only private ranges can be opened this way: link-local, multicast, reserved,
                unspecified
            and broadcast stay refused whatever the policy says.
    """

    rules: tuple[HostRule, ...] = ()
    private_networks: tuple[IPNetwork, ...] = field(default=())

    @classmethod
    def parse(cls, entries: Iterable[str], *, private_networks: Iterable[str] = ()) -> AllowedHosts:
        """Parse ``AllowedHosts`` entries and CIDR strings; raises :class:`HostError` naming the bad entry."""
        rules = tuple(HostRule.parse(e) for e in entries)
        nets: list[IPNetwork] = []
        for text in private_networks:
            try:
                nets.append(ipaddress.ip_network(text, strict=False))
            except ValueError:
                raise HostError(f"{text!r} is not a network in CIDR form (like 10.0.0.0/8)") from None
        return cls(rules, tuple(nets))

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
            return f"{shown} is allowed only on other ports than {port} (AllowedHosts: {self._listed()})"
        if not isinstance(host, str):
            listed = self._listed()
            return f"the IP address {shown} is not listed in AllowedHosts ({listed}); use a listed host name"
        return f"{shown} is not in AllowedHosts ({self._listed()})"

    def _listed(self) -> str:
        return ", ".join(r.text for r in self.rules)


# Address classes, checked in this order. Documentation ranges (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24,
# 2001:db8::/32) are deliberately absent: they never route on the internet and the tests use them as "the
# internet".
def _nets(*texts: str) -> tuple[IPNetwork, ...]:
    return tuple(ipaddress.ip_network(t) for t in texts)


_V4_CLASSES: tuple[tuple[str, tuple[IPNetwork, ...]], ...] = (
    ("unspecified", _nets("0.0.0.0/8")),
    ("loopback", _nets("127.0.0.0/8")),
    ("link-local", _nets("169.254.0.0/16")),
    ("multicast", _nets("224.0.0.0/4")),
    ("broadcast", _nets("255.255.255.255/32")),
    ("reserved", _nets("240.0.0.0/4", "192.0.0.0/24", "192.88.99.0/24")),
    ("private", _nets("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "198.18.0.0/15")),
)
_V6_CLASSES: tuple[tuple[str, tuple[IPNetwork, ...]], ...] = (
    ("unspecified", _nets("::/128")),
    ("loopback", _nets("::1/128")),
    ("link-local", _nets("fe80::/10")),
    ("multicast", _nets("ff00::/8")),
    ("reserved", _nets("::/8", "100::/64", "2001::/23", "fec0::/10", "5f00::/16", "3fff::/20")),
    ("private", _nets("fc00::/7")),
)
_METADATA = frozenset(ipaddress.ip_address(a) for a in ("169.254.169.254", "169.254.170.2", "fd00:ec2::254"))
_NAT64_WKP = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_V4_COMPAT = ipaddress.ip_network("::/96")
_SIXTOFOUR = ipaddress.ip_network("2002::/16")
_TEREDO = ipaddress.ip_network("2001::/32")


def _rfc6052_extract(ip: ipaddress.IPv6Address, prefix_len: int) -> ipaddress.IPv4Address:
    """The IPv4 embedded in ``ip`` by RFC 6052 for a NAT64 prefix of ``prefix_len`` bits (bits 64-71
    skipped)."""
    raw = ip.packed
    octets = [b for i, b in enumerate(raw) if i != 8]  # the "u" octet never carries address bits
    start = prefix_len // 8 if prefix_len <= 64 else prefix_len // 8 - 1
    return ipaddress.IPv4Address(bytes(octets[start : start + 4]))


def embedded_ipv4(ip: IPAddress) -> list[tuple[str, ipaddress.IPv4Address]]:
    """Return the IPv4 addresses an IPv6 address carries, each with the name of the form that carries it.

    IPv4-mapped (``::ffff:a.b.c.d``), IPv4-compatible (``::a.b.c.d``, not ``::``/``::1``), NAT64 well-known
    prefix (``64:ff9b::/96``), local-use NAT64 (``64:ff9b:1::/48``: every RFC 6052 position a /48 to /96
    prefix could
    use), 6to4 (``2002::/16``) and Teredo (server and de-obfuscated client). Empty for IPv4 and plain IPv6.
    """
    if isinstance(ip, ipaddress.IPv4Address):
        return []
    found: list[tuple[str, ipaddress.IPv4Address]] = []
    if ip.ipv4_mapped is not None:
        found.append(("IPv4-mapped", ip.ipv4_mapped))
    elif ip in _V4_COMPAT and int(ip) > 1:
        found.append(("IPv4-compatible", ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)))
    elif ip in _NAT64_WKP:
        found.append(("NAT64", ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)))
    elif ip in _NAT64_LOCAL:
        candidates = [_rfc6052_extract(ip, length) for length in (96, 64, 56, 48)]
        nonzero = [v4 for v4 in candidates if int(v4)] or candidates[:1]  # a zero position is just padding
        found.extend(("NAT64", v4) for v4 in dict.fromkeys(nonzero))
    elif ip.sixtofour is not None:
        found.append(("6to4", ip.sixtofour))
    elif ip.teredo is not None:
        server, client = ip.teredo
        found.extend([("Teredo", server), ("Teredo", client)])
    return found


def _address_class(ip: IPAddress) -> str | None:
    classes = _V4_CLASSES if isinstance(ip, ipaddress.IPv4Address) else _V6_CLASSES
    for name, nets in classes:
        if any(ip in net for net in nets):
            return name
    return None


def address_verdict(
    ip: IPAddress,
    rules: AllowedHosts,
    *,
    entry: HostRule | None = None,
    own_addresses: frozenset[IPAddress] = frozenset(),
) -> tuple[bool, str]:
    """Decide whether the proxy may dial ``ip``, reached through the rule ``entry``; return ``(ok, reason)``.

    ``reason`` is empty when ``ok``; otherwise it names the address class in words an agent can act on.
    IPv6 forms that carry IPv4 addresses are judged by every IPv4 they carry (all must pass) as well as by
    their own class. Loopback passes only when ``entry`` is a loopback entry (localhost, 127.0.0.1, ::1); a
    private address only when it lies in ``rules.private_networks`` or ``entry`` is that very IP literal;
    ``own_addresses`` (the host's non-loopback addresses) never pass. Link-local (incl. cloud metadata),
    multicast, unspecified, broadcast and reserved never pass.
    """
    carried = embedded_ipv4(ip)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        judged: list[tuple[str, IPAddress]] = [(f"{carried[0][0]} {carried[0][1]}", carried[0][1])]
    else:
        judged = [("", ip)] + [(f"{form} {v4}", v4) for form, v4 in carried]
        if carried and _address_class(ip) == "reserved":
            judged = judged[1:]  # 6to4/Teredo/compat live in reserved-looking blocks; their IPv4 decides
    for via, addr in judged:
        ok, reason = _single_verdict(addr, rules, entry, own_addresses)
        if not ok:
            return False, (f"{ip} carries {via}: {reason}" if via else reason)
    return True, ""


def _single_verdict(
    ip: IPAddress, rules: AllowedHosts, entry: HostRule | None, own_addresses: frozenset[IPAddress]
) -> tuple[bool, str]:
    kind = _address_class(ip)
    if kind == "loopback":
        if is_loopback_entry(entry):
            return True, ""
        return False, f"{ip} is a loopback address; only the entries localhost, 127.0.0.1 or ::1 reach it"
    if ip in own_addresses:
        return False, f"{ip} is an address of the supervisor's own host; use 'localhost' for local services"
    if kind == "link-local":
        if ip in _METADATA:
            return False, f"{ip} is a cloud metadata address and is never reachable"
        return False, f"{ip} is a link-local address and is never reachable"
    if kind in ("unspecified", "multicast", "broadcast", "reserved"):
        return False, f"{ip} is a {kind} address and is never reachable"
    if kind == "private":
        if any(ip in net for net in rules.private_networks if net.version == ip.version):
            return True, ""
        if entry is not None and entry.kind == "ip" and entry.value == ip:
            return True, ""
        return False, (
            f"{ip} is in a private range; the policy must open that range (private_networks) "
            "or list the address itself"
        )
    return True, ""
