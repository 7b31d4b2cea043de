"""Attachments (seed 000): media a tool returns by naming a file beneath its work folder.

The worker is untrusted, so the supervisor opens the file itself, beneath the worker's work folder only:
``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`` refuses any symlink, any ``..`` that
climbs out and any absolute path, and ``O_NOFOLLOW | O_NONBLOCK`` plus an ``fstat`` refuse anything but a regular
file (a FIFO cannot stall the supervisor). It then checks the content against the declared media type
(``toolboxes/_media.mismatch``: leading bytes of binary types, UTF-8/JSON/SVG rules for text types) and the size
against the limit of the type's class (``context.images``, ``context.audio``, ``context.files`` ``.max_bytes``) and
what is left of ``context.max_total_bytes`` for the result (all its attachments together: what a client gets inline
from one call is bounded, whatever the kind; ``limits.output_bytes`` bounds the text), and stores the bytes once, by
sha256, under ``<state_dir>/attachments/``. A refused attachment is dropped and a note saying why is added to the
result; the result's status never changes because of an attachment. Temporary files of a store interrupted by a kill
are removed when the store opens again.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import json
import os
import stat
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sandbox import RESOLVE_BENEATH, RESOLVE_NO_SYMLINKS, openat2
from toolboxes import atomic_write, canonical, class_of, mismatch, sniff, sweep_temporaries

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from toolboxes import Attachment, ToolResult

__all__ = [
    "MAX_WORKER_MEDIA_BYTES",
    "AttachmentRefused",
    "AttachmentStore",
    "media_response",
    "media_type_of",
    "open_beneath",
]

#: The most attachment bytes one portal reply to a worker carries (as base64, a third more); an attachment past
#: it comes without ``mediaBase64Data`` and with a ``note`` saying so.
MAX_WORKER_MEDIA_BYTES = 16 << 20


class AttachmentRefused(Exception):
    """An attachment the supervisor will not store; the message says why (it becomes the note)."""


def open_beneath(root: str, relpath: str) -> int:
    """Open ``relpath`` read-only beneath the directory ``root``, refusing symlinks and escapes; return the fd."""
    if "\x00" in relpath:
        raise AttachmentRefused("the path contains a NUL byte")
    if os.path.isabs(relpath):
        raise AttachmentRefused("the path must be relative to the work folder, not absolute")
    dirfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return openat2(
            dirfd, relpath, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
        )
    except OSError as exc:
        if exc.errno == errno.EXDEV:
            raise AttachmentRefused("the path leaves the work folder") from exc
        if exc.errno == errno.ELOOP:
            raise AttachmentRefused("the path goes through a symbolic link") from exc
        if exc.errno == errno.ENOENT:
            raise AttachmentRefused("the file does not exist in the work folder") from exc
        raise AttachmentRefused(f"the file cannot be opened: {exc.strerror}") from exc
    finally:
        os.close(dirfd)


def media_type_of(head: bytes) -> str | None:
    """The media type the leading bytes show (a signature), or ``None``."""
    return sniff(head)


class AttachmentStore:
    """Checks attachments and stores their bytes by sha256; ``limits`` maps a media class to its largest size."""

    def __init__(self, state_dir: str, limits: dict[str, int]) -> None:
        self.root = os.path.join(state_dir, "attachments")
        self.limits = dict(limits)
        if os.path.isdir(self.root):
            sweep_temporaries(self.root)  # a root-owned 0700 folder no worker can reach

    def path_of(self, sha256: str) -> str:
        return os.path.join(self.root, sha256)

    def read(self, attachment: Attachment) -> bytes:
        """The stored bytes of an attachment this store accepted."""
        if not attachment.sha256:
            raise KeyError("attachment was not stored")
        with open(self.path_of(attachment.sha256), "rb") as f:
            return f.read()

    def accept(
        self,
        workdir: str,
        attachment: Attachment,
        only: tuple[str, ...] | None = None,
        room: int | None = None,
        limits: Mapping[str, int] | None = None,
    ) -> Attachment:
        """Check and store one attachment (``only``: the media types the toolbox may attach; ``None``: any; ``room``:
        what is left of the result's ``context.max_total_bytes``, ``None``: no total; ``limits``: the running
        policy's, default the store's); raises :class:`AttachmentRefused`."""
        limits = self.limits if limits is None else limits
        media_type = canonical(attachment.media_type)
        if not media_type or "/" not in media_type:
            raise AttachmentRefused(f"{attachment.media_type!r} is not a media type")
        if only is not None and media_type not in only:
            raise AttachmentRefused(
                f"{attachment.media_type!r} is not an attachment type of this toolbox (the murmur:tool world's "
                f"attachments are images: {', '.join(only)})"
            )
        media_class = class_of(media_type)
        limit = limits[media_class]
        limit_name = f"the limit of {limit} for {media_class} (context.{media_class}.max_bytes)"
        if room is not None and room < limit:
            limit = room
            limit_name = (
                f"the {room} bytes left of the result's limit of {limits.get('total')} for all its "
                "attachments together (context.max_total_bytes)"
            )
        fd = open_beneath(workdir, attachment.path)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise AttachmentRefused("it is not a regular file")
            if st.st_size > limit:
                raise AttachmentRefused(f"it is {st.st_size} bytes, more than {limit_name}")
            chunks = []
            size = 0
            while chunk := os.read(fd, 1 << 20):
                size += len(chunk)
                if size > limit:
                    raise AttachmentRefused(f"it is more than {limit_name}")
                chunks.append(chunk)
        finally:
            os.close(fd)
        data = b"".join(chunks)
        problem = mismatch(media_type, data)
        if problem is not None:
            raise AttachmentRefused(f"it is not {media_type}: {problem}")
        digest = hashlib.sha256(data).hexdigest()
        target = self.path_of(digest)
        if not os.path.exists(target):
            os.makedirs(self.root, mode=0o700, exist_ok=True)
            # No fsync: this runs on the trio loop, and a store lost to a power cut is only a missing attachment.
            atomic_write(target, data, 0o600, fsync=False)
        return replace(attachment, media_type=media_type, sha256=digest, size=len(data))

    def store(
        self,
        workdir: str,
        result: ToolResult,
        *,
        only: tuple[str, ...] | None = None,
        limits: Mapping[str, int] | None = None,
    ) -> ToolResult:
        """Accept every attachment of ``result`` (``only``: the media types the toolbox may attach; ``limits``: the
        running policy's, default the store's); refused ones are replaced by a note. Status is unchanged."""
        limits = self.limits if limits is None else limits
        kept: list[Attachment] = []
        notes: list[str] = []
        total = limits.get("total")
        for a in result.attachments:
            try:
                room = None if total is None else total - sum(k.size or 0 for k in kept)
                kept.append(self.accept(workdir, a, only, room, limits))
            except AttachmentRefused as exc:
                notes.append(f"[attachment {a.path!r} refused: {exc}]")
            except OSError as exc:
                notes.append(f"[attachment {a.path!r} refused: {exc.strerror or exc}]")
        result.attachments = kept
        if notes:
            result.data = "\n".join([result.data, *notes] if result.data else notes)
            for n in notes:
                result.metadata.append(("attachment_refused", n))
        return result


def _media_attachment(a: Attachment, read: Callable[[Attachment], bytes], budget: list[int]) -> dict[str, Any]:
    part: dict[str, Any] = {"mediaMimeType": a.media_type}
    size = a.size if a.size is not None else 0
    if size > budget[0]:
        part["note"] = f"its {size} bytes are past what one reply to a worker carries ({MAX_WORKER_MEDIA_BYTES})"
    else:
        try:
            part["mediaBase64Data"] = base64.b64encode(read(a)).decode("ascii")
            budget[0] -= size
        except (OSError, KeyError):
            part["note"] = "its stored bytes are no longer available"
    part["mediaFilename"] = a.name or a.path.rsplit("/", 1)[-1]
    return part


def media_response(result: ToolResult, read: Callable[[Attachment], bytes]) -> ToolResult:
    """``result`` as a worker that called the tool through the portal gets it (a Lua ``tools.call``).

    With stored attachments and no structured value of its own, its data is the seed's ``UserToolResponse``
    carrying the bytes: a ``MediaResponse`` when the tool said nothing besides (no ``data``: the seed's
    ``MediaAttachment`` object ``{"mediaMimeType", "mediaBase64Data", "mediaFilename"}``, as the seed's attach-file
    returns), else a ``MixedResponse`` (a list of ``{"text": ...}`` and ``MediaAttachment`` parts). ``structured``
    holds the same value, so Lua sees a table. Any other result is returned unchanged. Frontends never get this
    form: their clients get the attachments as media content (``frontends/_mcp_content.py``)."""
    stored = [a for a in result.attachments if a.sha256]
    if not stored or result.structured is not None:
        return result
    budget = [MAX_WORKER_MEDIA_BYTES]
    parts = [_media_attachment(a, read, budget) for a in stored]
    value: Any = (
        parts[0]
        if result.data is None and len(parts) == 1
        else [
            *([{"text": result.data}] if result.data else []),
            *parts,
        ]
    )
    return replace(result, data=json.dumps(value), structured=value)
