"""A slowloris: connections that each send a request head one byte at a time, never finishing it, and open a new one
whenever the server closes one. The HTTP admission test (``tests/supervisor/frontends/test_http_admission.py``) and
``scripts/chaos http`` attack with it."""

from __future__ import annotations

import time

import trio

__all__ = ["Slowloris"]


class Slowloris:
    """``connections`` trickling connections to ``127.0.0.1:port`` from ``source`` (another loopback address, so the
    server tells the attacker apart), a byte every ``every_s``; :meth:`run` until the caller's cancel scope ends it.
    ``opened`` counts the connections made, ``lifetimes`` how long each was held (closed by the server or not)."""

    def __init__(self, port: int, connections: int, every_s: float, source: str = "127.0.0.2", path: str = "/") -> None:
        self.port, self.connections, self.every_s, self.source = port, connections, every_s, source
        self.head = f"GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nx-pad: ".encode() + b"a" * 4096
        self.lifetimes: list[float] = []
        self.opened = 0
        #: connections the server closed (an EOF while trickling)
        self.closed_by_server = 0

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(self.connections):
                nursery.start_soon(self._one)

    async def _one(self) -> None:
        while True:  # bounded by the caller's cancel scope
            try:
                stream = await trio.open_tcp_stream("127.0.0.1", self.port, local_address=self.source)
            except OSError:
                await trio.sleep(self.every_s)
                continue
            self.opened += 1
            start = time.monotonic()
            try:
                for byte in self.head:  # a byte at a time; the head is never finished
                    await stream.send_all(bytes([byte]))
                    with trio.move_on_after(self.every_s):
                        if not await stream.receive_some(65536):
                            self.closed_by_server += 1
                            break  # the server closed it
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self.closed_by_server += 1
            finally:
                self.lifetimes.append(time.monotonic() - start)
                await trio.aclose_forcefully(stream)
