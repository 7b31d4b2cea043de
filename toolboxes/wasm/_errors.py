"""Errors of the WASM toolbox.

::

    WasmConfigError (ValueError)   the toolbox entry cannot be used: raised by ``open_toolbox``
    ComponentLoadError             one component cannot be offered (bad sidecar, not a component, wrong world):
                                   a load error naming the file; the other components still load

Problems of a *call* (a trap, the time limit, the memory limit, a malformed result) are never exceptions: they are
``ToolResult`` values with status ``error``.
"""

from __future__ import annotations

__all__ = ["ComponentLoadError", "WasmConfigError"]


class WasmConfigError(ValueError):
    """The toolbox entry of the agent file is unusable. ``key`` names the offending config key."""

    def __init__(self, message: str, key: str = "") -> None:
        super().__init__(f"{key}: {message}" if key else message)
        self.message = message
        self.key = key


class ComponentLoadError(Exception):
    """A component (or its sidecar) cannot be loaded; the message is for the component's author."""
