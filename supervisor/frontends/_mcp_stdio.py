"""The MCP frontend over stdio: newline-delimited JSON-RPC 2.0, served with trio.

One stdio connection is one :class:`~supervisor.frontends._mcp_session.McpSession` (the methods, the session's tool
view and how results map are there), of the revision its first request opens (as the SDK's own server): a request
with the 2026-07-28 ``_meta`` envelope opens a stateless-era connection (typed results, no ``initialize``; what the
connection enables, skills included, lasts as long as it), anything else a handshake one (requests before
``initialize`` refused, but ``ping``); a request of the other era is refused. It is bound to one agent: ``serve
--serve-agent SLUG`` (or ``--agent SLUG``), else the policy's first agent; it sees that agent's tools under that
agent's names. Calls run concurrently; replies are written whole, one line each. At most ``MAX_IN_FLIGHT`` requests
are handled at once: past it the server stops reading stdin until one ends.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import trio

from supervisor._face import ChunkReader, send_whole

from ._mcp_session import McpSession
from ._mcp_wire import INVALID_REQUEST, encode_message

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from supervisor._face import ToolService

__all__ = ["McpStdioServer", "bound_agent", "serve_mcp_stdio"]

_MAX_LINE = 64 * 1024 * 1024
#: Requests of one MCP session being handled or answered at once. Past it the server stops reading stdin until one
#: ends: a client that sends without reading the replies is slowed down, never buffered without bound.
MAX_IN_FLIGHT = 256


class McpStdioServer:
    """One MCP session over a pair of byte streams (newline-delimited JSON)."""

    def __init__(
        self, sup: ToolService, receive: trio.abc.ReceiveStream, send: trio.abc.SendStream, *, agent: str | None = None
    ) -> None:
        """``agent``: the agent the session is bound to (its tools, under its names); ``None``: the policy's first
        agent. Raises ``ValueError`` for an agent the supervisor does not serve."""
        self.sup = sup
        self._receive = receive
        self._send = send
        self._send_lock = trio.Lock()
        self.session = McpSession(sup, self._write, agent=bound_agent(sup, agent), dual_era=True)
        self._in_flight = trio.CapacityLimiter(MAX_IN_FLIGHT)

    @property
    def session_id(self) -> str:
        return self.session.session_id

    async def _write(self, message: dict[str, Any]) -> None:
        line = encode_message(message)
        try:
            await send_whole(self._send, self._send_lock, line)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    async def serve(self) -> None:
        """Serve until the client closes stdin."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.session.watch_tools)
            nursery.start_soon(self.session.log.pump, self._write)
            buffer = bytearray()
            skipping = False  # inside a line that was too long: drop bytes until its newline
            reader = ChunkReader(self._receive, 1 << 16)  # one yield per chunk read, not two
            while True:
                chunk = await reader.receive()
                if not chunk:
                    break
                start = 0
                while (end := chunk.find(b"\n", start)) >= 0:
                    if skipping:
                        skipping = False
                    else:
                        buffer += chunk[start:end]
                        job = self._handle_line(bytes(buffer)) if buffer.strip() else None
                        if job is not None:
                            # A slot per answer in progress: no more lines are read while all are taken. A free
                            # slot is taken without a yield (the reader yields once per chunk already).
                            token = object()
                            try:
                                self._in_flight.acquire_on_behalf_of_nowait(token)
                            except trio.WouldBlock:
                                await self._in_flight.acquire_on_behalf_of(token)
                            nursery.start_soon(self._run_job, job, token)
                    buffer.clear()
                    start = end + 1
                if not skipping:
                    buffer += chunk[start:]
                    if len(buffer) > _MAX_LINE:
                        # Refused once, as soon as it is too long; never buffered beyond the limit.
                        await self.session.refuse(
                            None, INVALID_REQUEST, f"message too large: a line may have at most {_MAX_LINE} bytes"
                        )()
                        buffer.clear()
                        skipping = True
            self.session.close()
            nursery.cancel_scope.cancel()

    async def _run_job(self, job: Callable[[], Awaitable[None]], token: object) -> None:
        try:
            await job()
        finally:
            self._in_flight.release_on_behalf_of(token)

    def _handle_line(self, line: bytes) -> Callable[[], Awaitable[None]] | None:
        """Decode one line and say what answers it (``None``: nothing to answer, a notification or a response)."""
        try:
            msg = json.loads(line)
        except RecursionError:
            return self.session.parse_error("parse error: the JSON is nested too deeply")
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
            return self.session.parse_error(f"parse error: {str(exc)[:200]}")
        return self.session.handle_message(msg)


def bound_agent(sup: ToolService, agent: str | None) -> str | None:
    """The agent a stdio session serves: ``agent``, else the policy's first (``None`` when none is loaded).

    Raises:
        ValueError: ``agent`` is not one the supervisor serves (the message names those it does).
    """
    slugs = sup.agent_slugs()
    if agent is None:
        return slugs[0] if slugs else None
    if agent not in slugs:
        raise ValueError(f"no agent {agent!r} is served by this policy; its agents are: {', '.join(slugs) or 'none'}")
    return agent


async def serve_mcp_stdio(sup: ToolService, agent: str | None = None) -> None:
    """Serve MCP on this process's stdin/stdout until stdin closes, bound to ``agent`` (``None``: the first)."""
    import os

    server_agent = bound_agent(sup, agent)
    receive = trio.lowlevel.FdStream(os.dup(0))
    send = trio.lowlevel.FdStream(os.dup(1))
    async with receive, send:
        await McpStdioServer(sup, receive, send, agent=server_agent).serve()
