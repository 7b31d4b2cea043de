"""From an MCP ``CallToolResult`` to the one result type (seed 000), every kind of content passed on as what it is.

- ``text`` blocks are the result's ``data`` (joined by newlines);
- ``image`` and ``audio`` blocks, and embedded ``resource`` blocks (``blob`` or ``text``), are written to the
  worker's work folder and returned as attachments of their ``mimeType`` (the supervisor checks their bytes and
  size, and the frontend delivers them as image, audio and embedded resource content again; a resource keeps its
  ``uri``). Base64 that does not decode, or a block without a usable type, becomes a note in ``data``;
- ``resource_link`` blocks are the result's ``links``, passed on as resource links (never fetched);
- ``structuredContent`` is the result's ``structured`` value; when the server sent no text block, ``data`` is its
  JSON text;
- ``isError: true`` makes the result ``failed`` (the tool ran and reports failure).

Each attachment leaves a short line in ``data`` (``[audio/wav attached]``), so a model reading only text knows it is
there. ``data`` past the policy's ``output_bytes`` is cut and ``truncated`` is set. Pure but for
:class:`AttachmentSink`, which writes the files.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import secrets
from typing import Any

from .._media import canonical
from .._result import Attachment, ResourceLink, Status, ToolResult

__all__ = ["AttachmentSink", "to_result"]

MEDIA_DIR = "mcp-media"
_MEDIA_TYPE = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]{0,126}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}$")
_MAX_TEXT = 8192


class AttachmentSink:
    """Writes media of results under ``<workdir>/mcp-media/`` and names them relative to the work folder."""

    def __init__(self, workdir: str) -> None:
        self.workdir = workdir

    def save(self, data: bytes, media_type: str, stem: str) -> str:
        folder = os.path.join(self.workdir, MEDIA_DIR)
        os.makedirs(folder, mode=0o755, exist_ok=True)
        name = f"{stem}-{secrets.token_hex(4)}"
        fd = os.open(os.path.join(folder, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return f"{MEDIA_DIR}/{name}"


def _media_type(value: Any, default: str | None) -> str | None:
    if value is None or value == "":
        return default
    if not isinstance(value, str):
        return None
    media = canonical(value)
    return media if _MEDIA_TYPE.match(media) else None


def _short(value: Any) -> str | None:
    return value[:_MAX_TEXT] if isinstance(value, str) else None


def _link(block: dict[str, Any]) -> ResourceLink | str:
    uri, name = block.get("uri"), block.get("name")
    if not isinstance(uri, str) or not uri or len(uri) > _MAX_TEXT:
        return "[resource link without a usable uri dropped]"
    return ResourceLink(
        uri,
        _short(name) or _short(block.get("title")) or uri[:_MAX_TEXT],
        _short(block.get("title")),
        _short(block.get("description")),
        _media_type(block.get("mimeType"), None),
    )


def _media_of(block: dict[str, Any], kind: str) -> tuple[bytes, str, str | None, str | None] | str:
    """``(bytes, media type, uri, name)`` of an image, audio or embedded resource block, or the note saying why not."""
    if kind == "resource":
        res = block.get("resource")
        if not isinstance(res, dict):
            return "[embedded resource without contents]"
        uri = res.get("uri") if isinstance(res.get("uri"), str) and len(res["uri"]) <= 4096 else None
        name = uri.rstrip("/").rsplit("/", 1)[-1][:255] if uri else None
        if isinstance(res.get("text"), str):
            media = _media_type(res.get("mimeType"), "text/plain")
            if media is None:
                return f"[resource {uri or '?'} not attached: its mimeType is not a media type]"
            return res["text"].encode("utf-8", errors="replace"), media, uri, name
        raw, media = res.get("blob"), _media_type(res.get("mimeType"), "application/octet-stream")
        what = f"resource {uri or '?'}"
    else:
        raw, media, uri, name = block.get("data"), _media_type(block.get("mimeType"), None), None, None
        what = kind
    if media is None:
        return f"[{what} not attached: it has no usable mimeType]"
    try:
        data = base64.b64decode(str(raw or ""), validate=True)
    except (binascii.Error, ValueError):
        return f"[{what} not attached: its data is not valid base64]"
    return data, media, uri, name


def to_result(result: dict[str, Any], *, tool: str, stem: str, sink: AttachmentSink, output_cap: int) -> ToolResult:
    """Map a ``tools/call`` result. ``stem`` names media files; never raises for anything the server sent (media that
    cannot be stored becomes a note)."""
    content = result.get("content")
    if not isinstance(content, list):
        content = []
    texts: list[str] = []
    attachments: list[Attachment] = []
    links: list[ResourceLink] = []
    for i, block in enumerate(content):
        if not isinstance(block, dict):
            texts.append(f"[content block {i} is not an object]")
            continue
        kind = block.get("type")
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind in ("image", "audio", "resource"):
            media = _media_of(block, kind)
            if isinstance(media, str):
                texts.append(media)
                continue
            data, media_type, uri, name = media
            try:
                path = sink.save(data, media_type, f"{stem}-{i}")
            except OSError as exc:
                texts.append(f"[{kind} {i} not attached: the work folder refused it: {exc.strerror or exc}]")
                continue
            attachments.append(Attachment(media_type, path, name=name, uri=uri))
            texts.append(f"[{media_type} attached{': ' + uri if uri else ''}]")
        elif kind == "resource_link":
            link = _link(block)
            if isinstance(link, str):
                texts.append(link)
            else:
                links.append(link)
                texts.append(f"[resource link {link.name}: {link.uri}]")
        else:
            texts.append(f"[content of type {kind!r} not shown]")
    structured = result.get("structuredContent")
    failed = result.get("isError") is True
    if texts:
        text = "\n".join(texts)
    elif structured is not None:
        text = json.dumps(structured, ensure_ascii=False)
    else:
        text = ""
    truncated = False
    raw = text.encode()
    if len(raw) > output_cap:
        text = raw[:output_cap].decode("utf-8", "ignore")
        truncated = True
    status: Status = "failed" if failed else "passed"
    summary = f"{tool}: the tool reports an error" if failed else None
    return ToolResult(
        status,
        summary=summary,
        data=text,
        truncated=truncated,
        attachments=attachments,
        structured=structured,
        links=links[:256],
    )
