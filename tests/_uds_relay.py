"""A relay from a Unix socket to a TCP address, for reaching a server in another network namespace.

``python -m tests._uds_relay PATH HOST PORT``, started in the server's namespace (``nsenter --net=...``): it listens
on the Unix socket ``PATH`` (a file, so a client in any network namespace reaches it), prints ``ready`` once it
does, and relays each connection to ``HOST:PORT`` of its own namespace, both ways, until either side closes. Tests
use it to talk to a supervisor that runs in a network namespace of its own (only loopback: nothing it tries can
leave the machine) with clients that stay in the test's namespace (httpx's ``uds`` transport).
"""

from __future__ import annotations

import os
import sys

import trio


async def _pump(source: trio.abc.ReceiveStream, sink: trio.abc.SendStream) -> None:
    try:
        while data := await source.receive_some(1 << 16):
            await sink.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        try:
            if isinstance(sink, trio.SocketStream):
                await sink.send_eof()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass


async def _relay(client: trio.SocketStream, host: str, port: int) -> None:
    async with client:
        try:
            upstream = await trio.open_tcp_stream(host, port)
        except OSError:
            return
        async with upstream, trio.open_nursery() as nursery:
            nursery.start_soon(_pump, client, upstream)
            nursery.start_soon(_pump, upstream, client)


async def main(path: str, host: str, port: int) -> None:
    sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
    if os.path.exists(path):
        os.unlink(path)
    await sock.bind(path)
    sock.listen(128)
    print("ready", flush=True)
    listener = trio.SocketListener(sock)
    async with trio.open_nursery() as nursery:
        while True:
            client = await listener.accept()
            nursery.start_soon(_relay, client, host, port)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]))
