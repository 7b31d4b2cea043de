"""Credentials the egress proxy adds to a worker's requests: where each may go and how it is sent (pure).

A :class:`Credential` is a secret the supervisor holds (its value never enters a worker) with the places it may be
sent (:class:`CredentialBinding`: hosts, ports, schemes, optional path prefixes) and how: a header built from a
template (``Authorization: Bearer {value}``), a query parameter, or neither. Either way, the credential's
placeholder (:func:`placeholder`, ``AGENTS_SUPERVISE_CREDENTIAL_<name>``) in a header value or in the request
target is swapped for the value, and only on a request the binding matches: a worker may hold the placeholder (in
its config, in an environment variable a tool insists on), never the value.

Matching is exact: a host entry is a name (that name only: ``api.example.test`` never matches
``api.example.test.evil.test``), ``*.suffix`` (strict subdomains) or an IP literal; the port must be listed (by
default the scheme's own, 443 or 80); the scheme must be listed (``https`` by default: a secret is not sent in
clear text unless the policy says ``http``); a path prefix matches at a segment boundary (``/v1`` matches ``/v1``
and ``/v1/x``, never ``/v1x``), and a path with dot segments or encoded slashes matches no prefix (a server
would resolve ``/v1/../admin`` elsewhere).

:func:`apply_credentials` is what the proxy calls for each request it forwards in the clear (absolute form, or
inside a terminated TLS tunnel). It never sees a CONNECT tunnel's bytes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote

from sandbox._hosts import Host, HostError, normalize_host

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = [
    "PLACEHOLDER_PREFIX",
    "Credential",
    "CredentialBinding",
    "apply_credentials",
    "credential_value_problem",
    "matching_credentials",
    "placeholder",
]

PLACEHOLDER_PREFIX = "AGENTS_SUPERVISE_CREDENTIAL_"
DEFAULT_PORTS = {"https": 443, "http": 80}
NAME_RE = re.compile(r"^[A-Za-z0-9_]{1,64}$")
_CTL = re.compile(r"[\x00-\x1f\x7f]")
MAX_VALUE_BYTES = 8192


def placeholder(name: str) -> str:
    """The text a worker holds in place of credential ``name``'s value."""
    return PLACEHOLDER_PREFIX + name


def credential_value_problem(value: str) -> str | None:
    """Why ``value`` cannot be a credential's value (it would break or split a header), or ``None``.
    The message never quotes the value."""
    if not value:
        return "the value is empty"
    if _CTL.search(value):
        return "the value contains a control character (a line break, a tab, NUL, ...), which a header cannot carry"
    if len(value.encode()) > MAX_VALUE_BYTES:
        return f"the value is longer than {MAX_VALUE_BYTES} bytes"
    if not value.isascii():
        return "the value is not ASCII text"
    return None


def _host_entry(entry: str) -> tuple[bool, Host]:
    text = entry.strip()
    if text.startswith("*."):
        host = normalize_host(text[2:])
        if not isinstance(host, str):
            raise HostError(f"{entry!r}: a wildcard needs a name, not an address")
        return True, host
    return False, normalize_host(text)


@dataclass(frozen=True)
class CredentialBinding:
    """Where a credential may be sent. ``hosts``: names, ``*.suffix`` or IP literals (no port); ``ports``: empty
    means each scheme's default port; ``schemes``: ``https`` and/or ``http``; ``path_prefixes``: empty = any path.

    Raises:
        HostError: a host entry is malformed (raised by the constructor, with the entry named).
        ValueError: an unknown scheme, a port outside 1-65535 or a path prefix not starting with ``/``.
    """

    hosts: tuple[str, ...]
    ports: tuple[int, ...] = ()
    schemes: tuple[str, ...] = ("https",)
    path_prefixes: tuple[str, ...] = ()
    _entries: tuple[tuple[bool, Host], ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.hosts:
            raise ValueError("a binding needs at least one host")
        for scheme in self.schemes:
            if scheme not in DEFAULT_PORTS:
                raise ValueError(f"unknown scheme {scheme!r}: a credential is sent over https or http")
        for port in self.ports:
            if not 1 <= port <= 65535:
                raise ValueError(f"the port {port} is outside 1-65535")
        for prefix in self.path_prefixes:
            if not prefix.startswith("/"):
                raise ValueError(f"the path prefix {prefix!r} does not start with '/'")
        object.__setattr__(self, "_entries", tuple(_host_entry(h) for h in self.hosts))

    def matches(self, scheme: str, host: Host, port: int, path: str) -> bool:
        """Whether a request to ``scheme://host:port`` + ``path`` (origin form, query included) may carry it."""
        if scheme not in self.schemes:
            return False
        if port not in (self.ports or (DEFAULT_PORTS[scheme],)):
            return False
        if not any(_host_matches(entry, host) for entry in self._entries):
            return False
        return not self.path_prefixes or _path_matches(self.path_prefixes, path)


def _host_matches(entry: tuple[bool, Host], host: Host) -> bool:
    wildcard, want = entry
    if not wildcard:
        return host == want
    return isinstance(host, str) and isinstance(want, str) and host.endswith("." + want)


def _path_matches(prefixes: Sequence[str], path: str) -> bool:
    only_path = path.split("?", 1)[0].split("#", 1)[0]
    lowered = only_path.lower()
    if "%2f" in lowered or "%5c" in lowered or "\\" in only_path:
        return False
    if any(seg in (".", "..") for seg in unquote(only_path).split("/")):
        return False
    for prefix in prefixes:
        base = prefix.rstrip("/")
        if only_path == base or only_path.startswith(base + "/") or (not base and only_path.startswith("/")):
            return True
    return False


@dataclass(frozen=True)
class Credential:
    """One secret and where it may go. ``header``: ``(name, template)`` with ``{value}`` in the template, or
    ``None``; ``query``: a query parameter name, or ``None``. The value is never part of ``repr``."""

    name: str
    value: str = field(repr=False)
    bindings: tuple[CredentialBinding, ...]
    header: tuple[str, str] | None = None
    query: str | None = None

    @property
    def placeholder(self) -> str:
        return placeholder(self.name)

    def matches(self, scheme: str, host: Host, port: int, path: str) -> bool:
        return any(b.matches(scheme, host, port, path) for b in self.bindings)

    def describe(self) -> dict[str, object]:
        """What ``check`` and traces show: everything but the value."""
        return {
            "name": self.name,
            "placeholder": self.placeholder,
            "header": self.header[0] if self.header else None,
            "query": self.query,
            "bindings": [
                {
                    "hosts": list(b.hosts),
                    "ports": list(b.ports),
                    "schemes": list(b.schemes),
                    "path_prefixes": list(b.path_prefixes),
                }
                for b in self.bindings
            ],
        }


def matching_credentials(
    credentials: Iterable[Credential], scheme: str, host: Host | str, port: int, path: str
) -> tuple[Credential, ...]:
    """The credentials a request to ``scheme://host:port`` + ``path`` may carry (``host`` already normalised, or a
    text the caller normalises here; one that cannot be normalised matches nothing)."""
    if isinstance(host, str):
        try:
            host = normalize_host(host.strip("[]") if host.startswith("[") else host)
        except HostError:
            return ()
    return tuple(c for c in credentials if c.matches(scheme, host, port, path))


def _swap(text: bytes, creds: Sequence[Credential]) -> bytes:
    for cred in creds:
        text = text.replace(cred.placeholder.encode(), cred.value.encode())
    return text


def _set_query(path: str, name: str, value: str) -> str:
    head, sep, query = path.split("#", 1)[0].partition("?")
    pairs = [p for p in query.split("&") if p and unquote(p.split("=", 1)[0]) != name] if sep else []
    pairs.append(f"{quote(name, safe='')}={quote(value, safe='')}")
    return head + "?" + "&".join(pairs)


def apply_credentials(
    creds: Sequence[Credential], headers: list[tuple[bytes, bytes]], path: str
) -> tuple[list[tuple[bytes, bytes]], str]:
    """The request's headers and origin-form path with ``creds`` (those :func:`matching_credentials` chose for
    it) added: each one's placeholder swapped for its value in every header value and in the path, then its header
    set (replacing any the client sent under that name) and its query parameter set. Pure."""
    if not creds:
        return headers, path
    out = [(n, _swap(v, creds)) for n, v in headers]
    new_path = _swap(path.encode("ascii", "replace"), creds).decode("ascii", "replace")
    for cred in creds:
        if cred.header is not None:
            name, template = cred.header
            out = [(n, v) for n, v in out if n.lower() != name.lower().encode()]
            out.append((name.encode(), template.replace("{value}", cred.value).encode()))
        if cred.query is not None:
            new_path = _set_query(new_path, cred.query, cred.value)
    return out, new_path
