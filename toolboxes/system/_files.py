"""The System toolbox's file capabilities: ``attach-file`` and ``list-directory``.

Every path goes through the toolbox's FileSandbox twice: the in-worker check (:class:`toolboxes._paths.PathGate`,
which gives the predicate exactly, including what Landlock cannot say) and the kernel's Landlock rules behind it.
Relative paths start at the agent file's folder (the rule every toolbox that takes a path shares), and messages
show a path as resolved. A refused path gets the same answer whether or not it exists.

``attach-file`` reads at most ``fsbMaxFileSize`` bytes, decides the media type as a user expects
(``toolboxes/_media.file_media_type``: the content's signature, refined by the name only where content cannot tell:
QuickTime, ``text/csv``, ``text/html``, ``text/css``, ``text/markdown``, ``application/xml``, JSON), copies the file
into the work folder and returns it as an attachment of that type, named by the file's name (the supervisor then
checks it again, caps it by its class's ``context.*.max_bytes`` and delivers it as what it is: image, audio or
embedded resource). Binary content of no known type is refused with the seed's ``UnsupportedFileTypeError``. The
result has no data of its own (its summary says what was attached): a worker calling it through the portal (Lua's
``tools.call``) gets the seed's ``MediaAttachment`` with the bytes in base64 (``supervisor.calls.media_response``).

``list-directory`` lists the entries the predicate allows, and every entry of a directory a ``DirectoryExactly``
names (its entries' names are what it grants: ``PathGate.lists_all``), at most ``MAX_ENTRIES``
(then ``truncated``). It descends (``recursive``) only into directories the predicate allows.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import stat
from typing import Any

from sandbox import evaluate

from .._atomic import atomic_write
from .._media import file_media_type, sniff_file
from .._paths import PathGate
from .._result import Attachment, ToolResult

__all__ = ["MAX_ENTRIES", "attach_file", "file_gate", "list_directory", "sniff_media_type"]

MAX_ENTRIES = 2000


def sniff_media_type(head: bytes) -> str:
    """The media type some content shows (``application/octet-stream`` when unknown)."""
    return sniff_file(head)


def file_gate(config: dict[str, Any]) -> PathGate:
    """The System toolbox's FileSandbox (default ``AlwaysDeny``) bound to the agent file's folder."""
    return PathGate(config.get("FileSandbox"), (config.get("policy") or {}).get("base_dir"))


def attach_file(args: dict[str, Any], gate: PathGate, workdir: str) -> ToolResult:
    path = args.get("filepath") or args.get("path")
    if not isinstance(path, str):
        return ToolResult.error("attach-file needs 'filepath': the path of the image to attach")
    check = gate.check(path, for_write=False)
    if not check.allowed:
        return ToolResult.error(check.message)
    shown = gate.shown(path)
    try:
        fd = os.open(check.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return ToolResult.failed(f"attach-file: cannot open {shown}: {exc.strerror}")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return ToolResult.failed(f"attach-file: {shown} is not a regular file")
        limit = gate.sandbox.max_file_size
        if limit is not None and st.st_size > limit:
            return ToolResult.error(
                f"attach-file: {shown} is {st.st_size} bytes, more than the sandbox's fsbMaxFileSize of {limit}"
            )
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 20):
            size += len(chunk)
            if limit is not None and size > limit:
                return ToolResult.error(f"attach-file: {shown} grew past fsbMaxFileSize ({limit} bytes)")
            chunks.append(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    found = file_media_type(data, os.path.basename(check.path))
    if found is None:
        return ToolResult.error(
            f"UnsupportedFileTypeError: {shown} is none of the media types attach-file supports (images, audio, "
            "video, PDF, ZIP, JSON, XML, text: its content shows no known signature and is not text)"
        )
    media_type = found
    digest = hashlib.sha256(data).hexdigest()
    rel = os.path.join("attachments", digest)
    target = os.path.join(workdir, rel)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    atomic_write(target, data, 0o644)
    summary = f"attached {os.path.basename(check.path)} ({media_type}, {len(data)} bytes)"
    attachment = Attachment(media_type, rel, name=os.path.basename(check.path))
    return (  # no data: the attachment is the answer (the seed's MediaResponse); the summary says what it is
        ToolResult.passed(None, summary=summary, attachments=[attachment])
        .with_meta("state_effect", "read")
        .with_meta("resource_id", f"file:{check.path}")
    )


def _entry(path: str, name: str) -> dict[str, Any] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    kind = (
        "directory"
        if stat.S_ISDIR(st.st_mode)
        else "symlink"
        if stat.S_ISLNK(st.st_mode)
        else "file"
        if stat.S_ISREG(st.st_mode)
        else "other"
    )
    modified = dt.datetime.fromtimestamp(st.st_mtime, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"name": name, "type": kind, "size": st.st_size if kind == "file" else 0, "modified": modified}


def list_directory(args: dict[str, Any], gate: PathGate) -> ToolResult:
    path = args.get("path")
    if not isinstance(path, str):
        return ToolResult.error("list-directory needs 'path': the directory to list")
    recursive = bool(args.get("recursive", False))
    include_hidden = bool(args.get("include_hidden", False))
    check = gate.check(path, for_write=False, limit_size=False)
    if not check.allowed:
        return ToolResult.error(check.message)
    predicate = gate.sandbox.predicate
    root = check.path
    if not os.path.isdir(root):
        return ToolResult.failed(f"list-directory: {gate.shown(path)} is not a directory")
    entries: list[dict[str, Any]] = []
    truncated = False
    stack = [root]
    while stack and not truncated:
        current = stack.pop()
        try:
            names = sorted(os.listdir(current))
        except OSError:
            continue
        whole = gate.lists_all(current)  # allowed itself: checked before it was listed or stacked
        for name in names:
            if not include_hidden and name.startswith("."):
                continue
            full = os.path.join(current, name)
            allowed = evaluate(predicate, full, for_write=False).allowed
            if not (allowed or whole):
                continue
            entry = _entry(full, os.path.relpath(full, root))
            if entry is None:
                continue
            if len(entries) >= MAX_ENTRIES:
                truncated = True
                break
            entries.append(entry)
            if recursive and entry["type"] == "directory" and allowed:
                stack.append(full)
    out = {"path": path, "entries": entries, "total": len(entries)}
    return (
        ToolResult.json(out, summary=f"{len(entries)} entries", truncated=truncated)
        .with_meta("state_effect", "read")
        .with_meta("resource_id", f"file:{root}")
    )
