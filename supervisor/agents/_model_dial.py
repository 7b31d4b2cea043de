"""The agent loops' HTTP client: httpx over a connection pool whose every connection is decided and dialled under
the egress proxy's address rules (:mod:`supervisor.agents._model_network` says which and why).

Imported at the first model request (httpcore's import is not paid at the supervisor's start).
:class:`CheckedBackend` is the pool's network backend: each ``connect_tcp`` asks
:func:`sandbox._egress_decide.decide` about the URL's host and port (normalise, metadata first, one lookup as an
absolute name, every address judged, the supervisor's own ports refused), then dials the addresses that passed, by
number, in the resolver's order, and drops a connection whose local and remote address are one
(:func:`sandbox._egress_decide.own_host_refusal`). A refusal raises
:class:`~supervisor.agents._model_network.ModelEndpointRefused`; a name that does not resolve, or addresses that
cannot be reached, raise ``httpcore.ConnectError`` (httpx's ``ConnectError``: transient, as before).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpcore
import httpx

from sandbox import CONNECT_TIMEOUT_S, HostError, decide, local_addresses, normalize_host, own_host_refusal

from ._model_network import ModelEndpointRefused

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from sandbox import IPAddress, Resolver

    from ._model_network import ModelAccess

__all__ = ["CheckedBackend", "checked_client"]

#: httpx's own default pool limits (``httpx.Limits()``)
_LIMITS = httpx.Limits()


class CheckedBackend(httpcore.AsyncNetworkBackend):
    """A network backend that dials only what the address rules allow under ``access`` (see the module)."""

    def __init__(
        self,
        access: ModelAccess,
        *,
        own_ports: Callable[[], frozenset[int]],
        resolve: Resolver,
        own_addresses: Callable[[], frozenset[IPAddress]] = local_addresses,
    ) -> None:
        self.access = access
        self._own_ports = own_ports
        self._resolve = resolve
        self._own_addresses = own_addresses
        self._inner = httpcore.TrioBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Decide ``host``:``port``, then connect to the first address that passed and answers."""
        try:
            normal = normalize_host(host)
        except HostError as exc:
            raise ModelEndpointRefused(str(exc)) from None
        decision = await decide(
            host,
            port,
            self.access.rules(normal),
            resolve=self._resolve,
            own_addresses=self._own_addresses,
            own_ports=self._own_ports,
        )
        if decision.verdict == "refused":
            raise ModelEndpointRefused(decision.reason)
        if decision.verdict != "allowed":
            raise httpcore.ConnectError(decision.reason)
        errors: list[str] = []
        for ip in decision.addresses:
            try:
                stream = await self._inner.connect_tcp(
                    str(ip),  # by number: no second lookup
                    port,
                    timeout=CONNECT_TIMEOUT_S if timeout is None else timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                errors.append(f"{ip}: {exc or type(exc).__name__}")
                continue
            refused = own_host_refusal(stream.get_extra_info("socket"), ip)
            if refused:
                await stream.aclose()
                raise ModelEndpointRefused(refused)
            return stream
        raise httpcore.ConnectError(f"cannot connect to {decision.host} port {port}: {'; '.join(errors)}")

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Never: a model endpoint is reached over TCP only."""
        raise ModelEndpointRefused("a model endpoint is reached over TCP only, never a unix socket")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _CheckedTransport(httpx.AsyncHTTPTransport):
    """httpx's own transport (its request and response conversion and exception mapping) over a connection pool
    made with :class:`CheckedBackend`. httpx takes no network backend as an argument, so this sets the pool its
    transport uses (``_pool``) itself instead of calling the parent's constructor (which would build a second pool
    and TLS context for nothing)."""

    def __init__(self, backend: CheckedBackend) -> None:
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=False),
            max_connections=_LIMITS.max_connections,
            max_keepalive_connections=_LIMITS.max_keepalive_connections,
            keepalive_expiry=_LIMITS.keepalive_expiry,
            network_backend=backend,
        )


def checked_client(
    access: ModelAccess, *, own_ports: Callable[[], frozenset[int]], resolve: Resolver
) -> httpx.AsyncClient:
    """An httpx client whose connections are decided under ``access``: no proxies from the environment, no
    redirects followed, no timeouts of its own (the agent loop bounds each request)."""
    backend = CheckedBackend(access, own_ports=own_ports, resolve=resolve)
    return httpx.AsyncClient(
        transport=_CheckedTransport(backend), timeout=None, trust_env=False, follow_redirects=False
    )
