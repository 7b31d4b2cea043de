"""The one result type of every tool call (seed 000's ``tool-result``).

``status`` is ``passed`` (the tool ran and succeeded), ``failed`` (the tool ran and reports failure: non-zero exit,
HTTP 4xx/5xx, SQL error) or ``error`` (it could not run: validation, refusal by policy, timeout, crash, protocol
violation). ``data`` is the text the model sees; ``structured`` carries the same data as a JSON value when the tool
produced JSON (``data`` then holds its serialisation). ``metadata`` is a list of string pairs with the reserved keys
``continuation_id``, ``state_effect``, ``resource_id`` and ``transient``. ``attachments`` name media (images,
audio, any other file) by a path relative to the worker's work folder; the supervisor checks and stores them
(``supervisor/calls/_attachments.py``). ``links`` are resource links an MCP server returned, passed on as they are.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from ._output_cap import JSON_PER_MSGPACK_BYTE
from ._protocol import json_problem

__all__ = ["Attachment", "ResourceLink", "Status", "ToolResult"]

#: Bounds on what a result from a worker may carry (a compromised worker could send megabytes of pairs).
MAX_METADATA_PAIRS = 256
MAX_METADATA_CHARS = 64 * 1024
MAX_ATTACHMENTS = 64
MAX_LINKS = 256
_LINK_FIELDS = ("uri", "name", "title", "description", "mime_type")
#: the text of :meth:`ToolResult.json` (one encoder: ``json.dumps`` with an option builds a new one per call)
_TEXT_ENCODER = json.JSONEncoder(ensure_ascii=False)
MAX_STRUCTURED_DEPTH = 128
MAX_STRUCTURED_NODES = 1_000_000

Status = Literal["passed", "failed", "error"]
STATUSES: tuple[str, ...] = ("passed", "failed", "error")
#: The keys a result may have on the wire.
_WIRE_KEYS = frozenset(
    {"status", "summary", "data", "data_path", "truncated", "metadata", "attachments", "structured", "links"}
)


@dataclass(frozen=True)
class Attachment:
    """Media a tool returns: ``path`` relative to the work folder, or ``sha256`` once the supervisor stored it.
    ``name``: a file name to show (optional); ``uri``: the URI an MCP server gave an embedded resource (optional)."""

    media_type: str
    path: str
    sha256: str | None = None
    size: int | None = None
    name: str | None = None
    uri: str | None = None


@dataclass(frozen=True)
class ResourceLink:
    """A link to a resource (MCP ``resource_link``): passed on, never fetched."""

    uri: str
    name: str
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None

    @classmethod
    def from_wire(cls, data: Any) -> ResourceLink:
        if not (
            isinstance(data, dict)
            and isinstance(data.get("uri"), str)
            and isinstance(data.get("name"), str)
            and set(data) <= set(_LINK_FIELDS)
            and all(data.get(k) is None or (isinstance(data[k], str) and len(data[k]) <= 8192) for k in _LINK_FIELDS)
        ):
            raise ValueError(
                "result links must be maps with string uri and name (and optional title, description, "
                "mime_type) of at most 8192 characters"
            )
        return cls(**data)


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
    links: list[ResourceLink] = field(default_factory=list)
    #: ``(data, summary, structured, n)``: each of these parts, as :func:`~toolboxes._output_cap.cap_output`
    #: measures it (the texts' UTF-8, the structured value's compact JSON), is at most ``n`` bytes, known without
    #: measuring (:meth:`json` and :meth:`from_wire` set it); it speaks only for parts that are still these very
    #: objects. Never compared, and not copied by ``dataclasses.replace`` (which makes a new result).
    parts_within: tuple[str | None, str | None, Any, int] | None = field(
        default=None, init=False, repr=False, compare=False
    )

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
        text = _TEXT_ENCODER.encode(value)
        result = cls(status, summary=summary, data=text, structured=value, **kw)
        # the compact JSON of ``value`` is ``text`` less the spaces after its separators: no larger (4: UTF-8's most)
        result.parts_within = (text, summary, value, 4 * max(len(text), len(summary) if summary else 0))
        return result

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
            out["attachments"] = [{k: v for k, v in a.__dict__.items() if v is not None} for a in self.attachments]
        if self.structured is not None:
            out["structured"] = self.structured
        if self.links:
            out["links"] = [{k: v for k, v in link.__dict__.items() if v is not None} for link in self.links]
        return out

    @classmethod
    def from_wire(cls, data: Any, frame_bytes: int | None = None) -> ToolResult:
        """Validate untrusted wire data into a result; raises ``ValueError`` saying what is wrong (the first
        problem found). ``frame_bytes``: the size of the msgpack frame ``data`` was decoded from (it bounds the
        parts: :attr:`parts_within`)."""
        if not isinstance(data, dict):
            raise ValueError("a result must be a map")
        get = data.get
        status = get("status")
        if status not in STATUSES:
            raise ValueError(f"result status must be one of {', '.join(STATUSES)}, not {status!r}")
        summary, text, data_path = get("summary"), get("data"), get("data_path")
        if not (type(summary) in _TEXT_TYPES and type(text) in _TEXT_TYPES and type(data_path) in _TEXT_TYPES):
            for key, value in (("summary", summary), ("data", text), ("data_path", data_path)):
                if value is not None and not isinstance(value, str):  # (a subclass of str is a string too)
                    raise ValueError(f"result {key} must be a string")
        raw_metadata = get("metadata")  # (absent or empty: nothing to check, the common case; so for the lists below)
        metadata = _metadata(raw_metadata) if raw_metadata else []
        raw_attachments = get("attachments")
        attachments = _attachments(raw_attachments) if raw_attachments else []
        raw_links = get("links")
        if raw_links and (not isinstance(raw_links, list) or len(raw_links) > MAX_LINKS):
            raise ValueError(f"result links must be a list of at most {MAX_LINKS}")
        links = [ResourceLink.from_wire(link) for link in raw_links] if raw_links else []
        structured = get("structured")
        if structured is not None:
            # NaN and infinities are allowed (a Lua script may return math.huge); frontends spell them.
            problem, _ = json_problem(
                structured, max_depth=MAX_STRUCTURED_DEPTH, max_nodes=MAX_STRUCTURED_NODES, finite=False
            )
            if problem:
                raise ValueError(f"result structured value {problem}")
        if not _WIRE_KEYS.issuperset(data):
            unknown = set(data) - _WIRE_KEYS
            raise ValueError(f"result has unknown keys: {', '.join(sorted(map(str, unknown)))}")
        result = cls(
            status=status,
            summary=summary,
            data=text,
            data_path=data_path,
            truncated=bool(get("truncated", False)),
            metadata=metadata,
            attachments=attachments,
            structured=structured,
            links=links,
        )
        if frame_bytes is not None:
            result.parts_within = (text, summary, structured, JSON_PER_MSGPACK_BYTE * frame_bytes)
        return result


#: the exact types a text field of a result may have without a closer look (a subclass of str takes the long way)
_TEXT_TYPES = frozenset({str, type(None)})


def _metadata(raw_metadata: Any) -> list[tuple[str, str]]:
    """A result's ``metadata`` from the wire, checked; raises ``ValueError`` saying what is wrong."""
    if not isinstance(raw_metadata, list) or len(raw_metadata) > MAX_METADATA_PAIRS:
        raise ValueError(f"result metadata must be a list of at most {MAX_METADATA_PAIRS} pairs")
    metadata: list[tuple[str, str]] = []
    chars = 0
    for pair in raw_metadata:
        # msgpack's pairs are lists of two exact strings: looked up, not asked (anything else takes the long way)
        if not ((type(pair) is list or isinstance(pair, list | tuple)) and len(pair) == 2):
            raise ValueError("result metadata must be a list of [string, string] pairs")
        key, value = pair
        if not ((type(key) is str or isinstance(key, str)) and (type(value) is str or isinstance(value, str))):
            raise ValueError("result metadata must be a list of [string, string] pairs")
        chars += len(key) + len(value)
        if chars > MAX_METADATA_CHARS:
            raise ValueError(f"result metadata holds more than {MAX_METADATA_CHARS} characters")
        metadata.append((key, value))
    return metadata


def _attachments(raw_attachments: Any) -> list[Attachment]:
    """A result's ``attachments`` from the wire, checked; raises ``ValueError`` saying what is wrong."""
    attachments: list[Attachment] = []
    if not isinstance(raw_attachments, list) or len(raw_attachments) > MAX_ATTACHMENTS:
        raise ValueError(f"result attachments must be a list of at most {MAX_ATTACHMENTS}")
    for a in raw_attachments:
        if not (
            isinstance(a, dict)
            and isinstance(a.get("media_type"), str)
            and isinstance(a.get("path"), str)
            and len(a["media_type"]) <= 255
            and len(a["path"]) <= 4096
        ):
            raise ValueError("result attachments must be maps with string media_type and path")
        sha256, size = a.get("sha256"), a.get("size")
        if not (sha256 is None or (isinstance(sha256, str) and len(sha256) == 64)) or not (
            size is None or (isinstance(size, int) and not isinstance(size, bool))
        ):
            raise ValueError("result attachment sha256 must be 64 hex digits and size an integer")
        name, uri = a.get("name"), a.get("uri")
        if not all(v is None or (isinstance(v, str) and len(v) <= 4096) for v in (name, uri)):
            raise ValueError("result attachment name and uri must be strings of at most 4096 characters")
        # The supervisor stores each attachment itself and replaces sha256 and size; a worker's claim is
        # never used to read a file.
        attachments.append(Attachment(a["media_type"], a["path"], sha256, size, name, uri))
    return attachments
