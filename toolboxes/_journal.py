"""Crash-safe edits of a file in place, with a journal in the toolbox's own state folder.

An agent's file granted alone (``FileExactly ./package.yaml``) cannot be replaced by rename: that needs a new file
in its directory, which the kernel's rules do not grant and must not. So an edit rewrites the file in place, and the
new content is first made durable elsewhere, in the toolbox's state folder, which the worker always may write:

1. the journal ``<journal_dir>/<id>.journal`` gets a header line (JSON: the target's canonical path, the new size,
   its sha256, whether the write creates the file) and the new content; fsync of the file and of the folder;
2. the target is opened (never following a symlink), overwritten from offset 0, truncated to the new size and
   fsynced;
3. the journal is removed.

A worker killed in step 1 leaves the target untouched and an incomplete journal (its content does not match its
header), which :func:`recover` discards. Killed in step 2, the target may hold a mix; :func:`recover`, at the next
start of the toolbox, writes the journal's content into it again (the replay is idempotent). Killed in step 3, the
replay rewrites the same content. So after the next start the target holds its old or its new content, never a mix.
The replay goes through the same FileSandbox check as the edit (``allowed``), so a journal can never make the
toolbox write where its sandbox does not allow.

The file keeps its inode, owner, mode and hard links (a rename would give it the worker's uid and lose them).
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ._atomic import fsync_dir
from ._test_pause import pause_point

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["JOURNAL_SUFFIX", "JournalReport", "recover", "write_in_place"]

JOURNAL_SUFFIX = ".journal"
_MAX_HEADER = 64 * 1024


@dataclass(frozen=True)
class JournalReport:
    """What :func:`recover` did with one journal: ``action`` is ``replayed``, ``discarded`` or ``refused``."""

    journal: str
    action: str
    target: str
    reason: str = ""


def _pwrite_all(fd: int, view: memoryview, offset: int) -> None:
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done:], offset + done)


def _overwrite(path: str, content: bytes, *, create_mode: int | None, pause: bool, exclusive: bool = False) -> None:
    flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    if create_mode is not None:
        flags |= os.O_CREAT | (os.O_EXCL if exclusive else 0)
    fd = os.open(path, flags, create_mode if create_mode is not None else 0o644)
    try:
        view = memoryview(content)
        half = len(view) // 2 if pause else len(view)
        _pwrite_all(fd, view[:half], 0)
        if pause:
            os.fsync(fd)
            pause_point("in-place-write")  # the test hook: killed here, the file holds a mix
        _pwrite_all(fd, view[half:], half)
        os.ftruncate(fd, len(view))
        os.fsync(fd)
    finally:
        os.close(fd)


def write_in_place(path: str, content: bytes, journal_dir: str, *, create_mode: int | None = None) -> None:
    """Give the file ``path`` (canonical, already allowed) the content ``content``, crash-safely (module docstring).

    ``create_mode``: create the file, with these permission bits (it must not exist yet: ``FileExistsError``).
    Otherwise the file must exist.

    Raises:
        OSError: the journal or the target cannot be written (the journal is then removed: nothing to replay).
    """
    os.makedirs(journal_dir, mode=0o700, exist_ok=True)
    journal = os.path.join(journal_dir, uuid.uuid4().hex + JOURNAL_SUFFIX)
    header = (
        json.dumps(
            {
                "path": path,
                "size": len(content),
                "sha256": hashlib.sha256(content).hexdigest(),
                "create_mode": create_mode,
            }
        ).encode()
        + b"\n"
    )
    fd = os.open(journal, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(header)
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        fsync_dir(journal_dir)
        _overwrite(path, content, create_mode=create_mode, pause=True, exclusive=True)
    except BaseException:
        _remove(journal, journal_dir)
        raise
    _remove(journal, journal_dir)


def _remove(journal: str, journal_dir: str) -> None:
    try:
        os.unlink(journal)
    except FileNotFoundError:
        return
    fsync_dir(journal_dir)


def _read_journal(journal: str) -> tuple[dict[str, object], bytes] | str:
    """The header and content of a complete journal, or why it is not one."""
    with open(journal, "rb") as f:
        raw = f.read()
    line, sep, content = raw.partition(b"\n")
    if not sep or len(line) > _MAX_HEADER:
        return "its header is incomplete"
    try:
        header = json.loads(line)
    except ValueError:
        return "its header is not JSON"
    if not (
        isinstance(header, dict)
        and isinstance(header.get("path"), str)
        and os.path.isabs(header["path"])
        and header.get("size") == len(content)
        and header.get("sha256") == hashlib.sha256(content).hexdigest()
    ):
        return "its content is incomplete (the write stopped before the journal was durable)"
    mode = header.get("create_mode")
    if mode is not None and not (isinstance(mode, int) and 0 <= mode <= 0o7777):
        return "its header is malformed"
    return header, content


def recover(journal_dir: str, allowed: Callable[[str, int], bool]) -> list[JournalReport]:
    """Finish or discard every journal in ``journal_dir`` (at a toolbox's start, before any call).

    ``allowed(path, size)`` is the toolbox's FileSandbox check for writing ``size`` bytes to ``path``; a journal whose
    target it refuses is discarded. Never raises for a bad journal: each gets a report.
    """
    reports: list[JournalReport] = []
    try:
        names = sorted(os.listdir(journal_dir))
    except FileNotFoundError:
        return reports
    for name in names:
        if not name.endswith(JOURNAL_SUFFIX):
            continue
        journal = os.path.join(journal_dir, name)
        try:
            parsed = _read_journal(journal)
        except OSError as exc:
            reports.append(JournalReport(journal, "refused", "", f"it cannot be read: {exc.strerror or exc}"))
            continue
        if isinstance(parsed, str):
            _remove(journal, journal_dir)
            reports.append(JournalReport(journal, "discarded", "", parsed))
            continue
        header, content = parsed
        target = str(header["path"])
        mode = header.get("create_mode")
        if not allowed(target, len(content)):
            _remove(journal, journal_dir)
            reports.append(JournalReport(journal, "refused", target, "the file sandbox does not allow the target"))
            continue
        try:
            _overwrite(target, content, create_mode=mode if isinstance(mode, int) else None, pause=False)
        except OSError as exc:
            _remove(journal, journal_dir)
            reports.append(
                JournalReport(journal, "refused", target, f"the target cannot be written: {exc.strerror or exc}")
            )
            continue
        _remove(journal, journal_dir)
        reports.append(JournalReport(journal, "replayed", target))
    return reports
