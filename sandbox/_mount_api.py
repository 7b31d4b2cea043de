"""Thin wrappers of the kernel's new mount API, for the private view (:mod:`sandbox._view`).

Every call works on descriptors: ``openat2`` with ``RESOLVE_*`` flags, ``open_tree(OPEN_TREE_CLONE)`` of a source
fd, ``mount_setattr`` on the detached copy, ``move_mount`` onto a target fd, ``fsopen``/``fsconfig``/``fsmount`` for
a new file system (tmpfs, procfs, and the read-only overlays of :func:`overlay` that give a worker inodes of its
own). Failures are :class:`~sandbox._errors.ConfinementError` with step ``view``; :func:`openat2` raises
``OSError`` so that callers can tell ``ENOENT`` apart. No policy lives here.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
from typing import TYPE_CHECKING

from sandbox._errors import ConfinementError
from sandbox._libc import LIBC

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "ATTR_NODEV",
    "ATTR_NOEXEC",
    "ATTR_NOSUID",
    "ATTR_RDONLY",
    "RESOLVE_BENEATH",
    "RESOLVE_NO_SYMLINKS",
    "attach",
    "attach_at",
    "clone_tree",
    "fail",
    "move_to_path",
    "new_fs",
    "open_beneath",
    "openat2",
    "overlay",
    "set_attrs",
    "syscall",
    "tmpfs",
]

STEP = "view"
_SYS_OPEN_TREE, _SYS_MOVE_MOUNT, _SYS_FSOPEN, _SYS_FSCONFIG, _SYS_FSMOUNT = 428, 429, 430, 431, 432
_SYS_OPENAT2, _SYS_MOUNT_SETATTR = 437, 442
_OPEN_TREE_CLONE, _AT_SYMLINK_NOFOLLOW, _AT_EMPTY_PATH, _AT_RECURSIVE = 1, 0x100, 0x1000, 0x8000
_MOVE_MOUNT_F_EMPTY_PATH, _MOVE_MOUNT_T_EMPTY_PATH = 0x4, 0x40
_FSCONFIG_SET_STRING, _FSCONFIG_SET_FD, _FSCONFIG_CMD_CREATE = 1, 5, 6
ATTR_RDONLY, ATTR_NOSUID, ATTR_NODEV, ATTR_NOEXEC = 0x1, 0x2, 0x4, 0x8
_RESOLVE_NO_MAGICLINKS, _RESOLVE_NO_SYMLINKS, RESOLVE_BENEATH = 0x2, 0x4, 0x8
#: no symlink and no magic link (``/proc/PID/fd/N``) anywhere on the path
RESOLVE_NO_SYMLINKS = _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS
#: Overlay options that keep it a plain read-only window on its lowest layer: no redirects or metadata-only copies
#: are followed (they would come from xattrs of the host's files), no index.
_OVERLAY_OPTIONS = (("redirect_dir", "nofollow"), ("metacopy", "off"), ("index", "off"))


def fail(what: str, err: int) -> ConfinementError:
    return ConfinementError(f"{what}: {os.strerror(err)}", step=STEP, errno=err)


def syscall(what: str, number: int, *args: object) -> int:
    """``syscall(number, *args)``; a negative result raises :func:`fail` naming ``what``."""
    ctypes.set_errno(0)
    result = LIBC.syscall(ctypes.c_long(number), *args)
    if result < 0:
        raise fail(what, ctypes.get_errno())
    return int(result)


def openat2(dirfd: int, path: str, resolve: int, flags: int = os.O_PATH) -> int:
    """``openat2``; raises ``OSError`` (so callers can tell ``ENOENT`` apart)."""
    how = struct.pack("QQQ", flags | os.O_CLOEXEC, 0, resolve)
    ctypes.set_errno(0)
    fd = LIBC.syscall(ctypes.c_long(_SYS_OPENAT2), ctypes.c_int(dirfd), path.encode(), how, ctypes.c_size_t(24))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return int(fd)


def open_beneath(root: int, path: str, flags: int = os.O_PATH) -> int:
    """Open ``path`` (absolute in the view) beneath ``root``, following no symlink."""
    return openat2(root, path.lstrip("/") or ".", RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, flags)


def set_attrs(fd: int, attrs: int, what: str, *, recursive: bool = True) -> None:
    """``mount_setattr`` setting ``attrs`` on the mount of ``fd`` (and, ``recursive``, every mount beneath)."""
    attr = struct.pack("QQQQ", attrs, 0, 0, 0)
    flags = _AT_EMPTY_PATH | (_AT_RECURSIVE if recursive else 0)
    syscall(
        f"mount_setattr of {what}",
        _SYS_MOUNT_SETATTR,
        ctypes.c_int(fd),
        b"",
        ctypes.c_uint(flags),
        attr,
        ctypes.c_size_t(32),
    )


def clone_tree(fd: int, what: str, name: str = "") -> int:
    """A detached copy of the mount tree at ``fd`` (``name`` empty) or at its entry ``name`` (not followed if a
    link), with the mounts beneath it."""
    flags = _OPEN_TREE_CLONE | _AT_RECURSIVE | os.O_CLOEXEC | (_AT_SYMLINK_NOFOLLOW if name else _AT_EMPTY_PATH)
    return syscall(f"open_tree of {what}", _SYS_OPEN_TREE, ctypes.c_int(fd), name.encode(), ctypes.c_uint(flags))


def attach(mount_fd: int, root: int, path: str) -> None:
    """Move the detached mount ``mount_fd`` onto ``path`` (beneath ``root``, no symlink followed)."""
    try:
        target = open_beneath(root, path)
    except OSError as exc:
        raise fail(f"mount point {path} of the view", exc.errno or errno.EINVAL) from exc
    try:
        attach_at(mount_fd, target, path)
    finally:
        os.close(target)


def attach_at(mount_fd: int, target: int, path: str) -> None:
    """Move the detached mount ``mount_fd`` onto the mount point ``target`` (an fd, opened as :func:`attach` does;
    ``path`` names it in errors)."""
    syscall(
        f"move_mount onto {path}",
        _SYS_MOVE_MOUNT,
        ctypes.c_int(mount_fd),
        b"",
        ctypes.c_int(target),
        b"",
        ctypes.c_uint(_MOVE_MOUNT_F_EMPTY_PATH | _MOVE_MOUNT_T_EMPTY_PATH),
    )


def move_to_path(mount_fd: int, path: str, what: str) -> None:
    """Move the detached mount ``mount_fd`` onto the host folder ``path`` (of this mount namespace only)."""
    syscall(
        f"move_mount of {what}",
        _SYS_MOVE_MOUNT,
        ctypes.c_int(mount_fd),
        b"",
        ctypes.c_int(-100),
        path.encode(),
        ctypes.c_uint(_MOVE_MOUNT_F_EMPTY_PATH),
    )


def new_fs(fstype: str, options: Sequence[tuple[str, str]], attrs: int, what: str, layers: Sequence[int] = ()) -> int:
    """A detached mount of a new ``fstype`` (``fsopen``/``fsconfig``/``fsmount``); ``layers`` are fds given as
    ``lowerdir+`` (overlayfs), topmost first."""
    fs = syscall(f"fsopen({fstype}) for {what}", _SYS_FSOPEN, fstype.encode(), ctypes.c_uint(1))
    try:
        for fd in layers:
            syscall(
                f"fsconfig lowerdir+ for {what}",
                _SYS_FSCONFIG,
                ctypes.c_int(fs),
                ctypes.c_uint(_FSCONFIG_SET_FD),
                b"lowerdir+",
                None,
                ctypes.c_int(fd),
            )
        for key, value in options:
            syscall(
                f"fsconfig {key} for {what}",
                _SYS_FSCONFIG,
                ctypes.c_int(fs),
                ctypes.c_uint(_FSCONFIG_SET_STRING),
                key.encode(),
                value.encode(),
                ctypes.c_int(0),
            )
        syscall(
            f"creating the {fstype} of {what}",
            _SYS_FSCONFIG,
            ctypes.c_int(fs),
            ctypes.c_uint(_FSCONFIG_CMD_CREATE),
            None,
            None,
            ctypes.c_int(0),
        )
        return syscall(f"fsmount for {what}", _SYS_FSMOUNT, ctypes.c_int(fs), ctypes.c_uint(1), ctypes.c_uint(attrs))
    finally:
        os.close(fs)


def tmpfs(size: int, mode: int, attrs: int, what: str) -> int:
    """A detached tmpfs of ``size`` bytes (at least a page) whose root has ``mode``."""
    return new_fs("tmpfs", (("size", str(max(size, 4096))), ("mode", f"{mode:o}")), attrs, what)


def overlay(lower: int, empty: int, attrs: int, what: str) -> int:
    """A detached, read-only overlay whose only content is the folder ``lower`` (an fd): the same names and data,
    but inodes of this mount's own, so locks (``flock``, POSIX, OFD) on them reach no
    one who opened the folder another way. ``empty`` is an empty folder the kernel needs as the top layer (an
    overlay without an upper layer takes at least two). Needs overlayfs layers given as fds (Linux 6.13)."""
    return new_fs("overlay", _OVERLAY_OPTIONS, attrs | ATTR_RDONLY, what, layers=(empty, lower))
