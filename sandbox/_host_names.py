"""Host names as clients write them, made canonical (pure): :func:`normalize_host` turns ``EXAMPLE.com.``,
``[::1]``, ``0x7f.1`` or ``bücher.example`` into a lower-case ASCII (IDNA) name or an :mod:`ipaddress` object;
numeric IPv4 spellings that ``inet_aton`` accepts (``2130706433``, ``0x7f.1``, ``017700000001``, ``127.1``) are IPs,
never names (:func:`parse_ipv4_number`), and a name whose last label is numeric but is not a valid IPv4 is refused
(fail closed); ``%`` zone ids are refused. :func:`split_host_port` splits an authority. What a toolbox may reach is
:mod:`sandbox._hosts`.
"""

from __future__ import annotations

import ipaddress
import re

import idna

__all__ = [
    "Host",
    "HostError",
    "IPAddress",
    "IPNetwork",
    "normalize_host",
    "parse_ipv4_number",
    "parse_port",
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
        port = parse_port(port_part, authority)
    return normalize_host(host_part), port


def parse_port(text: str, context: str) -> int:
    """A port, 1-65535, written in decimal; :class:`HostError` naming ``context`` otherwise."""
    if not text.isascii() or not text.isdigit() or len(text) > 5:
        raise HostError(f"{context!r}: the port {text!r} is not a number")
    port = int(text)
    if not 1 <= port <= 65535:
        raise HostError(f"{context!r}: the port {port} is outside 1-65535")
    return port
