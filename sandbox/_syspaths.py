"""Which paths a Python worker must read, and whether a given uid can read a path.

:func:`python_runtime_paths` lists what the interpreter running this code needs (the supervisor adds them as
read rules of a Python worker's plan). :func:`uid_can_read` is the supervisor's pre-flight check that the
sandbox uid can reach the interpreter and the packages at all: a worker that cannot even start would only show
up as a crash loop.

Neither enforces anything. ``uid_can_read`` reads mode bits only (no ACLs, no Landlock, no read-only mounts),
so a ``True`` is "the classic permissions allow it", the common case of the failures it is meant to catch
(a venv or checkout under ``/root``, mode 0700).
"""

from __future__ import annotations

import functools
import os
import stat
import sys
import sysconfig
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Collection

__all__ = ["python_runtime_paths", "uid_can_read", "uid_write_problem"]


def _covered(path: str, by: str) -> bool:
    return path == by or path.startswith(by.rstrip("/") + "/")


def python_runtime_paths() -> list[str]:
    """Return the canonical paths this Python needs to run: interpreter, prefixes, standard library.

    The interpreter's real path (``sys.executable`` through its symlinks), ``sys.prefix`` (the venv),
    ``sys.base_prefix`` (the installation the venv was made from) and the standard library directories,
    canonicalised, without duplicates and without paths lying beneath another one of the list, sorted.
    Shared libraries outside these trees (``libc``, ``libpython``) are the policy's system paths.

    Found once per process (a fresh list each call): they are this interpreter's, and ``sysconfig`` takes about
    6 ms to answer, which a policy compile paid twice per toolbox.
    """
    return list(_runtime_paths())


@functools.cache
def _runtime_paths() -> tuple[str, ...]:
    candidates = [
        os.path.realpath(sys.executable) if sys.executable else "",
        sys.prefix,
        sys.base_prefix,
        sysconfig.get_path("stdlib") or "",
        sysconfig.get_path("platstdlib") or "",
    ]
    paths = sorted({os.path.realpath(p) for p in candidates if p})
    kept: list[str] = []
    for p in paths:  # sorted, so a parent always comes before its children
        if not any(_covered(p, k) for k in kept):
            kept.append(p)
    return tuple(kept)


def _allows(st: os.stat_result, uid: int, gid: int, bits: tuple[int, int, int], groups: Collection[int] = ()) -> bool:
    """The kernel's rule: the owner bits for the owner, else the group bits for a member of the file's group (its
    primary ``gid`` or a supplementary one of ``groups``), else the other bits."""
    user_bit, group_bit, other_bit = bits
    if st.st_uid == uid:
        return bool(st.st_mode & user_bit)
    if st.st_gid == gid or st.st_gid in groups:
        return bool(st.st_mode & group_bit)
    return bool(st.st_mode & other_bit)


_X = (stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH)
_R = (stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH)


def _ancestors_traversable(path: str, uid: int, gid: int, groups: Collection[int] = ()) -> bool:
    parts = path.split("/")[1:-1]
    current = "/"
    for name in ["", *parts]:
        current = os.path.join(current, name) if name else current
        try:
            st = os.stat(current)
        except OSError:
            return False
        if not stat.S_ISDIR(st.st_mode) or not _allows(st, uid, gid, _X, groups):
            return False
    return True


def uid_can_read(path: str, uid: int, gid: int) -> bool:
    """Return whether a process with ``uid``/``gid`` (and no supplementary groups) can read ``path``.

    Every directory on the way must grant search (x) to that uid (owner bits if it owns it, else group bits if
    ``gid`` matches, else other bits), both on the path as written and on its canonical form (a symlink is
    followed only through directories that can be searched); the target must grant read, and a directory also
    search (to list and open its entries). uid 0 is always allowed. A missing path is ``False``.
    """
    if uid == 0:
        return True
    path = os.path.abspath(path)
    real = os.path.realpath(path)
    if not (_ancestors_traversable(path, uid, gid) and _ancestors_traversable(real, uid, gid)):
        return False
    try:
        st = os.stat(real)
    except OSError:
        return False
    if not _allows(st, uid, gid, _R):
        return False
    return not stat.S_ISDIR(st.st_mode) or _allows(st, uid, gid, _X)


_W = (stat.S_IWUSR, stat.S_IWGRP, stat.S_IWOTH)


def _who(st: os.stat_result) -> str:
    return f"owner {st.st_uid}:{st.st_gid}, mode {stat.S_IMODE(st.st_mode):04o}"


def uid_write_problem(
    path: str, uid: int, gid: int, *, folder_too: bool = True, groups: Collection[int] = ()
) -> str | None:
    """Why the classic permissions keep ``uid``/``gid`` with the supplementary ``groups`` (the policy's
    ``shared_groups`` of the worker) from writing ``path``, or ``None`` when they do not. Mode bits only, like
    :func:`uid_can_read`; a missing ``path`` is fine when its folder lets the uid create it. ``folder_too``: the
    folder must also let the uid create and remove files there (SQLite's journal beside the database). uid 0 is
    never kept out.
    """
    if uid == 0:
        return None
    path = os.path.realpath(path)
    folder = os.path.dirname(path)
    if not _ancestors_traversable(path, uid, gid, groups):
        return f"a folder on the way to {path} does not let uid {uid} through (no search permission)"
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        return f"{path} cannot be looked at: {exc.strerror}"
    if st is not None and not (_allows(st, uid, gid, _R, groups) and _allows(st, uid, gid, _W, groups)):
        return f"{path} is not readable and writable by uid {uid} ({_who(st)})"
    if folder_too or st is None:
        fst = os.stat(folder)
        if not (_allows(fst, uid, gid, _W, groups) and _allows(fst, uid, gid, _X, groups)):
            return f"its folder {folder} does not let uid {uid} create files ({_who(fst)})"
    return None
