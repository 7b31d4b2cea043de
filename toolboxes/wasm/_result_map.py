"""``murmur:tool/run@0.2.0`` ``tool-result`` -> the project's :class:`ToolResult`, field by field.

=====================  ==================================================================================
tool-result            ToolResult
=====================  ==================================================================================
``status``             ``status`` (``passed`` / ``failed`` / ``error``)
``summary``            ``summary``
``data``               ``data`` (when it is JSON text the model sees it as is; nothing is re-encoded)
``data-path``          ``data_path``: a path relative to the work folder (an absolute guest path beneath the
                       work folder is made relative)
``truncated``          ``truncated``
``metadata``           ``metadata``, in order, reserved keys (``continuation_id``, ``state_effect``,
                       ``resource_id``, ``transient``) included; the seed's first-wins rule is the reader's
``attachments``        ``attachments`` (``media-type``, ``path`` relative to the work folder); the supervisor
                       opens, checks and stores each, as for every toolbox
=====================  ==================================================================================

What the wire to the supervisor cannot carry (more pairs or characters of metadata than
:data:`toolboxes._result.MAX_METADATA_PAIRS`/``CHARS``, more than ``MAX_ATTACHMENTS`` attachments, an over-long
path or media type) makes the call an ``error`` saying so, or (attachments) drops the extra ones with the same
``[attachment ... refused: ...]`` note the supervisor adds; a worker never sends a result the supervisor would
treat as a protocol violation.
"""

from __future__ import annotations

import os
from typing import Any

from .._result import MAX_ATTACHMENTS, MAX_METADATA_CHARS, MAX_METADATA_PAIRS, STATUSES, Attachment, ToolResult

__all__ = ["to_tool_result"]

_MAX_MEDIA_TYPE = 255
_MAX_PATH = 4096


def _relative(path: str, workdir: str) -> str:
    """``path`` as the component named it, made relative to the work folder when it is an absolute guest path
    beneath it (the work folder is preopened at its own path). Anything else is left for the supervisor to
    refuse."""
    if os.path.isabs(path) and path.startswith(workdir.rstrip("/") + "/"):
        return path[len(workdir.rstrip("/")) + 1 :]
    return path


def _field(item: Any, name: str) -> Any:
    """A record's field, from the plain map an executor sends or from wasmtime's ``Record`` (attributes)."""
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


def to_tool_result(value: Any, workdir: str, tool: str) -> ToolResult:
    """Map the record the component returned: a map of its WIT field names (as an executor sends it, see
    ``._executor.plain``) or wasmtime's ``Record``."""
    fields = value if isinstance(value, dict) else vars(value) if hasattr(value, "__dict__") else {}
    status = fields.get("status")
    if status not in STATUSES:
        return ToolResult.error(f"{tool}: the component returned a status {status!r}, not one of {STATUSES}")
    metadata: list[tuple[str, str]] = [(str(k), str(v)) for k, v in fields.get("metadata") or []]
    if len(metadata) > MAX_METADATA_PAIRS or sum(len(k) + len(v) for k, v in metadata) > MAX_METADATA_CHARS:
        return ToolResult.error(
            f"{tool}: the component returned more metadata than a result may carry (at most "
            f"{MAX_METADATA_PAIRS} pairs and {MAX_METADATA_CHARS} characters)"
        )
    attachments: list[Attachment] = []
    notes: list[str] = []
    for i, item in enumerate(fields.get("attachments") or []):
        media_type, path = str(_field(item, "media-type") or ""), str(_field(item, "path") or "")
        path = _relative(path, workdir)
        if i >= MAX_ATTACHMENTS:
            notes.append(f"[attachment {path[:200]!r} refused: more than {MAX_ATTACHMENTS} attachments]")
        elif len(media_type) > _MAX_MEDIA_TYPE or len(path) > _MAX_PATH:
            notes.append(f"[attachment {path[:200]!r} refused: its path or media type is too long]")
        else:
            attachments.append(Attachment(media_type, path))
    data = fields.get("data")
    if notes:
        data = "\n".join([data, *notes] if data else notes)
        metadata += [("attachment_refused", n) for n in notes]
    data_path = fields.get("data-path")
    return ToolResult(
        status=status,
        summary=fields.get("summary"),
        data=data,
        data_path=_relative(data_path, workdir) if data_path is not None else None,
        truncated=bool(fields.get("truncated")),
        metadata=metadata,
        attachments=attachments,
    )
