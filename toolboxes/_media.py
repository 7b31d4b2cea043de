"""Media types: what the leading bytes of some content show, whether they match a declared type, and which class
(images, audio, files) a type belongs to. Pure functions, shared by the toolboxes (which label what they return) and
the supervisor (which checks every attachment again before storing it).

The types are the seed's ``MediaType`` (``ImageType``, ``AudioType``, ``VideoType``, ``ApplicationType``,
``TextSubtype``) plus their common aliases. A type is **checked by its leading bytes**:

- binary types by their signature (PNG, JPEG, GIF, WebP, MPEG audio (ID3 or a frame sync), WAV, Ogg, AAC (ADTS),
  FLAC, MP4/MOV (``ftyp`` box), WebM (EBML), AVI, PDF, ZIP);
- text types (``text/*``, JSON, XML, SVG) by being UTF-8 without NUL bytes; JSON must also parse, XML must start
  like XML, SVG must be XML-ish text whose root element is ``<svg`` (after an optional XML declaration, comments
  and whitespace) and must hold nothing active: no ``<script``, no ``<foreignObject``, no ``on...=`` event
  attribute, no ``javascript:`` URL and no ``<!DOCTYPE``/``<!ENTITY`` (entity expansion). An SVG with any of these is
  refused rather than cleaned: a client may render an SVG as a document, where scripts run;
- ``application/octet-stream`` and types this module does not know match anything (an opaque blob; it is
  delivered as a blob with its declared type, never as an image or audio).
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "IMAGE_TYPES",
    "MediaClass",
    "canonical",
    "class_of",
    "file_media_type",
    "is_textual",
    "mismatch",
    "sniff",
    "sniff_file",
]

MediaClass = Literal["images", "audio", "files"]

#: Aliases mapped to the type they are checked as.
_ALIASES = {
    "image/jpg": "image/jpeg",
    "audio/mp3": "audio/mpeg",
    "audio/x-wav": "audio/wav",
    "audio/wave": "audio/wav",
    "audio/x-flac": "audio/flac",
    "audio/x-aac": "audio/aac",
    "video/x-msvideo": "video/avi",
    "video/msvideo": "video/avi",
    "text/xml": "application/xml",
    "audio/x-m4a": "audio/mp4",
    "application/x-zip-compressed": "application/zip",
}
#: Images that reach a model or a client as image content: seed 000's attachment types (the ``murmur:tool`` world's
#: ``attachment.media-type``). An SVG is passed as what it is, a text document (``image/svg+xml``), never as an image.
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
_TEXT_TYPES = ("application/json", "application/xml", "image/svg+xml")
_SVG_ACTIVE = re.compile(
    rb"<\s*script|<\s*foreignobject|\son[a-z]+\s*=|javascript\s*:|<!doctype|<!entity", re.IGNORECASE
)
_XML_PROLOG = re.compile(rb"^\s*(<\?xml[^>]*\?>\s*)?(<!--.*?-->\s*)*", re.DOTALL)


def _riff(data: bytes, kind: bytes) -> bool:
    return len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == kind


def _mpeg_audio(data: bytes) -> bool:
    return data.startswith(b"ID3") or (
        len(data) >= 2 and data[0] == 0xFF and (data[1] & 0xE0) == 0xE0 and (data[1] & 0x06) != 0
    )


def _adts(data: bytes) -> bool:
    return data.startswith(b"ADIF") or (len(data) >= 2 and data[0] == 0xFF and (data[1] & 0xF6) == 0xF0)


def _ftyp(data: bytes) -> bool:
    return len(data) >= 12 and data[4:8] == b"ftyp"


_SIGNATURES: dict[str, Callable[[bytes], bool]] = {
    "image/png": lambda b: b.startswith(b"\x89PNG\r\n\x1a\n"),
    "image/jpeg": lambda b: b.startswith(b"\xff\xd8\xff"),
    "image/gif": lambda b: b.startswith((b"GIF87a", b"GIF89a")),
    "image/webp": lambda b: _riff(b, b"WEBP"),
    "audio/mpeg": _mpeg_audio,
    "audio/wav": lambda b: _riff(b, b"WAVE"),
    "audio/ogg": lambda b: b.startswith(b"OggS"),
    "audio/aac": _adts,
    "audio/flac": lambda b: b.startswith(b"fLaC"),
    "audio/mp4": _ftyp,
    "audio/webm": lambda b: b.startswith(b"\x1aE\xdf\xa3"),
    "video/mp4": _ftyp,
    "video/quicktime": lambda b: _ftyp(b) or (len(b) >= 8 and b[4:8] in (b"moov", b"mdat", b"wide", b"free")),
    "video/webm": lambda b: b.startswith(b"\x1aE\xdf\xa3"),
    "video/ogg": lambda b: b.startswith(b"OggS"),
    "video/avi": lambda b: _riff(b, b"AVI "),
    "application/pdf": lambda b: b.startswith(b"%PDF-"),
    "application/zip": lambda b: b.startswith((b"PK\x03\x04", b"PK\x05\x06")),
}
_SNIFF_ORDER = (
    "image/png",
    "image/jpeg",
    "image/gif",
    "image/webp",
    "application/pdf",
    "application/zip",
    "audio/flac",
    "audio/wav",
    "video/avi",
    "video/webm",
    "audio/ogg",
    "video/mp4",
    "audio/mpeg",
    "audio/aac",
)


def canonical(media_type: str) -> str:
    """The type ``media_type`` is checked as: lower case, parameters dropped, aliases resolved."""
    base = media_type.split(";", 1)[0].strip().lower()
    return _ALIASES.get(base, base)


def is_textual(media_type: str) -> bool:
    """Text types: delivered as text (``text/*``, JSON, XML, SVG)."""
    t = canonical(media_type)
    return (
        t.startswith("text/")
        or t in _TEXT_TYPES
        or t.endswith("+json")
        or (t.endswith("+xml") and t != "image/svg+xml")
    )


def class_of(media_type: str) -> MediaClass:
    """Which policy limit applies (``context.<class>.max_bytes``): images (the image types a client shows as
    images), audio, or files (everything else)."""
    t = canonical(media_type)
    if t in IMAGE_TYPES:
        return "images"
    if t.startswith("audio/") and t in _SIGNATURES:
        return "audio"
    return "files"


def _text(data: bytes) -> str | None:
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _svg_problem(data: bytes) -> str | None:
    if _text(data) is None:
        return "it is not UTF-8 text"
    rest = data[_XML_PROLOG.match(data).end() :]  # type: ignore[union-attr]
    if not re.match(rb"<svg[\s>/]", rest):
        return "its root element is not <svg>"
    if (active := _SVG_ACTIVE.search(data)) is not None:
        return (
            f"it holds active content ({active.group(0).decode(errors='replace').strip()!r}): SVG with scripts, "
            "event handlers, foreignObject, javascript: URLs or DTDs is refused"
        )
    return None


def mismatch(media_type: str, data: bytes) -> str | None:
    """Why ``data`` is not ``media_type`` (``None``: it is). Looks at the whole of a text type (UTF-8, JSON parses,
    SVG root and no active content) and at the leading bytes of a binary one."""
    t = canonical(media_type)
    if t == "image/svg+xml":
        return _svg_problem(data)
    if is_textual(t):
        text = _text(data)
        if text is None:
            return "it is not UTF-8 text (or holds NUL bytes)"
        if t == "application/json" or t.endswith("+json"):
            try:
                json.loads(text)
            except (ValueError, RecursionError) as exc:
                return f"it is not JSON ({str(exc)[:80]})"
        if t == "application/xml" and not text.lstrip().startswith("<"):
            return "it does not start like XML"
        return None
    check = _SIGNATURES.get(t)
    if check is None or check(data[:64]):
        return None  # application/octet-stream and unknown types: an opaque blob
    actual = sniff(data[:64])
    return f"its leading bytes are not {t}" + (f" (they look like {actual})" if actual else "")


def sniff(head: bytes) -> str | None:
    """The type the leading bytes of some content show (``None``: no signature; see :func:`sniff_file`)."""
    for t in _SNIFF_ORDER:
        if _SIGNATURES[t](head):
            return t
    return None


#: Text types a file's name tells apart when its content is text (the seed's ``TextSubtype``, JSON, XML).
_TEXT_BY_EXTENSION = {
    "csv": "text/csv",
    "html": "text/html",
    "htm": "text/html",
    "css": "text/css",
    "md": "text/markdown",
    "markdown": "text/markdown",
    "xml": "application/xml",
    "json": "application/json",
    "txt": "text/plain",
}


def _extension(name: str) -> str:
    base = name.rsplit("/", 1)[-1]
    stem, dot, ext = base.rpartition(".")
    return ext.lower() if dot and stem else ""


def sniff_file(data: bytes) -> str:
    """The type of a whole file's content alone: :func:`file_media_type` without a name, and
    ``application/octet-stream`` for content of no known type."""
    return file_media_type(data, "") or "application/octet-stream"


def file_media_type(data: bytes, name: str) -> str | None:
    """The type a user expects of a file named ``name`` holding ``data`` (``None``: none of the seed's types).

    The content decides: a signature (a ``.png`` holding a GIF is a GIF; the name never overrides the bytes), else
    SVG, else text. The name refines only what the content cannot tell: an ISO media file is QuickTime
    (``video/quicktime``) by its ``qt`` brand or a ``.mov`` name, audio by a ``.m4a`` name, else ``video/mp4``; text
    is ``text/csv``, ``text/html``, ``text/css``, ``text/markdown``, ``application/xml`` or ``application/json`` by
    its extension when it is that (XML starts like XML, JSON parses), else JSON when it parses as an object or
    array, else ``text/plain``. Binary content without a known signature is ``None`` (attach-file's
    ``UnsupportedFileTypeError``)."""
    ext = _extension(name)
    found = sniff(data[:64])
    if found is None and _SIGNATURES["video/quicktime"](data[:64]):
        found = "video/quicktime"  # a QuickTime file from before the ftyp box
    if found == "video/mp4":
        if data[8:12] == b"qt  " or ext == "mov":
            return "video/quicktime"
        if data[8:12] in (b"M4A ", b"M4B ") or ext == "m4a":
            return "audio/mp4"
    if found is not None:
        return found
    if _text(data) is None:
        return None
    if re.match(rb"<svg[\s>/]", data[_XML_PROLOG.match(data).end() :]):  # type: ignore[union-attr]
        return "image/svg+xml"  # active content or not: mismatch() then refuses what must be refused
    by_name = _TEXT_BY_EXTENSION.get(ext)
    if by_name is not None and mismatch(by_name, data) is None:
        return by_name
    if mismatch("application/json", data) is None and data.strip()[:1] in (b"{", b"["):
        return "application/json"
    return "text/plain"
