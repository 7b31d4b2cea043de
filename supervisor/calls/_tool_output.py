"""A tool result held to the output limit and checked against the tool's output schema, without I/O.

:func:`capped_output` is the supervisor's backstop of ``limits.output_bytes`` (``toolboxes._output_cap``): every
result the portal hands back, from any kind of toolbox and from sub-agents, is cut there, whatever its worker did.

A tool whose toolbox declares an ``output_schema`` (an MCP server's own ``outputSchema``) promises that every
result that passed carries a ``structured`` value matching it: MCP clients rely on that (the official SDK client
refuses a result without ``structuredContent`` or one that does not match). The worker is untrusted, so the
supervisor checks: a passed result that breaks the promise becomes an ``error`` result naming the problem; results
that failed or were errors are passed on as they are (MCP does not check those).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from toolboxes import IMAGE_TYPES, OUTPUT_LIMIT_KEY, TRUNCATED_KEY, ToolResult, cap_output

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ._attachments import AttachmentStore
    from ._registry import RegisteredTool

__all__ = ["capped_output", "checked_output", "finished_output", "output_limit"]


def finished_output(
    tool: RegisteredTool,
    result: ToolResult,
    notes: tuple[str, ...],
    *,
    output_bytes: int | None,
    attachments: AttachmentStore,
    media_limits: Mapping[str, int],
) -> ToolResult:
    """The portal's output stage: ``result`` of ``tool`` with a ``validation_warning`` per note (what its
    ``ValidationConfig`` mended in the arguments), held to its output limit (``output_bytes``: the policy's),
    checked against its output schema, its attachments stored (refused ones noted; a WASM component's are images
    of the four types its world lists)."""
    for note in notes:
        result = result.with_meta("validation_warning", note)
    result = capped_output(result, output_limit(tool, output_bytes))
    result = checked_output(tool, result)
    if result.attachments:
        only = IMAGE_TYPES if tool.runner.spec.kind == "wasm" else None
        return attachments.store(tool.runner.spec.plan.workdir, result, only=only, limits=media_limits)
    return result


def output_limit(tool: RegisteredTool, default: int | None) -> int | None:
    """The ``limits.output_bytes`` of ``tool``'s toolbox (its worker's plan), else ``default`` (the policy's, for
    a sub-agent's tool)."""
    return tool.output_bytes if tool.output_bytes is not None else default  # the plan's, read once per tool


def capped_output(result: ToolResult, max_bytes: int | None) -> ToolResult:
    """``result`` held to ``max_bytes`` (:func:`toolboxes._output_cap.cap_output`); a structured value JSON cannot
    carry makes the call an ``error`` saying so."""
    try:
        return cap_output(result, max_bytes)
    except (TypeError, ValueError) as exc:
        return ToolResult.error(f"the tool's result cannot be sent: its structured value is not JSON ({exc})"[:2000])


def checked_output(tool: RegisteredTool, result: ToolResult) -> ToolResult:
    """``result`` itself, or an ``error`` result when it passed without a ``structured`` value matching the tool's
    output schema."""
    validator = tool.output_validator
    if validator is None or result.status != "passed":
        return result
    if result.structured is None:
        why = f"Tool '{tool.name}' declares an output schema but its result carries no structured value."
        cut = result.meta(TRUNCATED_KEY)
        if cut is not None and "structured" in cut:
            why += f" It was larger than {OUTPUT_LIMIT_KEY} and was dropped: {cut}."
    else:
        errors = validator.errors(result.structured)
        if not errors:
            return result
        problems = "; ".join(f"{e.path}: {e.message}" if e.path else e.message for e in errors[:10])
        why = f"Tool '{tool.name}' returned a result that does not match its output schema: {problems}"
    return replace(ToolResult.error(why[:4000]), metadata=[("output_schema", "mismatch"), *result.metadata])
