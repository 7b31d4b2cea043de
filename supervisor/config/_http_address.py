"""Addresses of the HTTP frontend: the listen address, origins, and the URLs the server is known by. Pure."""

from __future__ import annotations

import ipaddress
import re
import urllib.parse

__all__ = [
    "host_is_served",
    "is_loopback_url",
    "normalise_host_name",
    "normalise_origin",
    "parse_listen",
    "public_url_for",
    "served_host_names",
]

_DEFAULT_PORTS = {"http": 80, "https": 443}


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6) as ``(host, port)``.

    Raises:
        ValueError: no port, a port outside 1-65535, or an IPv6 address without brackets.
    """
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"invalid listen address {value!r}: expected HOST:PORT")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        ipaddress.IPv6Address(host)  # ValueError when it is not one
    elif ":" in host:
        raise ValueError(f"invalid listen address {value!r}: an IPv6 address goes in brackets, [::1]:8765")
    number = int(port)
    if not 0 <= number <= 65535:  # 0: any free port (tests; the address served is printed at start)
        raise ValueError(f"invalid port {number} in {value!r}")
    return host, number


def normalise_origin(value: str) -> str:
    """An origin (RFC 6454) as browsers send it: lower-case scheme and host, no default port, no path.

    Raises:
        ValueError: not http(s), a path, query, user info, or no host.
    """
    parts = urllib.parse.urlsplit(value.strip())
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise ValueError(f"invalid origin {value!r}")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError(f"an origin has no path, query or user info: {value!r}")
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"invalid port in origin {value!r}") from exc
    if port is None or port == _DEFAULT_PORTS[parts.scheme]:
        return f"{parts.scheme}://{host}"
    return f"{parts.scheme}://{host}:{port}"


def is_loopback_url(value: str) -> bool:
    """An ``http://`` URL whose host is a loopback address or ``localhost``."""
    parts = urllib.parse.urlsplit(value)
    if parts.scheme != "http" or not parts.hostname:
        return False
    if parts.hostname == "localhost":
        return True
    try:
        return ipaddress.ip_address(parts.hostname).is_loopback
    except ValueError:
        return False


def public_url_for(listen: str, *, tls: bool, public_url: str | None) -> str:
    """The scheme and authority clients use: ``public_url`` when set, else derived from the listen address."""
    if public_url is not None:
        return public_url.rstrip("/")
    host, port = parse_listen(listen)
    scheme = "https" if tls else "http"
    if ":" in host:
        host = f"[{host}]"
    elif host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    return f"{scheme}://{host}" if port == _DEFAULT_PORTS[scheme] else f"{scheme}://{host}:{port}"


#: what a host name may hold: letters and digits (``str.isalnum``'s, which ``\w`` is, with ``_``), ``-``, ``.``, ``:``
_HOST_CHARS = re.compile(r"[\w.:-]+")


def normalise_host_name(value: str) -> str:
    """A host name as a ``Host`` header is compared: lower case, no trailing dot, no port, no brackets.

    Raises:
        ValueError: empty, or characters no host name has.
    """
    name = value.strip().lower()
    if name.startswith("["):  # [v6] or [v6]:port
        name = name[1 : name.find("]")] if "]" in name else name
    elif name.count(":") == 1:
        name = name.partition(":")[0]
    name = name.rstrip(".")
    if not _HOST_CHARS.fullmatch(name):
        raise ValueError(f"invalid host name {value!r}")
    return name


def served_host_names(listen: str, public_url: str | None, server_names: list[str]) -> frozenset[str]:
    """The names a ``Host`` header may give besides IP addresses: ``localhost``, the listen address's host, the
    public URL's host, and the policy's ``server_names``. Pure."""
    names = {"localhost", parse_listen(listen)[0].lower()}
    if public_url is not None and (host := urllib.parse.urlsplit(public_url).hostname):
        names.add(host.lower().rstrip("."))
    names.update(normalise_host_name(n) for n in server_names)
    return frozenset(names)


def host_is_served(host: str | None, names: frozenset[str]) -> bool:
    """Whether a request's ``Host`` header names this server: absent (HTTP/1.0; a browser always sends one), an IP
    address (a DNS rebinding page always has a name of its own in ``Host``), or one of ``names``. Pure."""
    if host is None:
        return True
    try:
        name = normalise_host_name(host)
    except ValueError:
        return False
    if name in names:
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True
