"""Address classes: whether the egress proxy may dial one resolved address (the pure half of that decision).

:func:`address_verdict` judges, in this order:

1. **Cloud metadata first** (:mod:`sandbox._metadata`): the address itself, and every IPv4 an IPv6 form carries
   (IPv4-mapped, -compatible, NAT64 ``64:ff9b::/96`` and ``64:ff9b:1::/48``, 6to4, Teredo). Never dialled,
   whatever its class and whatever the policy opens (``private_networks``, an IP-literal entry, ``localhost``).
2. Loopback only when the policy opens it to the toolbox (``AllowedHosts.loopback``) and only for the entries
   ``localhost``/``127.0.0.1``/``::1``; never the host's own non-loopback addresses, link-local, multicast,
   unspecified, broadcast or reserved; private ranges only when the policy opens them (``private_networks``; an
   agent file's IP literal opens nothing). IPv6 forms that carry an IPv4 are judged by every IPv4 they carry as
   well. A refusal names the policy key that would open it.

Documentation ranges (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24, 2001:db8::/32) count as public: they
never route on the internet, and the tests use them as "the internet".

What it does not do: resolve names or read interfaces (the caller passes the host's own addresses).
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING

from sandbox._metadata import metadata_address

if TYPE_CHECKING:
    from sandbox._hosts import AllowedHosts, HostRule

__all__ = ["address_class", "address_verdict", "embedded_ipv4", "is_loopback_entry", "metadata_refusal"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_LOOPBACK_NAMES = frozenset({"localhost"})
_LOOPBACK_IPS = frozenset({ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")})


def is_loopback_entry(rule: HostRule | None) -> bool:
    """Whether ``rule`` is one of the entries that may reach the host's loopback: localhost, 127.0.0.1,
    ::1."""
    if rule is None:
        return False
    if rule.kind == "exact":
        return rule.value in _LOOPBACK_NAMES
    return rule.kind == "ip" and rule.value in _LOOPBACK_IPS


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


def address_class(ip: IPAddress) -> str | None:
    """The class of ``ip`` itself (``loopback``, ``private``, ``link-local``, ...; ``None``: public), not of the
    IPv4 it may carry."""
    classes = _V4_CLASSES if isinstance(ip, ipaddress.IPv4Address) else _V6_CLASSES
    for name, nets in classes:
        if any(ip in net for net in nets):
            return name
    return None


def metadata_refusal(ip: IPAddress) -> str | None:
    """Why ``ip`` is never dialled when it is, or carries, a cloud metadata address; ``None`` otherwise."""
    why = (
        "never dialled, whatever the policy opens: cloud-internal services answer any caller on the host as "
        "the host (instance credentials and secrets)"
    )
    what = metadata_address(ip)
    if what is not None:
        return f"{ip} is a cloud metadata address ({what}); {why}"
    for form, v4 in embedded_ipv4(ip):
        what = metadata_address(v4)
        if what is not None:
            return f"{ip} carries {form} {v4}, a cloud metadata address ({what}); {why}"
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
    A cloud metadata address (or an IPv6 form carrying one) is refused first, whatever the rest says.
    IPv6 forms that carry IPv4 addresses are judged by every IPv4 they carry (all must pass) as well as by
    their own class. Loopback passes only when the policy opens it (``rules.loopback``) and ``entry`` is a
    loopback entry (localhost, 127.0.0.1, ::1); a private address only when it lies in ``rules.private_networks``;
    ``own_addresses`` (the host's non-loopback addresses) never pass. Link-local, multicast, unspecified,
    broadcast and reserved never pass.
    """
    refused = metadata_refusal(ip)
    if refused is not None:
        return False, refused
    carried = embedded_ipv4(ip)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        judged: list[tuple[str, IPAddress]] = [(f"{carried[0][0]} {carried[0][1]}", carried[0][1])]
    else:
        judged = [("", ip)] + [(f"{form} {v4}", v4) for form, v4 in carried]
        if carried and address_class(ip) == "reserved":
            judged = judged[1:]  # 6to4/Teredo/compat live in reserved-looking blocks; their IPv4 decides
    for via, addr in judged:
        ok, reason = _single_verdict(addr, rules, entry, own_addresses)
        if not ok:
            return False, (f"{ip} carries {via}: {reason}" if via else reason)
    return True, ""


def _single_verdict(
    ip: IPAddress, rules: AllowedHosts, entry: HostRule | None, own_addresses: frozenset[IPAddress]
) -> tuple[bool, str]:
    kind = address_class(ip)
    if kind == "loopback":
        if not is_loopback_entry(entry):
            return False, f"{ip} is a loopback address; only the entries localhost, 127.0.0.1 or ::1 reach it"
        if not rules.loopback:
            return False, (
                f"{ip} is the host's loopback, which the policy does not open to {rules.subject} (an agent file "
                f"cannot open it); the operator's key that opens it: {rules.opener('allow_loopback')}: true"
            )
        return True, ""
    if ip in own_addresses:
        return False, (
            f"{ip} is an address of the supervisor's own host; use 'localhost' for local services, which the "
            f"policy opens with {rules.opener('allow_loopback')}: true"
        )
    if kind == "link-local":
        return False, f"{ip} is a link-local address and is never reachable"
    if kind in ("unspecified", "multicast", "broadcast", "reserved"):
        return False, f"{ip} is a {kind} address and is never reachable"
    if kind == "private":
        if any(ip in net for net in rules.private_networks if net.version == ip.version):
            return True, ""
        shared = f" (or {rules.shared_key}.allow_private_ranges)" if rules.shared_key else ""
        return False, (
            f"{ip} is in a private range, which the policy does not open to {rules.subject} (an agent file, even "
            f"naming the address, cannot open it); the operator's key that opens it: "
            f"{rules.opener('allow_private_ranges')}: [{ipaddress.ip_network(ip)}]{shared}"
        )
    return True, ""
