"""The System toolbox (SPEC.md section 4, system)."""

from ._toolbox import SystemToolbox, open_toolbox

__all__ = ["SystemToolbox", "open_toolbox"]
