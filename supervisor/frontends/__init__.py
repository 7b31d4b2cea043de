"""How clients reach the supervisor: the MCP session core over stdio and Streamable HTTP, and the CLI."""

from ._cli import main

__all__ = [
    "main",
]
