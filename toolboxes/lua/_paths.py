"""The one place the Lua toolbox asks whether a path is inside its FileSandbox.

:class:`PathGate` is :class:`toolboxes._paths.PathGate`, the rule every toolbox that takes a path shares: relative
paths start at the agent file's folder (``policy.base_dir``, which the supervisor passes), then
``sandbox._predicate_eval.check_path`` (canonicalise, evaluate the predicate, enforce ``fsbMaxFileSize``).

This is the second fence: Landlock, applied by the launcher before any toolbox code runs, is the first.
"""

from __future__ import annotations

from toolboxes._paths import PathAccess, PathGate

__all__ = ["PathGate", "Verdict"]

Verdict = PathAccess
