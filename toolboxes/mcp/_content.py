"""From an MCP ``CallToolResult`` to the one result type (seed 000).

- ``text`` blocks are the result's ``data`` (joined by newlines);
- ``image`` blocks are written to the worker's work folder and returned as attachments (png, jpeg, gif and webp;
  the supervisor checks their bytes and size); another image type, or base64 that does not decode, becomes a note
  in ``data``;
- ``audio`` blocks become a note (media the result type does not carry);
- ``resource_link`` blocks and embedded ``resource`` blocks become text (a text resource with its text, a blob
  resource as a note with its size);
- ``structuredContent`` is the result's ``structured`` value; when the server sent no text block, ``data`` is its
  JSON text;
- ``isError: true`` makes the result ``failed`` (the tool ran and reports failure).

``data`` past the policy's ``output_bytes`` is cut and ``truncated`` is set. Pure but for :class:`AttachmentSink`,
which writes the image files.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import secrets
from typing import Any

from .._result import Attachment, ToolResult

__all__ = ["AttachmentSink", "to_result"]

MEDIA_DIR = "mcp-media"
_IMAGE_TYPES = {"image/png": ".png", "image/jpeg": ".jpg", "image/gif": ".gif", "image/webp": ".webp"}


class AttachmentSink:
    """Writes images of results under ``<workdir>/mcp-media/`` and names them relative to the work folder."""

    def __init__(self, workdir: str) -> None:
        self.workdir = workdir

    def save(self, data: bytes, media_type: str, stem: str) -> str:
        folder = os.path.join(self.workdir, MEDIA_DIR)
        os.makedirs(folder, mode=0o755, exist_ok=True)
        name = f"{stem}-{secrets.token_hex(4)}{_IMAGE_TYPES[media_type]}"
        fd = os.open(os.path.join(folder, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return f"{MEDIA_DIR}/{name}"


def _resource_text(block: dict[str, Any]) -> str:
    res = block.get("resource")
    if not isinstance(res, dict):
        return "[embedded resource without contents]"
    uri = res.get("uri", "?")
    if isinstance(res.get("text"), str):
        return f"[resource {uri}]\n{res['text']}"
    blob = res.get("blob")
    size = len(blob) * 3 // 4 if isinstance(blob, str) else 0
    return f"[binary resource {uri} ({res.get('mimeType') or 'unknown type'}, about {size} bytes) not shown]"


def _link_text(block: dict[str, Any]) -> str:
    parts = [f"[resource link] {block.get('name') or block.get('title') or ''}: {block.get('uri', '?')}".strip()]
    if block.get("mimeType"):
        parts.append(f"({block['mimeType']})")
    if block.get("description"):
        parts.append(f"- {block['description']}")
    return " ".join(parts)


def to_result(result: dict[str, Any], *, tool: str, stem: str, sink: AttachmentSink, output_cap: int) -> ToolResult:
    """Map a ``tools/call`` result. ``stem`` names image files; never raises for anything the server sent (an
    image that cannot be stored becomes a note)."""
    content = result.get("content")
    if not isinstance(content, list):
        content = []
    texts: list[str] = []
    attachments: list[Attachment] = []
    for i, block in enumerate(content):
        if not isinstance(block, dict):
            texts.append(f"[content block {i} is not an object]")
            continue
        kind = block.get("type")
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "image":
            media = str(block.get("mimeType") or "")
            if media not in _IMAGE_TYPES:
                texts.append(f"[image of type {media or 'unknown'} not attached: only png, jpeg, gif and webp are]")
                continue
            try:
                data = base64.b64decode(str(block.get("data", "")), validate=True)
                path = sink.save(data, media, f"{stem}-{i}")
            except (binascii.Error, ValueError):
                texts.append(f"[image {i} not attached: its data is not valid base64]")
                continue
            except OSError as exc:
                texts.append(f"[image {i} not attached: the work folder refused it: {exc.strerror or exc}]")
                continue
            attachments.append(Attachment(media, path))
            texts.append(f"[{media} image attached: {path}]")
        elif kind == "audio":
            texts.append(f"[audio of type {block.get('mimeType') or 'unknown'} not shown: results carry no audio]")
        elif kind == "resource":
            texts.append(_resource_text(block))
        elif kind == "resource_link":
            texts.append(_link_text(block))
        else:
            texts.append(f"[content of type {kind!r} not shown]")
    structured = result.get("structuredContent")
    failed = result.get("isError") is True
    if texts:
        data = "\n".join(texts)
    elif structured is not None:
        data = json.dumps(structured, ensure_ascii=False)
    else:
        data = ""
    truncated = False
    raw = data.encode()
    if len(raw) > output_cap:
        data = raw[:output_cap].decode("utf-8", "ignore")
        truncated = True
    status = "failed" if failed else "passed"
    summary = f"{tool}: the tool reports an error" if failed else None
    return ToolResult(status, summary=summary, data=data, truncated=truncated, attachments=attachments,
                      structured=structured)
