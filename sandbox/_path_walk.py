"""Walking a whole path as root, one component at a time through directory fds that never follow a link unjudged.

The launcher (root) opens each Landlock rule's path this way (:func:`open_rule_path`), and the supervisor resolves a
path an agent file names this way (:func:`resolve_path`: an MCP server's ``node_modules/.bin`` link): every
component is opened with ``O_PATH | O_NOFOLLOW`` relative to its parent's fd, a link is followed only after the
caller's judge saw it (its text read through its own fd, so what is read is what was judged), ``..`` in a link's
text goes to the parent of the folder actually reached, and at most 40 links are followed. Nothing is opened by a
path a worker could have redirected; the folders themselves are ``sandbox._dirfd``'s.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ._dirfd import UnsafeTreeError

if TYPE_CHECKING:
    from collections.abc import Collection, Sequence

__all__ = ["Judge", "ResolvedPath", "open_rule_path", "resolve_named_path", "resolve_path", "trusted_links_judge"]

_MAX_LINKS = 40

#: Called for every component a walk meets (``path`` asked, the component's location, its ``lstat``), a link before
#: it is followed; raises :class:`UnsafeTreeError` to refuse the path.
Judge = Callable[[str, str, os.stat_result], None]


@dataclass(frozen=True)
class ResolvedPath:
    """Where a path leads (:func:`resolve_path`): its canonical form and the links met on the way."""

    canonical: str
    #: ``(location, owner uid)`` of each link followed, in order; locations are canonical up to the link
    links: tuple[tuple[str, int], ...] = ()
    #: the path leads to something that exists (``False`` only with ``missing_ok``: ``canonical`` is then the
    #: folder reached with the rest of the path applied to it as text, as ``os.path.realpath`` does)
    exists: bool = True
    #: every link followed is root's and lies in a folder only root can change (root's, writable by neither its
    #: group nor others unless sticky; or on a read-only mount, as a Kubernetes ConfigMap volume): where the path
    #: leads is root's choice alone (true when no link was followed)
    links_fixed: bool = True


def _only_root_changes(folder: int) -> bool:
    """Whether nobody but root can add, remove or rename entries of the folder open at ``folder``."""
    if os.fstatvfs(folder).f_flag & os.ST_RDONLY:
        return True
    st = os.fstat(folder)
    return st.st_uid == 0 and (not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or bool(st.st_mode & stat.S_ISVTX))


def _walk(path: str, judge: Judge, *, missing_ok: bool = False) -> tuple[int, ResolvedPath]:
    """An ``O_PATH`` fd of ``path`` and where it led, walked one component at a time through directory fds with
    ``O_NOFOLLOW``; ``judge`` sees every component (a link before it is followed, its text read through its own fd
    so that what is read is what was judged). ``..`` in a link's text goes to the parent of the folder reached.
    ``missing_ok``: a component that is missing (or a file where a folder is needed) ends the walk there: the fd is
    the folder reached and the rest of the path is applied to it as text (``ResolvedPath.exists`` false)."""
    if not path.startswith("/"):
        raise ValueError(f"not an absolute path: {path!r}")
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    done, pending = "/", [p for p in path.split("/") if p]
    links: list[tuple[str, int]] = []
    fixed = True
    try:
        while pending:
            name = pending.pop(0)
            if name == ".":
                continue
            flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_DIRECTORY if name == ".." else 0)
            try:
                child = os.open(name, flags, dir_fd=fd)
            except (FileNotFoundError, NotADirectoryError):
                if not missing_ok:
                    raise
                rest = os.path.normpath(os.path.join(done, name, *pending))
                return fd, ResolvedPath(rest, tuple(links), exists=False, links_fixed=fixed)
            location = os.path.dirname(done) if name == ".." else os.path.join(done, name)
            st = os.fstat(child)
            if stat.S_ISLNK(st.st_mode):
                try:
                    judge(path, location, st)
                    text = os.readlink("", dir_fd=child)
                finally:
                    os.close(child)
                links.append((location, st.st_uid))
                fixed = fixed and st.st_uid == 0 and _only_root_changes(fd)
                if len(links) > _MAX_LINKS:
                    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
                if text.startswith("/"):
                    os.close(fd)
                    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
                    done = "/"
                pending = [p for p in text.split("/") if p] + pending
                continue
            if pending and not stat.S_ISDIR(st.st_mode):
                os.close(child)
                if missing_ok:
                    rest = os.path.normpath(os.path.join(location, *pending))
                    return fd, ResolvedPath(rest, tuple(links), exists=False, links_fixed=fixed)
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), location)
            try:
                judge(path, location, st)
            except BaseException:
                os.close(child)
                raise
            os.close(fd)
            fd, done = child, location
        return fd, ResolvedPath(done, tuple(links), links_fixed=fixed)
    except BaseException:
        os.close(fd)
        raise


def open_rule_path(path: str, *, writable_trees: Sequence[str] = (), root_links_only: bool = True) -> int:
    """An ``O_PATH`` fd of ``path``, walked one component at a time through directory fds with ``O_NOFOLLOW``,
    following only the symlinks nobody but root could have put there (the caller closes the fd).

    A link met on the way is followed (its text read through its own fd, so what is read is what was opened) only
    when root owns it and it does not lie inside one of ``writable_trees`` (the trees the caller's worker may
    write); any other link is refused, as one a worker could have planted (a Landlock rule nested in a writable
    folder, swapped for a link to what the worker wants granted). ``..`` in a link's text goes to the parent of
    the folder actually reached. ``root_links_only`` ``False`` drops the owner test (a launcher that is not root
    runs its workers as its own uid, and in its user namespace root's files show the overflow uid: owners tell
    nothing apart there; the writable trees still do).

    Raises:
        FileNotFoundError: a component is missing (the caller decides whether that matters).
        UnsafeTreeError: a link that is not root's, or inside a writable tree (the message names both paths).
        OSError: anything else (``ENOTDIR``, ``ELOOP`` past 40 links).
    """

    def judge(asked: str, location: str, st: os.stat_result) -> None:
        if stat.S_ISLNK(st.st_mode):
            _judge_link(asked, location, st, writable_trees, root_links_only)

    return _walk(path, judge)[0]


def resolve_path(path: str, judge: Judge, *, missing_ok: bool = False) -> ResolvedPath:
    """Where ``path`` leads, walked as :func:`open_rule_path` walks (no link followed before ``judge`` saw it, every
    component seen by ``judge``): how the supervisor, as root, resolves a path an agent file names without being
    led by a link a worker planted (an MCP server's ``.bin`` link, ``plan/_mcp_executable.py``; every other path
    an agent file names, with :func:`trusted_links_judge`). ``missing_ok``: a missing component ends the walk and
    the rest is applied as text (what ``os.path.realpath`` gives a path that does not exist yet).

    Raises:
        FileNotFoundError: a component is missing (not with ``missing_ok``).
        UnsafeTreeError: ``judge`` refused a component.
        OSError: anything else (``ENOTDIR``, ``ELOOP`` past 40 links).
    """
    fd, resolved = _walk(path, judge, missing_ok=missing_ok)
    os.close(fd)
    return resolved


def trusted_links_judge(trusted: Collection[int]) -> Judge:
    """A judge for :func:`resolve_path` that follows a symbolic link only when a uid of ``trusted`` owns it (root and
    the owner of the file that names the path) and it lies in a folder only they can change (owned by one of them,
    writable by neither its group nor others, except a sticky folder, which keeps others' entries theirs): a link
    anyone else could have put (or moved) there is refused, the supervisor never lends its reach to it. Folders and
    files on the way are not judged (a data path may well lie in a folder workers write: the launcher refuses a
    link put there later, ``open_rule_path``). Stateful: one judge per walk."""
    folders: dict[str, os.stat_result] = {}

    def judge(asked: str, location: str, st: os.stat_result) -> None:
        if not stat.S_ISLNK(st.st_mode):
            if stat.S_ISDIR(st.st_mode):
                folders[location] = st
            return
        why = ""
        parent = os.path.dirname(location)
        folder = folders.get(parent)
        if st.st_uid not in trusted:
            why = f"is a symbolic link owned by uid {st.st_uid}, neither root nor the owner of the file naming it"
        elif folder is not None and folder.st_uid not in trusted:
            why = f"is a symbolic link in {parent}, which belongs to uid {folder.st_uid}"
        elif (
            folder is not None and folder.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not folder.st_mode & stat.S_ISVTX
        ):
            why = f"is a symbolic link in {parent}, which others may write (mode {stat.S_IMODE(folder.st_mode):04o})"
        if why:
            raise UnsafeTreeError(
                f"{asked}: {location} {why}; a link someone else could have put there is never followed by the "
                "supervisor. Name the path it leads to instead (or have root or the file's owner make the link)"
            )

    return judge


def resolve_named_path(path: str, trusted: Collection[int] | None) -> ResolvedPath:
    """Where ``path``, named by a config file, leads: walked by :func:`resolve_path` with ``missing_ok`` and
    :func:`trusted_links_judge` of ``trusted`` (root and the file's owner); ``None`` follows every link (a
    supervisor that is not root lends no privilege: its workers run as its own uid).

    Raises:
        UnsafeTreeError: a link ``trusted`` does not cover (the message names it and what to do).
        OSError: ``ELOOP`` past 40 links, a component that cannot be opened.
    """

    def accept(asked: str, location: str, st: os.stat_result) -> None:
        return None

    return resolve_path(path, accept if trusted is None else trusted_links_judge(trusted), missing_ok=True)


def _judge_link(
    path: str, location: str, st: os.stat_result, writable_trees: Sequence[str], root_links_only: bool
) -> None:
    if root_links_only and st.st_uid != 0:
        raise UnsafeTreeError(
            f"{path}: {location} is a symbolic link owned by uid {st.st_uid}, not root; a link a worker could have "
            "planted is never followed when rule paths are opened. Grant the target's own path instead (or remove "
            "the link) and restart"
        )
    top = next((t for t in writable_trees if _beneath(location, t)), None)
    if top is not None:
        raise UnsafeTreeError(
            f"{path}: {location} is a symbolic link inside {top}, which the worker may write; it is not followed "
            "(it may have been planted). Remove the link or grant its target's own path, and restart"
        )


def _beneath(path: str, top: str) -> bool:
    return path != top and path.startswith(top.rstrip("/") + "/")
