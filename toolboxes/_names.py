"""Tool naming (SPEC.md section 2), shared by every toolbox kind.

A toolbox reports public names already in the agreed form (``system_<Name>_<capability>``...); the supervisor then
only de-duplicates and shortens names that are too long.
"""

from __future__ import annotations

import re

__all__ = ["tool_name"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def tool_name(*parts: str) -> str:
    """Join ``parts`` with ``_``, turning ``-`` into ``_`` and any other character outside ``[A-Za-z0-9_]`` into
    ``_`` (so ``("system", "system", "attach-file")`` gives ``system_system_attach_file``)."""
    return "_".join(_UNSAFE.sub("_", p.replace("-", "_")) for p in parts)
