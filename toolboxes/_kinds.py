"""The toolbox kinds: the one list of their names, each the module ``toolboxes.<kind>`` a worker loads.

:data:`ToolboxKind` is the list (a ``Literal``, so the checker knows the names); :data:`KINDS` is the same names as
a tuple, in that order. The worker loads only these (:mod:`toolboxes._worker`); the supervisor's agent-file loader
produces only these (``supervisor/config/_agent_toolboxes.py`` types its configs' kind with :data:`ToolboxKind`) and
its plan has one entry per name (``supervisor/plan/_kinds.py``, ``KIND_PLANS``). A new kind is a new name here, a
package ``toolboxes/<kind>/`` with ``open_toolbox``, an agent-file model and a plan entry;
``tests/supervisor/plan/test_compile.py`` checks they agree.
"""

from __future__ import annotations

import typing
from typing import Literal

__all__ = ["KINDS", "ToolboxKind"]

ToolboxKind = Literal["bash", "skills", "mcp", "openapi", "postgrest", "sqlite", "system", "developer", "lua", "wasm"]
KINDS: tuple[ToolboxKind, ...] = typing.get_args(ToolboxKind)
