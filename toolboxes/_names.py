"""Tool naming (SPEC.md section 2), shared by every toolbox kind.

A toolbox reports public names already in the agreed form (``system_<Name>_<capability>``...); the supervisor then
only de-duplicates and shortens names that are too long.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["CAPABILITY_PROPERTY", "capability_refusal", "tool_name"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def tool_name(*parts: str) -> str:
    """Join ``parts`` with ``_``, turning ``-`` into ``_`` and any other character outside ``[A-Za-z0-9_]`` into
    ``_`` (so ``("system", "system", "attach-file")`` gives ``system_system_attach_file``)."""
    return "_".join(_UNSAFE.sub("_", p.replace("-", "_")) for p in parts)


#: The ``capability`` property of a System or Developer tool: optional, checked by :func:`capability_refusal`
#: (not by an ``enum``, so that a capability the toolbox does not list is refused with the seed's error name).
CAPABILITY_PROPERTY = {"type": "string", "description": "Optional; the capability this tool is."}


def capability_refusal(given: Any, cap: str, enabled: Mapping[str, str]) -> str | None:
    """Why a call of the tool for ``cap`` that says ``"capability": given`` is refused (``None``: it is not).

    ``enabled`` maps the toolbox's capabilities to their tools. A capability the toolbox does not list gets the
    seed's ``CapabilityNotEnabledError``; another one it lists is named with the tool that runs it."""
    if given is None or given == cap:
        return None
    if isinstance(given, str) and given in enabled:
        return f"capability {given!r} is not this tool's ({cap}): call {enabled[given]} for it"
    listed = ", ".join(sorted(enabled)) or "none"
    return f"CapabilityNotEnabledError: {given!r} is not among this toolbox's Capabilities ({listed})"
