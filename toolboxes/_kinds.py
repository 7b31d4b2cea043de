"""The toolbox kinds: the one list of their names, each the module ``toolboxes.<kind>`` a worker loads.

The worker loads only these (:mod:`toolboxes._worker`); the supervisor's agent-file loader produces only these
(``supervisor.config.TOOLBOX_KINDS`` is this tuple) and its plan has one entry per name
(``supervisor/plan/_kinds.py``, ``KIND_PLANS``). A new kind is a new name here, a package ``toolboxes/<kind>/`` with
``open_toolbox``, an agent-file model and a plan entry; ``tests/supervisor/plan/test_compile.py`` checks the four agree.
"""

from __future__ import annotations

__all__ = ["KINDS"]

KINDS: tuple[str, ...] = (
    "bash",
    "skills",
    "mcp",
    "openapi",
    "postgrest",
    "sqlite",
    "system",
    "developer",
    "lua",
    "wasm",
)
