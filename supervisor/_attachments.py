"""Attachments (seed 000): images a tool returns by naming a file beneath its work folder.

The worker is untrusted, so the supervisor opens the file itself, beneath the worker's work folder only:
``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`` refuses any symlink, any ``..`` that
climbs out and any absolute path, and ``O_NOFOLLOW | O_NONBLOCK`` plus an ``fstat`` refuse anything but a regular
file (a FIFO cannot stall the supervisor). It then checks that the leading bytes match the declared media type
(png, jpeg, gif, webp) and that the size is at most ``context.images.max_bytes``, and stores the bytes once, by
sha256, under ``<state_dir>/attachments/``. A refused attachment is dropped and a note saying why is added to the
result; the result's status never changes because of an attachment.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import os
import stat
from dataclasses import replace

from toolboxes._result import Attachment, ToolResult

__all__ = ["AttachmentRefused", "AttachmentStore", "media_type_of", "open_beneath"]

_SYS_OPENAT2 = 437  # same number on x86-64 and aarch64
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)


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
        how = _OpenHow(os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0,
                       _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS)
        fd = _libc.syscall(_SYS_OPENAT2, dirfd, relpath.encode(), ctypes.byref(how), ctypes.sizeof(how))
        if fd < 0:
            err = ctypes.get_errno()
            if err == errno.EXDEV:
                raise AttachmentRefused("the path leaves the work folder")
            if err == errno.ELOOP:
                raise AttachmentRefused("the path goes through a symbolic link")
            if err == errno.ENOENT:
                raise AttachmentRefused("the file does not exist in the work folder")
            raise AttachmentRefused(f"the file cannot be opened: {os.strerror(err)}")
        return fd
    finally:
        os.close(dirfd)


_MAGIC = {
    "image/png": lambda b: b.startswith(b"\x89PNG\r\n\x1a\n"),
    "image/jpeg": lambda b: b.startswith(b"\xff\xd8\xff"),
    "image/gif": lambda b: b.startswith((b"GIF87a", b"GIF89a")),
    "image/webp": lambda b: len(b) >= 12 and b[:4] == b"RIFF" and b[8:12] == b"WEBP",
}


def media_type_of(head: bytes) -> str | None:
    """The image media type the leading bytes show, or ``None``."""
    for media_type, check in _MAGIC.items():
        if check(head):
            return media_type
    return None


class AttachmentStore:
    """Validates attachments and stores their bytes by sha256."""

    def __init__(self, state_dir: str, max_bytes: int) -> None:
        self.root = os.path.join(state_dir, "attachments")
        self.max_bytes = max_bytes

    def path_of(self, sha256: str) -> str:
        return os.path.join(self.root, sha256)

    def read(self, attachment: Attachment) -> bytes:
        """The stored bytes of an attachment this store accepted."""
        if not attachment.sha256:
            raise KeyError("attachment was not stored")
        with open(self.path_of(attachment.sha256), "rb") as f:
            return f.read()

    def accept(self, workdir: str, attachment: Attachment) -> Attachment:
        """Validate and store one attachment; raises :class:`AttachmentRefused`."""
        if attachment.media_type not in _MAGIC:
            raise AttachmentRefused(f"media type {attachment.media_type!r} is not one of "
                                    f"{', '.join(_MAGIC)}")
        fd = open_beneath(workdir, attachment.path)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise AttachmentRefused("it is not a regular file")
            if st.st_size > self.max_bytes:
                raise AttachmentRefused(f"it is {st.st_size} bytes, more than the limit of {self.max_bytes}")
            chunks = []
            size = 0
            while chunk := os.read(fd, 1 << 20):
                size += len(chunk)
                if size > self.max_bytes:
                    raise AttachmentRefused(f"it is more than the limit of {self.max_bytes} bytes")
                chunks.append(chunk)
        finally:
            os.close(fd)
        data = b"".join(chunks)
        if not _MAGIC[attachment.media_type](data[:16]):
            actual = media_type_of(data[:16])
            raise AttachmentRefused(f"its bytes are not {attachment.media_type}"
                                    + (f" (they look like {actual})" if actual else ""))
        digest = hashlib.sha256(data).hexdigest()
        target = self.path_of(digest)
        if not os.path.exists(target):
            os.makedirs(self.root, mode=0o700, exist_ok=True)
            tmp = f"{target}.{os.getpid()}.tmp"
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, target)
        return replace(attachment, sha256=digest, size=len(data))

    def store(self, workdir: str, result: ToolResult) -> ToolResult:
        """Accept every attachment of ``result``; refused ones are replaced by a note. Status is unchanged."""
        kept: list[Attachment] = []
        notes: list[str] = []
        for a in result.attachments:
            try:
                kept.append(self.accept(workdir, a))
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
