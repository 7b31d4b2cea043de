"""The Developer toolbox (SPEC.md section 4, developer)."""

from ._toolbox import CAPABILITIES, DeveloperToolbox, open_toolbox

__all__ = ["CAPABILITIES", "DeveloperToolbox", "open_toolbox"]
