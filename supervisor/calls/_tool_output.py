"""A tool result checked against the tool's output schema, without I/O.

A tool whose toolbox declares an ``output_schema`` (an MCP server's own ``outputSchema``) promises that every
result that passed carries a ``structured`` value matching it: MCP clients rely on that (the official SDK client
refuses a result without ``structuredContent`` or one that does not match). The worker is untrusted, so the
supervisor checks: a passed result that breaks the promise becomes an ``error`` result naming the problem; results
that failed or were errors are passed on as they are (MCP does not check those).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from toolboxes._result import ToolResult

if TYPE_CHECKING:
    from ._registry import RegisteredTool

__all__ = ["checked_output"]


def checked_output(tool: RegisteredTool, result: ToolResult) -> ToolResult:
    """``result`` itself, or an ``error`` result when it passed without a ``structured`` value matching the tool's
    output schema."""
    validator = tool.output_validator
    if validator is None or result.status != "passed":
        return result
    if result.structured is None:
        why = f"Tool '{tool.name}' declares an output schema but its result carries no structured value."
    else:
        errors = validator.errors(result.structured)
        if not errors:
            return result
        problems = "; ".join(f"{e.path}: {e.message}" if e.path else e.message for e in errors[:10])
        why = f"Tool '{tool.name}' returned a result that does not match its output schema: {problems}"
    return replace(ToolResult.error(why[:4000]), metadata=[("output_schema", "mismatch"), *result.metadata])
