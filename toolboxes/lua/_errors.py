"""Errors of the Lua toolbox.

Tree::

    LuaConfigError (ValueError)   the toolbox entry cannot be used: raised by ``open_toolbox``

Script failures are not exceptions: a script that fails ends in a result whose ``error.kind`` is one of
:data:`KINDS` (the seed's ``ScriptError``), and :data:`STATUS_OF_KIND` says which result status each kind gets.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["KINDS", "STATUS_OF_KIND", "Kind", "LuaConfigError"]

Kind = Literal["runtime", "timeout", "memory", "sandbox", "tool_invocation", "initialization"]

#: The seed's ``ScriptError`` constructors, in its order: LuaRuntimeError (syntax or runtime, with the line),
#: TimeoutError, MemoryError, SandboxError (a refused operation), ToolInvocationError, InitializationError.
KINDS: tuple[Kind, ...] = ("runtime", "timeout", "memory", "sandbox", "tool_invocation", "initialization")

#: ``failed``: the script ran and failed by its own doing; ``error``: a limit or the policy stopped it, or the state
#: could not be made (DESIGN.md: timeouts and refusals are ``error``).
STATUS_OF_KIND: dict[Kind, Literal["failed", "error"]] = {
    "runtime": "failed",
    "tool_invocation": "failed",
    "timeout": "error",
    "memory": "error",
    "sandbox": "error",
    "initialization": "error",
}


class LuaConfigError(ValueError):
    """The toolbox entry of the agent file is unusable (a wrong type, a bad predicate). Raised by ``open_toolbox``;
    the worker reports it as a load error. ``key`` names the offending config key."""

    def __init__(self, message: str, key: str = "") -> None:
        super().__init__(f"{key}: {message}" if key else message)
        self.message = message
        self.key = key
