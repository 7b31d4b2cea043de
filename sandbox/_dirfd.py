"""Root-side file operations on trees a worker can write, through directory fds that never follow a link.

The supervisor runs as root and prepares folders that workers then write: their work folders, the ``tmp`` in them,
their toolbox state folders. A worker can put anything in such a tree, a symbolic link where a folder was, a
dangling link, a FIFO, and swap entries while root works on them (``renameat2(RENAME_EXCHANGE)``). Root must never
act on such a tree by path. This module is the one place that does these operations, and it does them only this
way:

- the walk starts at an *anchor*, a directory the operator chose and only root can write (the state dir), opened
  once; every component below it is opened with ``openat(O_DIRECTORY | O_NOFOLLOW)`` relative to its parent's fd
  (the equivalent of ``openat2`` with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS``: names are single components, never
  ``..``, and a link is never followed);
- folders are made with ``mkdirat`` and changed with ``fchown``/``fchmod`` on the fd that was opened, so the inode
  changed is the one checked, whatever was renamed meanwhile;
- :func:`ensure_dir` replaces a link or other non-folder it finds where a folder should be (unlinking the entry
  itself, never its target), and takes an existing folder only when it already belongs to the uid it hands it to:
  anything else is refused with :class:`UnsafeTreeError`;
- :func:`reown_tree` (a toolbox whose uid changed) walks with fds, enters a folder only through ``O_NOFOLLOW``
  and only when it is the inode just listed and on the same file system, and changes only entries that belong to
  the uid the tree is taken from: a file planted from elsewhere keeps its owner.

- ``sandbox._path_walk`` walks a whole path the same way: ``open_rule_path`` opens a Landlock rule's path for the
  launcher (root), following only links root owns outside the worker's writable trees; ``resolve_path`` resolves
  a path for the supervisor, every component judged by the caller (no link a worker could write is followed).

The rest of the supervisor uses only this module for these trees (``tests/test_exports.py`` keeps it so).
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ._errors import SandboxError
from ._libc import LIBC

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = [
    "ReownCount",
    "UnsafeTreeError",
    "ensure_dir",
    "ensure_path",
    "open_anchor",
    "open_dir",
    "reown_tree",
    "seal_tree",
]

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: How often :func:`ensure_dir` replaces what a worker keeps putting back before it gives up.
_REPLACE_TRIES = 8
#: Deeper folders than this are left as they are by :func:`reown_tree` (fds stay bounded).
MAX_DEPTH = 256


_AT_EMPTY_PATH = 0x1000


class UnsafeTreeError(SandboxError):
    """A folder in a worker-writable tree cannot be prepared safely (what was found, and what to do)."""


def _name(name: str) -> str:
    if not name or "/" in name or name in (".", "..") or "\0" in name:
        raise ValueError(f"not a single path component: {name!r}")
    return name


def open_anchor(path: str, *, mode: int | None = None) -> int:
    """Open the directory ``path`` (an operator-chosen path only root can write, such as the state dir), made
    with its parents when missing and set to ``mode`` when given; the fd is the caller's to close."""
    if mode is not None:
        os.makedirs(path, mode=mode, exist_ok=True)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    if mode is not None and stat.S_IMODE(os.fstat(fd).st_mode) != mode:
        os.fchmod(fd, mode)
    return fd


def open_dir(parent_fd: int, name: str) -> int:
    """Open the folder ``name`` in ``parent_fd`` without following a link (``OSError`` ELOOP/ENOTDIR otherwise)."""
    return os.open(_name(name), _DIR_FLAGS, dir_fd=parent_fd)


def _describe(st: os.stat_result) -> str:
    kinds = {
        stat.S_IFLNK: "a symbolic link",
        stat.S_IFREG: "a file",
        stat.S_IFIFO: "a FIFO",
        stat.S_IFSOCK: "a socket",
        stat.S_IFCHR: "a device",
        stat.S_IFBLK: "a device",
    }
    return kinds.get(stat.S_IFMT(st.st_mode), "not a folder")


def ensure_dir(
    parent_fd: int, name: str, *, mode: int, uid: int | None = None, gid: int | None = None, where: str = ""
) -> int:
    """The folder ``name`` in ``parent_fd``, made if missing, owned by ``uid``:``gid`` (when given) with ``mode``;
    returns its fd (the caller closes it).

    A symbolic link (dangling or not), file, FIFO, socket or device found at ``name`` is removed (the entry itself)
    and a folder made in its place. An existing folder is taken as it is only when it belongs to ``uid`` already
    (or to this process when ``uid`` is ``None``); one of another owner is refused, never re-owned here (see
    :func:`reown_tree`). ``where`` names the path in error messages.

    Raises:
        UnsafeTreeError: another owner's folder is there, or a worker kept replacing the entry.
    """
    _name(name)
    label = where or name
    want = os.geteuid() if uid is None else uid
    for _ in range(_REPLACE_TRIES):
        made = False
        try:
            os.mkdir(name, 0o700, dir_fd=parent_fd)
            made = True
        except FileExistsError:
            pass
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
        except FileNotFoundError:
            continue  # removed between mkdirat and openat: once more
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            try:
                os.unlink(name, dir_fd=parent_fd)  # unlinkat without AT_REMOVEDIR: the link itself, never a folder
            except FileNotFoundError:
                pass
            except IsADirectoryError:
                pass  # swapped for a folder meanwhile: open it on the next round
            continue
        try:
            st = os.fstat(fd)
            if not made and st.st_uid != want:
                raise UnsafeTreeError(
                    f"{label} belongs to uid {st.st_uid}, not to uid {want} that it is prepared for; it is left "
                    "alone (nothing outside the worker's own folders is ever re-owned). Move it away and restart."
                )
            if uid is not None and gid is not None and (st.st_uid, st.st_gid) != (uid, gid):
                os.fchown(fd, uid, gid)
            if stat.S_IMODE(st.st_mode) != mode:
                os.fchmod(fd, mode)
            return fd
        except BaseException:
            os.close(fd)
            raise
    raise UnsafeTreeError(
        f"{label}: something kept replacing the folder while it was prepared "
        f"({_REPLACE_TRIES} tries); refusing to start this toolbox"
    )


def ensure_path(
    anchor_fd: int, parts: list[str], *, mode: int, uid: int | None = None, gid: int | None = None, where: str = ""
) -> int:
    """:func:`ensure_dir` for each component of ``parts`` in turn, from ``anchor_fd``; returns the last one's fd.

    Every component gets ``mode`` and ``uid``/``gid``: use it for folders of one owner (the ones above a worker's
    folder are root's: ``uid=None``).
    """
    fd = os.dup(anchor_fd)
    try:
        path = where
        for part in parts:
            path = os.path.join(path, part) if path else part
            child = ensure_dir(fd, part, mode=mode, uid=uid, gid=gid, where=path)
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise


@dataclass
class ReownCount:
    """What :func:`reown_tree` did: entries handed over, and entries it left (another owner, raced, too deep)."""

    changed: int = 0
    left: int = 0


@contextmanager
def _closing(fd: int) -> Iterator[int]:
    try:
        yield fd
    finally:
        os.close(fd)


def reown_tree(parent_fd: int, name: str, uid: int, gid: int) -> ReownCount:
    """Hand the folder ``name`` in ``parent_fd`` and what is below it to ``uid``:``gid``, when the folder belongs to
    another uid (the previous owner). Only entries of that previous owner change; symbolic links change themselves;
    other file systems are not entered. Nothing happens when the folder is missing, already ``uid``'s, or root's
    (root's files are never handed to a worker).

    Safe against a process of the previous owner renaming and swapping entries meanwhile: every change goes
    through an fd of the inode that was checked (folders are opened ``O_DIRECTORY | O_NOFOLLOW``, everything else
    ``O_PATH | O_NOFOLLOW`` and changed with ``fchownat(fd, "", AT_EMPTY_PATH)``: the entry itself, a link
    included, never what it names).
    """
    try:
        top = os.open(_name(name), _DIR_FLAGS, dir_fd=parent_fd)
    except FileNotFoundError:
        return ReownCount()
    count = ReownCount()
    with _closing(top):
        st = os.fstat(top)
        if st.st_uid in (uid, 0):  # already its own; or root's, which is never handed to a worker (see ensure_dir)
            return count
        _reown_entries(top, st.st_uid, uid, gid, st.st_dev, 0, count)
        os.fchown(top, uid, gid)
        count.changed += 1
    return count


def _entries(dfd: int) -> Iterator[tuple[str, os.stat_result]]:
    """Each entry of the directory ``dfd`` with its no-follow stat; one removed meanwhile is skipped."""
    with os.scandir(dfd) as it:
        names = [e.name for e in it]
    for name in names:
        try:
            yield name, os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            continue


def _reown_entries(dfd: int, old: int, uid: int, gid: int, dev: int, depth: int, count: ReownCount) -> None:
    for entry, st in _entries(dfd):
        if st.st_uid != old or st.st_dev != dev:
            count.left += 1
            continue
        if stat.S_ISDIR(st.st_mode):
            if depth >= MAX_DEPTH:
                count.left += 1
                continue
            try:
                child = os.open(entry, _DIR_FLAGS, dir_fd=dfd)
            except OSError:
                count.left += 1  # swapped for a link or removed meanwhile
                continue
            with _closing(child):
                cst = os.fstat(child)
                if (cst.st_dev, cst.st_ino) != (st.st_dev, st.st_ino) or cst.st_uid != old:
                    count.left += 1
                    continue
                _reown_entries(child, old, uid, gid, dev, depth + 1, count)
                os.fchown(child, uid, gid)
                count.changed += 1
            continue
        _reown_one(dfd, entry, st, old, uid, gid, count)


def _fchown_path_fd(fd: int, uid: int, gid: int) -> None:
    """``fchownat(fd, "", uid, gid, AT_EMPTY_PATH)``: change the inode an ``O_PATH`` fd holds (a link itself)."""
    if LIBC.fchownat(fd, b"", uid, gid, _AT_EMPTY_PATH) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _reown_one(dfd: int, entry: str, st: os.stat_result, old: int, uid: int, gid: int, count: ReownCount) -> None:
    """A non-folder: opened ``O_PATH | O_NOFOLLOW`` (the entry itself, even a link, with no side effect), checked
    and changed through that fd, so a swap between the listing and the change changes nothing of another owner."""
    try:
        fd = os.open(entry, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    except OSError:
        count.left += 1
        return
    with _closing(fd):
        fst = os.fstat(fd)
        if fst.st_uid != old or stat.S_ISDIR(fst.st_mode) or fst.st_dev != st.st_dev:
            count.left += 1
            return
        _fchown_path_fd(fd, uid, gid)
        count.changed += 1


def seal_tree(parent_fd: int, name: str) -> int:
    """Make the folder ``name`` in ``parent_fd`` and everything below it readable by every uid and writable by its
    owner only: folders and executable files 0755, other files 0644; links are left alone, never followed, other
    file systems not entered. Cheap when the folder is 0755 already (sealed before). Returns how many entries
    changed."""
    top = os.open(_name(name), _DIR_FLAGS, dir_fd=parent_fd)
    with _closing(top):
        st = os.fstat(top)
        if stat.S_IMODE(st.st_mode) == 0o755:
            return 0
        changed = _seal_entries(top, st.st_dev, 0)
        os.fchmod(top, 0o755)
        return changed + 1


def _seal_entries(dfd: int, dev: int, depth: int) -> int:
    changed = 0
    for entry, st in _entries(dfd):
        if st.st_dev != dev or not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
            continue
        is_dir = stat.S_ISDIR(st.st_mode)
        if is_dir and depth >= MAX_DEPTH:
            continue
        flags = _DIR_FLAGS if is_dir else os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
        try:
            fd = os.open(entry, flags, dir_fd=dfd)
        except OSError:
            continue
        with _closing(fd):
            fst = os.fstat(fd)
            if (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino):
                continue
            if is_dir:
                changed += _seal_entries(fd, dev, depth + 1)
            mode = 0o755 if is_dir or fst.st_mode & 0o100 else 0o644
            if stat.S_IMODE(fst.st_mode) != mode:
                os.fchmod(fd, mode)
                changed += 1
    return changed
