"""What the egress proxy and the DNS stub decide about a host: normalise, match, resolve, filter (no I/O but lookups).

:func:`decide` is the one decision both use (:mod:`sandbox._egress`, :mod:`sandbox._dns_stub`), so the stub answers
with the very addresses the proxy would dial. Names are resolved by the supervisor as absolute names
(:func:`default_resolve`), only after they matched a rule; IP literals, ``localhost`` and cloud metadata names are
never looked up; every address is judged by :func:`sandbox._addresses.address_verdict`.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psutil
import trio

from sandbox._addresses import address_verdict
from sandbox._host_names import HostError, IPAddress, normalize_host
from sandbox._metadata import metadata_name

if TYPE_CHECKING:
    from sandbox._hosts import AllowedHosts, HostRule

__all__ = [
    "Decision",
    "OwnListeners",
    "Resolution",
    "ResolveError",
    "Resolver",
    "absolute_name",
    "decide",
    "default_resolve",
    "limited_resolver",
    "local_addresses",
    "no_own_ports",
    "own_host_refusal",
    "shown_host",
]

Resolver = Callable[[str], Awaitable["Resolution"]]
_LOCALHOST = (ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1"))


class ResolveError(Exception):
    """The supervisor's resolver could not resolve a name; ``not_found`` when the name does not exist.

    Raised by resolvers (:func:`default_resolve` and test doubles); turned into ``502`` by the proxy and into
    ``NXDOMAIN``/``SERVFAIL`` by the DNS stub. Never a policy refusal: the name was allowed.
    """

    def __init__(self, message: str, *, not_found: bool = False) -> None:
        super().__init__(message)
        self.not_found = not_found


@dataclass(frozen=True)
class Resolution:
    """What a resolver found for a name.

    Attributes:
        addresses: the addresses, in the resolver's order, without duplicates.
        cname_targets: the names the name's CNAME chain leads to, as far as the resolver shows them (the system
            resolver shows only the last one, the canonical name); empty when the name is no alias.
    """

    addresses: tuple[IPAddress, ...]
    cname_targets: tuple[str, ...] = ()


def absolute_name(host: str) -> str:
    """``host`` as an absolute DNS name (one trailing dot): no search list applies, whatever ``ndots`` says."""
    return host if host.endswith(".") else host + "."


async def default_resolve(host: str) -> Resolution:
    """Resolve ``host`` as an absolute name with the supervisor's own resolver (``getaddrinfo`` of ``host.`` on a
    thread, ``AI_CANONNAME``): the ``search`` list and ``ndots`` of its resolv.conf never apply, so
    ``allowed.test`` is never answered by ``allowed.test.<search domain>`` (and no such name is ever sent to the
    resolver). glibc looks absolute names up in DNS only, not in ``/etc/hosts``. The canonical name, when it
    differs from ``host``, is the CNAME target the caller judges.

    Raises:
        ResolveError: the lookup failed (``not_found`` for a name that does not exist or has no address).
    """
    try:
        infos = await trio.socket.getaddrinfo(
            absolute_name(host), None, type=socket.SOCK_STREAM, flags=socket.AI_CANONNAME
        )
    except socket.gaierror as exc:
        missing = exc.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME))
        raise ResolveError(f"cannot resolve {host}: {exc.strerror}", not_found=missing) from None
    found: dict[IPAddress, None] = {}
    canonical = ""
    for _family, _type, _proto, canon, sockaddr in infos:
        canonical = canonical or canon
        found[ipaddress.ip_address(str(sockaddr[0]).split("%")[0])] = None
    canonical = canonical.rstrip(".").lower()
    asked = host.rstrip(".").lower()
    return Resolution(tuple(found), (canonical,) if canonical and canonical != asked else ())


def limited_resolver(resolve: Resolver, limit: int) -> Resolver:
    """``resolve`` with at most ``limit`` lookups in flight. Each ``getaddrinfo`` holds a thread of trio's pool, which
    the whole supervisor shares: one worker's bridge (its proxy and DNS stub together) takes at most ``limit`` of
    them, however many slow names it asks for."""
    limiter = trio.CapacityLimiter(limit)

    async def limited(host: str) -> Resolution:
        async with limiter:
            return await resolve(host)

    return limited


def local_addresses() -> frozenset[IPAddress]:
    """The host's own non-loopback addresses, read now from the interfaces (about 50 us)."""
    found: set[IPAddress] = set()
    for addrs in psutil.net_if_addrs().values():
        for addr in addrs:
            if addr.family in (socket.AF_INET, socket.AF_INET6):
                try:
                    ip = ipaddress.ip_address(addr.address.split("%")[0])
                except ValueError:
                    continue
                if not ip.is_loopback:
                    found.add(ip)
    return frozenset(found)


@dataclass(frozen=True)
class Decision:
    """What the policy says about one host (and port).

    Attributes:
        verdict: ``"allowed"``, ``"refused"`` (policy) or ``"failed"`` (allowed, but resolution failed).
        reason: empty when allowed; otherwise words an agent can act on.
        host: the normalised host as text (the raw text, shortened, when it could not be normalised).
        entry: the ``AllowedHosts`` rule that matched, if any.
        addresses: the addresses that may be dialled, in the resolver's order.
        not_found: for ``"failed"``: the name does not exist.
    """

    verdict: str
    reason: str
    host: str
    entry: HostRule | None = None
    addresses: tuple[IPAddress, ...] = field(default=())
    not_found: bool = False


def own_host_refusal(sock: Any, ip: IPAddress) -> str:
    """Why a connection just made to ``ip`` must be dropped: it reached the supervisor's own host (local and remote
    address are one) through an address that is not loopback (a route the address rules could not see); empty when
    it may be used. ``sock``: the connected socket (``getsockname``/``getpeername``)."""
    if not ip.is_loopback and sock.getsockname()[0] == sock.getpeername()[0]:
        return f"{ip} is an address of the supervisor's own host"
    return ""


def shown_host(host: str | IPAddress) -> str:
    """``host`` as written in a URL: an IPv6 address in brackets."""
    return f"[{host}]" if isinstance(host, ipaddress.IPv6Address) else str(host)


def no_own_ports() -> frozenset[int]:
    """The default of :func:`decide`'s ``own_ports``: the process serving the proxy listens on nothing."""
    return frozenset()


class OwnListeners:
    """The TCP ports the supervisor itself listens on (its HTTP frontend), kept by their owners (``set``) and
    asked by every egress decision that would dial the host's loopback (:meth:`ports`): no worker reaches them,
    whatever the policy opens. The egress bridges are not among them: their sockets live in each worker's own
    network namespace, never on the host's loopback."""

    def __init__(self) -> None:
        self._ports: dict[str, frozenset[int]] = {}

    def set(self, owner: str, ports: Iterable[int]) -> None:
        """Record the ports ``owner`` (a frontend) listens on now, replacing what it listened on before."""
        self._ports[owner] = frozenset(ports)

    def ports(self) -> frozenset[int]:
        """Every port recorded."""
        return frozenset(p for ports in self._ports.values() for p in ports)


async def decide(
    host_text: str,
    port: int | None,
    rules: AllowedHosts,
    *,
    resolve: Resolver = default_resolve,
    own_addresses: Callable[[], frozenset[IPAddress]] = local_addresses,
    own_ports: Callable[[], frozenset[int]] = no_own_ports,
) -> Decision:
    """Normalise, match, resolve and filter ``host_text``:``port`` (``port=None``: any port, for DNS).

    A checkpoint when it resolves. The resolver is called only for names that matched a rule, so a refused
    name never leaves the supervisor; IP literals, ``localhost`` and metadata names are never looked up. A name
    whose CNAME chain leads to a name the rules do not allow (:meth:`AllowedHosts.cname_refusal`) is refused;
    the addresses it resolves to are judged as always. A loopback address on a port of ``own_ports()`` (the
    supervisor's own listening sockets) is refused whatever the policy opens.
    """
    try:
        host = normalize_host(host_text)
    except HostError as exc:
        return Decision("refused", str(exc), host_text[:255])
    shown = shown_host(host)
    what = metadata_name(host) if isinstance(host, str) else None
    if what is not None:  # before any rule: a wildcard entry may cover it, and it is never looked up
        return Decision("refused", f"{shown} names a cloud metadata service ({what}) and is never reachable", shown)
    entry = rules.match(host, port)
    if entry is None:
        return Decision("refused", rules.refusal(host, port), shown)
    if not isinstance(host, str):
        candidates: list[IPAddress] = [host]
    elif host == "localhost":
        candidates = list(_LOCALHOST)
    else:
        try:
            resolution = await resolve(host)
        except ResolveError as exc:
            return Decision("failed", str(exc), shown, entry, not_found=exc.not_found)
        for target in resolution.cname_targets:
            refused = rules.cname_refusal(target, port)
            if refused:
                return Decision("refused", f"{shown} is an alias (CNAME) of {target}: {refused}", shown, entry)
        candidates = list(resolution.addresses)
    own = own_addresses()
    allowed: list[IPAddress] = []
    reasons: list[str] = []
    for ip in candidates:
        ok, why = address_verdict(ip, rules, entry=entry, own_addresses=own)
        if ok and ip.is_loopback and port is not None and port in own_ports():
            ok = False
            why = (
                f"{shown_host(ip)}:{port} is a socket of the supervisor itself (its HTTP frontend): never "
                "dialled for a worker or a model request, whatever the policy opens"
            )
        if ok:
            allowed.append(ip)
        else:
            reasons.append(why)
    if not allowed:
        why = "; ".join(dict.fromkeys(reasons)) or "the name has no address"
        return Decision("refused", f"{shown} resolves only to addresses that are not allowed: {why}", shown, entry)
    return Decision("allowed", "", shown, entry, tuple(allowed))
