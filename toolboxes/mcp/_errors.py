"""Errors of the MCP toolbox. They never reach the supervisor: :mod:`._toolbox` turns each into a result.

::

    McpError                 something went wrong talking to the MCP server
    ├── ServerGone           the server process exited or closed its stdout (cause: exit status, stderr tail)
    ├── ServerTimeout        no answer before the deadline (the request was cancelled with notifications/cancelled)
    └── ServerRefused        the server answered with a JSON-RPC error, or an answer that is not what MCP says
"""

from __future__ import annotations

__all__ = ["McpError", "ServerGone", "ServerRefused", "ServerTimeout"]


class McpError(Exception):
    """Base of the toolbox's errors; the message is written for an agent (what happened and what to do)."""


class ServerGone(McpError):
    """The server process is gone: every request in flight fails with this, naming how it ended. Differs from
    :class:`ServerTimeout` in that nothing more will come from this process; the toolbox starts a new one."""


class ServerTimeout(McpError):
    """A request got no answer in time (or its call was cancelled). The server is still running and serves other
    requests; it was told to stop with ``notifications/cancelled``."""


class ServerRefused(McpError):
    """The server answered, but with a JSON-RPC error or a malformed answer. ``code`` is the JSON-RPC error code
    (``None`` for a malformed answer)."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code
