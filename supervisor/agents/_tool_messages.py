"""What a sub-agent's loop tells the model and its caller between steps (pure): a tool's result as the text of a
tool message (status, summary, data cut to :data:`MAX_TOOL_MESSAGE`, attachments and links named), and the progress
update of a step."""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolboxes import ProgressUpdate

from ._model_media import attachment_label

if TYPE_CHECKING:
    from toolboxes import ToolResult

    from ._chat_reply import ChatReply

__all__ = ["MAX_TOOL_MESSAGE", "step_progress", "tool_message"]

#: Longest tool output given back to the model in one tool message.
MAX_TOOL_MESSAGE = 32 * 1024


def step_progress(slug: str, step: int, max_steps: int, reply: ChatReply) -> ProgressUpdate:
    """The progress update of a sub-agent's step: the step (of at most ``max_steps``) and what the model did."""
    what = ("calls " + ", ".join(c.name for c in reply.tool_calls)) if reply.tool_calls else "answered"
    return ProgressUpdate(step, max_steps, f"agent {slug}: step {step}: {what}")


def tool_message(result: ToolResult) -> str:
    """The text a model gets for a tool result: status, summary, data (cut to :data:`MAX_TOOL_MESSAGE`)."""
    data = result.data or ""
    if len(data) > MAX_TOOL_MESSAGE:
        data = data[:MAX_TOOL_MESSAGE] + f"\n[... {len(data) - MAX_TOOL_MESSAGE} more characters cut]"
    head = f"status: {result.status}"
    if result.summary and result.summary != data:
        head += f"\nsummary: {result.summary}"
    if result.truncated:
        head += "\n(the tool's output was truncated)"
    if result.data_path:
        head += f"\ndata_path: {result.data_path}"
    for a in result.attachments:
        head += f"\nattachment: {attachment_label(a)}"
    for link in result.links:
        head += f"\nresource link: {link.name} <{link.uri}>"
    return f"{head}\n\n{data}" if data else head
