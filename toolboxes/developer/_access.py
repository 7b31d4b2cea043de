"""The one gate every Developer path goes through: the toolbox's ``FileSandbox`` (default ``AlwaysDeny``).

:class:`Gate` is :class:`toolboxes._paths.PathGate`, the rule every toolbox that takes a path shares: relative paths
start at the agent file's folder (``policy.base_dir``); without one they are refused. The kernel (Landlock, compiled
from the same predicate) is the fence that holds anyway.
"""

from __future__ import annotations

from toolboxes._paths import PathAccess, PathGate

__all__ = ["Access", "Gate"]

Access = PathAccess
Gate = PathGate
