"""One absolute-form request relayed by the egress proxy (``GET http://host/path``, ``GET https://host/path``), once
its host was decided and its upstream dialled: the head rewritten to origin form (:func:`~sandbox._egress_headers.
upstream_head`: ``Host`` from the checked URL, hop-by-hop headers dropped, credentials added, ``Connection: close``),
the body re-framed by h11 as it streams (never buffered whole), the response relayed as it comes until h11 sees it
complete. A body that does not match its framing is a :class:`~sandbox._egress_headers.Refusal` (400)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import h11
import trio

from sandbox._egress_decide import shown_host
from sandbox._egress_headers import Refusal, upstream_head
from sandbox._egress_relay import RELAY_CHUNK_BYTES

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sandbox._credentials import Credential
    from sandbox._host_names import Host

__all__ = ["forward"]


async def forward(
    client: trio.SocketStream,
    conn: h11.Connection,
    request: h11.Request,
    upstream: trio.abc.Stream,
    *,
    scheme: str,
    host: Host,
    port: int,
    path: str,
    credentials: Sequence[Credential],
    record: dict[str, Any],
) -> None:
    """Relay ``request`` (read from ``client`` by ``conn``) to ``upstream`` and its response back; bytes counted in
    ``record`` (``bytes_up``, ``bytes_down``), with the credentials used. Returns when the response is complete or
    either side closed."""
    headers, path = upstream_head(
        request.headers,
        scheme=scheme,
        host=host,
        port=port,
        path=path,
        shown=shown_host(host),
        credentials=credentials,
        record=record,
    )
    up = h11.Connection(h11.CLIENT)
    head = up.send(h11.Request(method=request.method, target=path.encode("ascii", "replace"), headers=headers))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_response, client, up, upstream, nursery.cancel_scope, record)
        await upstream.send_all(head or b"")
        record["bytes_up"] += len(head or b"")
        try:
            await _request_body(client, conn, up, upstream, record)
        except h11.ProtocolError as exc:  # a body the upstream framing cannot carry: refuse, never crash
            raise Refusal(400, f"request body does not match its framing: {exc}") from None


async def _request_body(
    client: trio.SocketStream,
    conn: h11.Connection,
    up: h11.Connection,
    upstream: trio.abc.Stream,
    record: dict[str, Any],
) -> None:
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:
            raise Refusal(400, f"malformed request body: {exc}") from None
        if event is h11.NEED_DATA:
            data = await client.receive_some(RELAY_CHUNK_BYTES)
            if not data:
                return
            conn.receive_data(data)
            continue
        if isinstance(event, h11.Data | h11.EndOfMessage):
            out = up.send(event)
            if out:
                await upstream.send_all(out)
                record["bytes_up"] += len(out)
            if isinstance(event, h11.EndOfMessage):
                return
        else:
            return


async def _response(
    client: trio.SocketStream,
    up: h11.Connection,
    upstream: trio.abc.Stream,
    scope: trio.CancelScope,
    record: dict[str, Any],
) -> None:
    """Relay the response as it arrives; stop when h11 sees it complete (or the server closes)."""
    parsing = True
    try:
        while True:
            data = await upstream.receive_some(RELAY_CHUNK_BYTES)
            if not data:
                break
            await client.send_all(data)
            record["bytes_down"] += len(data)
            if parsing:
                try:
                    up.receive_data(bytes(data))
                    while (event := up.next_event()) not in (h11.NEED_DATA, h11.PAUSED):
                        if isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                            return
                except h11.ProtocolError:
                    parsing = False
    finally:
        scope.cancel()
