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
    from collections.abc import Sequence

__all__ = ["Judge", "ResolvedPath", "open_rule_path", "resolve_path"]

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


def _walk(path: str, judge: Judge) -> tuple[int, ResolvedPath]:
    """An ``O_PATH`` fd of ``path`` and where it led, walked one component at a time through directory fds with
    ``O_NOFOLLOW``; ``judge`` sees every component (a link before it is followed, its text read through its own fd
    so that what is read is what was judged). ``..`` in a link's text goes to the parent of the folder reached."""
    if not path.startswith("/"):
        raise ValueError(f"not an absolute path: {path!r}")
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    done, pending, links = "/", [p for p in path.split("/") if p], []
    try:
        while pending:
            name = pending.pop(0)
            if name == ".":
                continue
            flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_DIRECTORY if name == ".." else 0)
            child = os.open(name, flags, dir_fd=fd)
            location = os.path.dirname(done) if name == ".." else os.path.join(done, name)
            st = os.fstat(child)
            if stat.S_ISLNK(st.st_mode):
                try:
                    judge(path, location, st)
                    text = os.readlink("", dir_fd=child)
                finally:
                    os.close(child)
                links.append((location, st.st_uid))
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
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), location)
            try:
                judge(path, location, st)
            except BaseException:
                os.close(child)
                raise
            os.close(fd)
            fd, done = child, location
        return fd, ResolvedPath(done, tuple(links))
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


def resolve_path(path: str, judge: Judge) -> ResolvedPath:
    """Where ``path`` leads, walked as :func:`open_rule_path` walks (no link followed before ``judge`` saw it, every
    component seen by ``judge``): how the supervisor, as root, resolves a path an agent file names without being
    led by a link a worker planted (an MCP server's ``.bin`` link, ``plan/_mcp_executable.py``).

    Raises:
        FileNotFoundError: a component is missing.
        UnsafeTreeError: ``judge`` refused a component.
        OSError: anything else (``ENOTDIR``, ``ELOOP`` past 40 links).
    """
    fd, resolved = _walk(path, judge)
    os.close(fd)
    return resolved


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
