"""One MCP call's progress, from the supervisor (worker events, sub-agent steps) to the client as
``notifications/progress``.

A client asks by sending ``_meta.progressToken`` with ``tools/call``. :class:`ProgressRelay` then takes updates
synchronously (``report``, called on the trio loop by whatever produced them, never blocking) into a bounded queue,
and ``run`` writes them as notifications until the call ends. Per MCP, ``progress`` must increase with each
notification: an update that does not is dropped, as are updates past :data:`QUEUE` waiting ones (a slow client
loses progress, never memory). The frontend closes the relay and lets it drain before it sends the call's result,
so no notification for a call follows its response.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import trio

from toolboxes import ProgressUpdate

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = ["QUEUE", "ProgressRelay", "progress_token"]

#: Updates waiting to be written, per call; more are dropped.
QUEUE = 64


def progress_token(meta: Any) -> str | int | None:
    """The ``progressToken`` of a request's ``_meta`` (a string or an integer), or ``None``."""
    if not isinstance(meta, dict):
        return None
    token = meta.get("progressToken")
    if isinstance(token, str) and 0 < len(token) <= 1024:
        return token
    if isinstance(token, int) and not isinstance(token, bool):
        return token
    return None


class ProgressRelay:
    """The progress of one call with token ``token``."""

    def __init__(self, token: str | int) -> None:
        self.token = token
        self._send, self._receive = trio.open_memory_channel[ProgressUpdate](QUEUE)
        self._last = -math.inf
        self.dropped = 0

    def report(self, update: ProgressUpdate) -> None:
        """Queue ``update`` (never blocks); dropped when it does not increase or the queue is full."""
        if update.progress <= self._last:
            self.dropped += 1
            return
        try:
            self._send.send_nowait(update)
        except (trio.WouldBlock, trio.ClosedResourceError):
            self.dropped += 1
            return
        self._last = update.progress

    def close(self) -> None:
        """No more updates: ``run`` returns once the queued ones are written."""
        self._send.close()

    async def run(self, write: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        """Write each update as a ``notifications/progress`` message until :meth:`close`."""
        async with self._receive:
            async for update in self._receive:
                params: dict[str, Any] = {"progressToken": self.token, "progress": update.progress}
                if update.total is not None:
                    params["total"] = update.total
                if update.message is not None:
                    params["message"] = update.message
                await write({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})
