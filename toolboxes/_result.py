"""The one result type of every tool call (seed 000's ``tool-result``).

``status`` is ``passed`` (the tool ran and succeeded), ``failed`` (the tool ran and reports failure: non-zero exit,
HTTP 4xx/5xx, SQL error) or ``error`` (it could not run: validation, refusal by policy, timeout, crash, protocol
violation). ``data`` is the text the model sees; ``structured`` carries the same data as a JSON value when the tool
produced JSON (``data`` then holds its serialisation). ``metadata`` is a list of string pairs with the reserved keys
``continuation_id``, ``state_effect``, ``resource_id`` and ``transient``. ``attachments`` name images by a path
relative to the worker's work folder; the supervisor validates and stores them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Attachment", "Status", "ToolResult"]

Status = Literal["passed", "failed", "error"]
STATUSES: tuple[str, ...] = ("passed", "failed", "error")


@dataclass(frozen=True)
class Attachment:
    """An image a tool returns: ``path`` relative to the work folder, or ``sha256`` once the supervisor stored it."""

    media_type: str
    path: str
    sha256: str | None = None
    size: int | None = None


@dataclass
class ToolResult:
    """The outcome of one tool call. Build with :meth:`passed`, :meth:`failed`, :meth:`error` or :meth:`json`."""

    status: Status
    summary: str | None = None
    data: str | None = None
    data_path: str | None = None
    truncated: bool = False
    metadata: list[tuple[str, str]] = field(default_factory=list)
    attachments: list[Attachment] = field(default_factory=list)
    structured: Any = None

    # -- constructors ---------------------------------------------------------------------------------------
    @classmethod
    def passed(cls, data: str | None = None, summary: str | None = None, **kw: Any) -> ToolResult:
        return cls("passed", summary=summary, data=data, **kw)

    @classmethod
    def failed(cls, data: str | None = None, summary: str | None = None, **kw: Any) -> ToolResult:
        return cls("failed", summary=summary, data=data, **kw)

    @classmethod
    def error(cls, message: str, summary: str | None = None, **kw: Any) -> ToolResult:
        """A call that could not run: ``message`` (what was refused or failed, and why) is the data the model sees;
        ``summary`` defaults to it."""
        return cls("error", summary=summary if summary is not None else message, data=message, **kw)

    @classmethod
    def json(cls, value: Any, status: Status = "passed", summary: str | None = None, **kw: Any) -> ToolResult:
        """A result whose data is the JSON value ``value`` (text in ``data``, the value in ``structured``)."""
        return cls(status, summary=summary, data=json.dumps(value, ensure_ascii=False), structured=value, **kw)

    # -- metadata -------------------------------------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        """The first value of ``key`` in ``metadata`` (the seed's rule for repeated reserved keys), or ``None``."""
        for k, v in self.metadata:
            if k == key:
                return v
        return None

    def with_meta(self, key: str, value: str) -> ToolResult:
        """Append a metadata pair and return ``self`` (chainable)."""
        self.metadata.append((key, value))
        return self

    # -- wire form --------------------------------------------------------------------------------------------
    def to_wire(self) -> dict[str, Any]:
        """Plain data for msgpack/JSON; keys as in seed 000 (``data_path``, ``media_type``)."""
        out: dict[str, Any] = {"status": self.status}
        if self.summary is not None:
            out["summary"] = self.summary
        if self.data is not None:
            out["data"] = self.data
        if self.data_path is not None:
            out["data_path"] = self.data_path
        if self.truncated:
            out["truncated"] = True
        if self.metadata:
            out["metadata"] = [[k, v] for k, v in self.metadata]
        if self.attachments:
            out["attachments"] = [
                {k: v for k, v in a.__dict__.items() if v is not None} for a in self.attachments
            ]
        if self.structured is not None:
            out["structured"] = self.structured
        return out

    @classmethod
    def from_wire(cls, data: Any) -> ToolResult:
        """Validate untrusted wire data into a result; raises ``ValueError`` saying what is wrong."""
        if not isinstance(data, dict):
            raise ValueError("a result must be a map")
        status = data.get("status")
        if status not in STATUSES:
            raise ValueError(f"result status must be one of {', '.join(STATUSES)}, not {status!r}")
        for key in ("summary", "data", "data_path"):
            if data.get(key) is not None and not isinstance(data[key], str):
                raise ValueError(f"result {key} must be a string")
        metadata: list[tuple[str, str]] = []
        for pair in data.get("metadata") or []:
            if not (isinstance(pair, list | tuple) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
                raise ValueError("result metadata must be a list of [string, string] pairs")
            metadata.append((pair[0], pair[1]))
        attachments: list[Attachment] = []
        for a in data.get("attachments") or []:
            if not (isinstance(a, dict) and isinstance(a.get("media_type"), str) and isinstance(a.get("path"), str)):
                raise ValueError("result attachments must be maps with string media_type and path")
            attachments.append(Attachment(a["media_type"], a["path"], a.get("sha256"), a.get("size")))
        unknown = set(data) - {"status", "summary", "data", "data_path", "truncated", "metadata", "attachments",
                               "structured"}
        if unknown:
            raise ValueError(f"result has unknown keys: {', '.join(sorted(map(str, unknown)))}")
        return cls(
            status=status,
            summary=data.get("summary"),
            data=data.get("data"),
            data_path=data.get("data_path"),
            truncated=bool(data.get("truncated", False)),
            metadata=metadata,
            attachments=attachments,
            structured=data.get("structured"),
        )
