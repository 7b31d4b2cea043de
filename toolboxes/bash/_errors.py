"""Errors of the bash toolbox.

::

    BashError                 base; never reaches an agent as a traceback
    ├── ConfigError           the toolbox entry or its policy extras are malformed (also a ValueError)
    └── DescribeError         a script's ``describe`` failed (ran badly or printed something invalid)

A :class:`DescribeError` becomes a load error (``{"source", "message"}``) and the script is left out; the other
scripts still load. Problems of a *call* (timeout, non-zero exit, bad output) are never exceptions: they are
``ToolResult`` values with status ``failed`` or ``error``.
"""

from __future__ import annotations

__all__ = ["BashError", "ConfigError", "DescribeError"]


class BashError(Exception):
    """Base of the bash toolbox's errors."""


class DescribeError(BashError):
    """Raised when a script's ``describe`` cannot be used: it could not start, ran too long, printed too much, exited
    non-zero, or printed something that is not a valid description. ``str(exc)`` is the message shown as the load
    error, written for the author of the script."""


class ConfigError(BashError, ValueError):
    """Raised by ``open_toolbox`` when its config is malformed (unknown tag, relative path, bad policy value). The
    supervisor validates configs before it starts a worker, so this means a bug or a hand-written config; the
    message names the bad key."""
