"""The egress proxy's CONNECT relay: bytes both ways between the worker and the checked upstream, never read.

Spliced in the kernel (socket -> pipe -> socket, :func:`splice_pump`) where ``os.splice`` exists, else copied
through Python (:func:`pump`). :func:`tunnel` ends both directions when one side breaks and counts the bytes.
"""

from __future__ import annotations

import fcntl
import os
from typing import Any

import trio

__all__ = ["RELAY_CHUNK_BYTES", "pump", "splice_pump", "tunnel"]

RELAY_CHUNK_BYTES = 1024 * 1024
_F_SETPIPE_SZ = 1031
_SPLICE_FLAGS = getattr(os, "SPLICE_F_MOVE", 1) | getattr(os, "SPLICE_F_NONBLOCK", 2)


async def pump(src: trio.SocketStream, dst: trio.SocketStream, counts: dict[str, Any], key: str) -> None:
    """Copy ``src`` to ``dst`` until EOF through Python, adding the bytes to ``counts[key]``; then EOF on ``dst``."""
    while True:
        data = await src.receive_some(RELAY_CHUNK_BYTES)
        if not data:
            break
        await dst.send_all(data)
        counts[key] += len(data)
    try:
        await dst.send_eof()
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass


async def splice_pump(src: trio.SocketStream, dst: trio.SocketStream, counts: dict[str, Any], key: str) -> None:
    """Like :func:`pump`, but the kernel moves the bytes (socket -> pipe -> socket, no copy to Python)."""
    r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        try:
            fcntl.fcntl(w, _F_SETPIPE_SZ, RELAY_CHUNK_BYTES)
        except OSError:
            pass  # the default pipe size works too, just with more rounds
        src_fd, dst_fd = src.socket.fileno(), dst.socket.fileno()
        while True:
            try:
                n = os.splice(src_fd, w, RELAY_CHUNK_BYTES, flags=_SPLICE_FLAGS)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(src.socket)
                continue
            if n == 0:
                break
            while n:
                try:
                    moved = os.splice(r, dst_fd, n, flags=_SPLICE_FLAGS)
                except BlockingIOError:
                    await trio.lowlevel.wait_writable(dst.socket)
                    continue
                n -= moved
                counts[key] += moved
            await trio.lowlevel.checkpoint()
    finally:
        os.close(r)
        os.close(w)
    try:
        await dst.send_eof()
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass


async def tunnel(client: trio.SocketStream, upstream: trio.SocketStream, counts: dict[str, Any]) -> None:
    """Relay both ways until both sides finished; a broken side ends both."""
    move = splice_pump if hasattr(os, "splice") else pump

    async def guarded(src: trio.SocketStream, dst: trio.SocketStream, key: str) -> None:
        try:
            await move(src, dst, counts, key)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            nursery.cancel_scope.cancel()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(guarded, client, upstream, "bytes_up")
        nursery.start_soon(guarded, upstream, client, "bytes_down")
