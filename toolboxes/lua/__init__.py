"""The Lua toolbox: scripts in fresh, confined Lua 5.4 states with limits that hold."""

from ._errors import KINDS, LuaConfigError
from ._toolbox import LuaToolbox, open_toolbox

__all__ = ["KINDS", "LuaConfigError", "LuaToolbox", "open_toolbox"]
