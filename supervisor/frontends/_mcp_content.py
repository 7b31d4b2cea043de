"""From a tool result to MCP content blocks (the MCP frontend's ``CallToolResult``), every media kind as what it is.

- ``data`` -> a ``text`` block (``summary`` when there is no data); ``structured`` JSON -> ``structuredContent``
  (an object; other JSON values are wrapped as ``{"result": value}``); status ``failed``/``error`` ->
  ``isError: true``; ``truncated`` -> a closing text block saying so.
- Each stored attachment, by the class of its media type (``toolboxes/_media.class_of``):
  images (seed 000's: png, jpeg, gif, webp) -> ``image`` blocks; audio -> ``audio`` blocks; anything else (SVG,
  PDF, video, binary, text files) -> an embedded ``resource``: ``text`` for text types (UTF-8, checked at store
  time), else ``blob`` (base64), always with ``mimeType``. The resource's ``uri`` is the one an MCP server gave it, else
  ``attachment:///<sha256>/<name>`` (the store's key; the name when the tool gave one).
- Resource links -> ``resource_link`` blocks, passed on as the tool (an MCP server) sent them.

Pure but for ``read_attachment``, which returns the stored bytes of an attachment.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from toolboxes import class_of, is_textual

if TYPE_CHECKING:
    from collections.abc import Callable

    from toolboxes import Attachment, ResourceLink, ToolResult

__all__ = ["attachment_block", "attachment_uri", "link_block", "result_to_mcp"]


def attachment_uri(a: Attachment) -> str:
    """The URI an embedded resource of this attachment carries."""
    if a.uri:
        return a.uri
    name = quote(a.name or a.path.rsplit("/", 1)[-1] or "attachment", safe="")
    return f"attachment:///{a.sha256}/{name}"


def attachment_block(a: Attachment, data: bytes) -> dict[str, Any]:
    """The content block of one stored attachment (see the module docstring)."""
    media_class = class_of(a.media_type)
    encoded = base64.b64encode(data).decode("ascii")
    if media_class == "images":
        return {"type": "image", "data": encoded, "mimeType": a.media_type}
    if media_class == "audio":
        return {"type": "audio", "data": encoded, "mimeType": a.media_type}
    resource: dict[str, Any] = {"uri": attachment_uri(a), "mimeType": a.media_type}
    if is_textual(a.media_type):
        resource["text"] = data.decode("utf-8", errors="replace")
    else:
        resource["blob"] = encoded
    return {"type": "resource", "resource": resource}


def link_block(link: ResourceLink) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "resource_link", "uri": link.uri, "name": link.name}
    for key, value in (("title", link.title), ("description", link.description), ("mimeType", link.mime_type)):
        if value is not None:
            block[key] = value
    return block


def result_to_mcp(result: ToolResult, read_attachment: Callable[[Attachment], bytes]) -> dict[str, Any]:
    """The ``CallToolResult`` for one tool result."""
    content: list[dict[str, Any]] = []
    text = result.data if result.data is not None else result.summary
    if text:
        content.append({"type": "text", "text": text})
    for a in result.attachments:
        try:
            data = read_attachment(a)
        except (OSError, KeyError):
            content.append({"type": "text", "text": f"[attachment {a.path} is no longer available]"})
            continue
        content.append(attachment_block(a, data))
    content.extend(link_block(link) for link in result.links)
    if result.truncated:
        content.append({"type": "text", "text": "[output truncated]"})
    if not content:
        content.append({"type": "text", "text": ""})
    out: dict[str, Any] = {"content": content, "isError": result.status != "passed"}
    if result.structured is not None:
        out["structuredContent"] = (
            result.structured if isinstance(result.structured, dict) else {"result": result.structured}
        )
    return out
