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
and ``/v1/x``, never ``/v1x``), and an *ambiguous* path (:func:`path_ambiguity`: one a server could read as another
path, such as ``/v1/../admin``, ``/v1/..;/admin``, ``/v1/%252e%252e/admin``, ``/v1/%u002e%u002e/admin``, fullwidth
dots, backslashes) matches no prefix; the proxy refuses such a request outright when a credential is bound to path
prefixes on its host (:func:`path_refusal`), rather than send it without.

On a request that carries a credential, the headers that would tell the server another host, scheme, path or
client than the one the binding judged (``Forwarded``, ``X-Forwarded-*``, ``X-Original-URL``, ``X-Rewrite-URL``,
``X-Real-IP``, ...: :func:`is_forwarding_header`) are dropped: a server behind a reverse proxy trusts them, and a
tool could use them to make the bound host act for another name or path with the secret attached.

:func:`apply_credentials` is what the proxy calls for each request it forwards in the clear (absolute form, or
inside a terminated TLS tunnel). It never sees a CONNECT tunnel's bytes.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote

from sandbox._host_names import Host, HostError, normalize_host

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = [
    "PLACEHOLDER_PREFIX",
    "Credential",
    "CredentialBinding",
    "apply_credentials",
    "credential_value_problem",
    "forwarding_header_names",
    "is_forwarding_header",
    "matching_credentials",
    "path_ambiguity",
    "path_refusal",
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

    def matches(self, scheme: str, host: Host, port: int, path: str, *, any_path: bool = False) -> bool:
        """Whether a request to ``scheme://host:port`` + ``path`` (origin form, query included) may carry it;
        ``any_path``: whether the scheme, host and port do, whatever the path."""
        if scheme not in self.schemes:
            return False
        if port not in (self.ports or (DEFAULT_PORTS[scheme],)):
            return False
        if not any(_host_matches(entry, host) for entry in self._entries):
            return False
        return any_path or not self.path_prefixes or _path_matches(self.path_prefixes, path)


def _host_matches(entry: tuple[bool, Host], host: Host) -> bool:
    wildcard, want = entry
    if not wildcard:
        return host == want
    return isinstance(host, str) and isinstance(want, str) and host.endswith("." + want)


#: Headers that name another host, scheme, port, path or client than the request's own (lower case): a server
#: behind a reverse proxy believes them. Dropped from a request that carries a credential.
FORWARDING_HEADERS = frozenset(
    {
        b"forwarded",
        b"via",
        b"x-host",
        b"x-http-host-override",
        b"x-real-ip",
        b"x-client-ip",
        b"client-ip",
        b"true-client-ip",
        b"x-cluster-client-ip",
        b"x-originating-ip",
        b"x-remote-ip",
        b"x-remote-addr",
        b"x-proxyuser-ip",
        b"x-url-scheme",
        b"x-scheme",
        b"front-end-https",
        b"x-envoy-original-path",
        b"x-envoy-original-host",
    }
)
#: Prefixes of header names of the same kind (``X-Forwarded-Host``, ``X-Original-URL``, ``X-Rewrite-URL``, ...).
_FORWARDING_PREFIXES = (b"x-forwarded-", b"x-original-", b"x-rewrite-")
_HEX = frozenset("0123456789abcdefABCDEF")
#: What a path's characters may not turn into under Unicode compatibility folding (U+FF0E FULLWIDTH FULL STOP -> '.')
_FOLDED_SEPARATORS = frozenset("./\\;%?#")


def is_forwarding_header(name: bytes) -> bool:
    """Whether the header ``name`` (any case) tells a server another host, scheme, path or client."""
    lowered = name.lower()
    return lowered in FORWARDING_HEADERS or lowered.startswith(_FORWARDING_PREFIXES)


def forwarding_header_names(headers: Iterable[tuple[bytes, bytes]]) -> list[str]:
    """The names (as sent) of the forwarding headers among ``headers``, for the trace."""
    return [n.decode("ascii", "replace") for n, _ in headers if is_forwarding_header(n)]


def path_ambiguity(path: str) -> str | None:
    """Why the origin-form ``path`` (its query is not looked at) could be read by some server as another path than
    it says, or ``None`` when it is plain: printable ASCII, each ``%`` a two-digit escape decoding to UTF-8, no
    backslash or ``;`` (raw or encoded), no encoded ``/`` or ``%``, no segment of only dots and spaces, no character
    that folds to a separator. Pure."""
    only_path = path.split("?", 1)[0].split("#", 1)[0]
    for ch in only_path:
        if not "\x21" <= ch <= "\x7e":
            return f"it holds {ch!r}, which is not printable ASCII"
    if "\\" in only_path:
        return "it holds a backslash, which some servers read as '/'"
    if ";" in only_path:
        return "it holds ';' (path parameters: some servers drop what follows it, as in '..;/')"
    i = only_path.find("%")
    while i >= 0:
        if not (i + 2 < len(only_path) and only_path[i + 1] in _HEX and only_path[i + 2] in _HEX):
            return f"it holds {only_path[i : i + 6]!r}, a '%' not followed by two hex digits (such as '%u002e')"
        i = only_path.find("%", i + 3)
    lowered = only_path.lower()
    if "%25" in lowered:
        return "it is percent-encoded twice ('%25'): a server that decodes twice reads another path"
    if "%2f" in lowered or "%5c" in lowered or "%3b" in lowered:
        return "it holds an encoded '/', '\\' or ';'"
    try:
        decoded = unquote(only_path, encoding="utf-8", errors="strict")
    except UnicodeDecodeError:
        return "its escapes decode to bytes that are not UTF-8 (such as the overlong '%c0%ae')"
    for ch in decoded:
        if ord(ch) < 0x20 or ord(ch) == 0x7F:
            return "it holds an encoded control character"
        folded = unicodedata.normalize("NFKC", ch) if ord(ch) > 0x7E else ch
        if folded != ch and _FOLDED_SEPARATORS & set(folded):
            return f"it holds {ch!r}, which some servers read as {folded!r}"
    for segment in decoded.split("/"):
        if segment and not segment.strip(". "):
            return f"it holds the dot segment {segment!r}, which a server resolves to another folder"
    return None


def path_refusal(credentials: Iterable[Credential], scheme: str, host: Host | str, port: int, path: str) -> str | None:
    """Why the proxy refuses a request to ``scheme://host:port`` + ``path``: its path is ambiguous
    (:func:`path_ambiguity`) and a credential is bound to path prefixes on that scheme, host and port. ``None``
    otherwise (an ambiguous path where no prefix is at stake goes out as it is). Pure."""
    problem = path_ambiguity(path)
    if problem is None:
        return None
    if isinstance(host, str):
        try:
            host = normalize_host(host.strip("[]") if host.startswith("[") else host)
        except HostError:
            return None
    for cred in credentials:
        for binding in cred.bindings:
            if binding.path_prefixes and binding.matches(scheme, host, port, "/", any_path=True):
                return (
                    f"the request's path {path.split('?', 1)[0][:200]!r} is ambiguous: {problem}. The credential "
                    f"{cred.name} is bound to path prefixes on this host, so the proxy neither sends it nor sends "
                    "the request without it: write the path plainly (no dot segments, no ';', each '%' escape "
                    "once, ASCII only)"
                )
    return None


def _path_matches(prefixes: Sequence[str], path: str) -> bool:
    if path_ambiguity(path) is not None:
        return False
    only_path = path.split("?", 1)[0]
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
    it) added: the forwarding headers dropped (:func:`is_forwarding_header`), each one's placeholder swapped for its
    value in every other header value and in the path, then its header set (replacing any the client sent under
    that name) and its query parameter set. Pure."""
    if not creds:
        return headers, path
    out = [(n, _swap(v, creds)) for n, v in headers if not is_forwarding_header(n)]
    new_path = _swap(path.encode("ascii", "replace"), creds).decode("ascii", "replace")
    for cred in creds:
        if cred.header is not None:
            name, template = cred.header
            out = [(n, v) for n, v in out if n.lower() != name.lower().encode()]
            out.append((name.encode(), template.replace("{value}", cred.value).encode()))
        if cred.query is not None:
            new_path = _set_query(new_path, cred.query, cred.value)
    return out, new_path
