"""The MCP server toolbox (SPEC.md section 4, mcp): one stdio MCP server, run as a child of its confined worker."""

from ._errors import McpError, ServerGone, ServerRefused, ServerTimeout
from ._jsonrpc import PROTOCOL_VERSION
from ._toolbox import McpToolbox, open_toolbox

__all__ = ["PROTOCOL_VERSION", "McpError", "McpToolbox", "ServerGone", "ServerRefused", "ServerTimeout", "open_toolbox"]
