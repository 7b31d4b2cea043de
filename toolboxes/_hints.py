"""MCP tool annotations (``readOnlyHint``, ``destructiveHint``, ``idempotentHint``, ``openWorldHint``) that toolbox
kinds declare in :attr:`ToolSpec.hints`, from what each knows about its tools (docs/MCP.md has the table).

``openWorldHint`` is not set here: the supervisor sets it from the worker's network (allowed hosts) and portal
access, which the kernel enforces.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ADDITIVE", "DESTRUCTIVE", "READ_ONLY", "http_method_hints"]

#: Reads and reports only: changes nothing (so calling it again changes nothing either).
READ_ONLY: dict[str, Any] = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True}
#: May overwrite or delete what is there.
DESTRUCTIVE: dict[str, Any] = {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False}
#: Changes things but only adds (never overwrites or deletes); calling it again adds again.
ADDITIVE: dict[str, Any] = {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False}


def http_method_hints(method: str) -> dict[str, Any]:
    """The hints of an HTTP operation, by its method's semantics (RFC 9110): GET/HEAD/OPTIONS are safe; PUT and
    DELETE are idempotent and may overwrite or delete; POST and PATCH may change anything, repeatedly."""
    m = method.upper()
    if m in ("GET", "HEAD", "OPTIONS"):
        return dict(READ_ONLY)
    if m in ("PUT", "DELETE"):
        return {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True}
    return dict(DESTRUCTIVE)
