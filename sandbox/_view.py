"""Applying a :class:`~sandbox._view_plan.ViewPlan`: the worker's root becomes a tmpfs holding only its grants.

:func:`apply_view` runs in the launcher as root, in the worker's PID namespace and a private mount namespace
(``sandbox._private_files.enter_private_mounts``), before Landlock and the uid drop:

1. every bind source is opened first (``O_PATH``, ``openat2`` with ``RESOLVE_NO_SYMLINKS``: a path that became a
   symlink since it was planned is refused, not followed) and checked to be what the plan expects;
2. a fresh tmpfs is mounted on a folder of the host (only in this mount namespace) and filled through its
   descriptor: folders, links and generated files with ``*at`` calls, every mount with the new mount API
   (``open_tree(OPEN_TREE_CLONE)`` of the source, ``mount_setattr`` on the detached copy, then ``move_mount`` onto a
   target opened beneath the new root with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS``). Read-only binds are read-only
   recursively (``EROFS`` for every write, ``utimensat``, ``chmod``, whatever the modes); every bind is ``nosuid``
   and, devices aside, ``nodev``. A bind the plan marks ``private`` (system paths and devices) is shown through a
   read-only overlay of the source (a folder) or of its folder (a file or device node, then cloned alone out of
   it), so the worker's inodes are its own: a lock on them is seen by no other worker and not on the host.
   One overlay per source folder, sharing one empty top layer (overlayfs needs two layers);
3. the worker's procfs (``fsopen("proc")`` in its PID namespace) with the masks of :mod:`sandbox._procfs`, plus
   ``/proc/cmdline`` and ``/proc/sys/kernel/random/boot_id``;
4. ``pivot_root(".", ".")`` into the tmpfs and ``umount2(MNT_DETACH)`` of the old root: from then on no path of
   the host outside the binds exists for the worker, and its mountinfo lists only the view's mounts;
5. the root tmpfs is made read-only.

The worker's own inodes (step 2's overlays) are :mod:`sandbox._view_overlays`, its ``/proc`` (step 3)
:mod:`sandbox._view_proc`.

Needs Linux 6.15 (overlayfs layers given as ``O_PATH`` fds; the rest needs 5.12) and ``CAP_SYS_ADMIN`` over the
mount namespace. A launcher that is not root (its own user namespace, where the host's mounts are locked) cannot
overlay a folder with a mount beneath it: the plan (``ViewPlan.locked``) binds such entries plainly, and the
``/proc`` masks use a read-only bind of the host's ``/dev/null``. Failures are
:class:`~sandbox._errors.ConfinementError` with step ``view``; the worker then never runs.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import stat
from typing import TYPE_CHECKING

from sandbox._errors import ConfinementError
from sandbox._libc import LIBC
from sandbox._mount_api import (
    ATTR_NODEV,
    ATTR_NOEXEC,
    ATTR_NOSUID,
    ATTR_RDONLY,
    RESOLVE_NO_SYMLINKS,
    attach,
    clone_tree,
    fail,
    move_to_path,
    open_beneath,
    openat2,
    set_attrs,
    syscall,
    tmpfs,
)
from sandbox._view_overlays import OwnInodes, own_null, prepare_private
from sandbox._view_plan import PathInfo, ViewOp, ViewPlan
from sandbox._view_proc import mount_proc

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["apply_view", "host_mount_points", "probe_host", "set_hostname"]

_STEP = "view"
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
_MNT_DETACH = 2
#: Host folders the new root's tmpfs may be mounted on (in the worker's mount namespace only); the first that is
#: a real folder is used. Nothing of it remains visible after the pivot.
_STAGING = ("/tmp", "/mnt", "/media", "/srv", "/run", "/var/tmp")


def probe_host(path: str) -> PathInfo:
    """What ``lstat`` says of ``path`` (see :class:`~sandbox._view_plan.PathInfo`)."""
    try:
        st = os.lstat(path)
    except OSError:
        return PathInfo("missing")
    if stat.S_ISLNK(st.st_mode):
        try:
            return PathInfo("symlink", os.readlink(path))
        except OSError:
            return PathInfo("missing")
    if stat.S_ISDIR(st.st_mode):
        return PathInfo("dir")
    if stat.S_ISREG(st.st_mode):
        return PathInfo("file")
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        return PathInfo("device")
    return PathInfo("other")


#: an octal escape of mountinfo (``\\040`` for a space), compiled on import (in the zygote, not in each child)
_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


def _unescape(match: re.Match[str]) -> str:
    return chr(int(match.group(1), 8))


def host_mount_points(mountinfo: str = "/proc/self/mountinfo") -> frozenset[str]:
    """Every mount point of this mount namespace (the planner keeps a plain bind where an overlay would hide one)."""
    points = set()
    try:
        with open(mountinfo, encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                fields = line.split(" ")
                if len(fields) > 4:
                    point = fields[4]
                    points.add(_OCTAL_ESCAPE.sub(_unescape, point) if "\\" in point else point)
    except OSError as exc:
        raise fail(f"cannot read {mountinfo}", exc.errno or errno.EIO) from exc
    return frozenset(points)


def _open_sources(plan: ViewPlan) -> dict[str, int]:
    """Open every bind source before anything is mounted; a source gone since planning is left out."""
    sources: dict[str, int] = {}
    want: dict[str, Callable[[int], bool]] = {
        "dir": stat.S_ISDIR,
        "file": stat.S_ISREG,
        "device": lambda m: stat.S_ISCHR(m) or stat.S_ISBLK(m),
    }
    for op in plan.ops:
        if op.op != "bind" or op.source in sources:
            continue
        try:
            fd = openat2(-100, op.source, RESOLVE_NO_SYMLINKS)  # AT_FDCWD
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                continue
            for fd in sources.values():
                os.close(fd)
            if exc.errno == errno.ELOOP:
                raise ConfinementError(
                    f"{op.source} now passes through a symlink; it is not followed", step=_STEP, errno=exc.errno
                ) from exc
            raise fail(f"cannot open {op.source}", exc.errno or errno.EINVAL) from exc
        kind_of = want.get(op.kind)
        if kind_of is None or not kind_of(os.fstat(fd).st_mode):
            os.close(fd)
            for fd in sources.values():
                os.close(fd)
            raise ConfinementError(f"{op.source} is no longer a {op.kind}", step=_STEP)
        sources[op.source] = fd
    return sources


def _write_file(root: int, op: ViewOp) -> None:
    parent = _target(root, os.path.dirname(op.path))
    try:
        fd = os.open(
            os.path.basename(op.path),
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            op.mode,
            dir_fd=parent,
        )
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), op.mode)  # whatever the umask
            f.write(op.content or "")
    except OSError as exc:
        raise fail(f"writing {op.path} of the view", exc.errno or errno.EINVAL) from exc
    finally:
        os.close(parent)


def _target(root: int, path: str) -> int:
    try:
        return open_beneath(root, path)
    except OSError as exc:
        raise fail(f"mount point {path} of the view", exc.errno or errno.EINVAL) from exc


def _overlay_file(root: int, op: ViewOp) -> None:
    """Show generated content read-only over the host's file at ``op.path`` (inside a bind)."""
    staged = ViewOp("file", f"/.view-{os.path.basename(op.path)}", content=op.content, mode=op.mode)
    _write_file(root, staged)
    src = _target(root, staged.path)
    try:
        clone = clone_tree(src, op.path)
        try:
            set_attrs(clone, ATTR_RDONLY | ATTR_NOSUID | ATTR_NODEV | ATTR_NOEXEC, op.path)
            attach(clone, root, op.path)
        finally:
            os.close(clone)
    finally:
        os.close(src)
        os.unlink(staged.path.lstrip("/"), dir_fd=root)


def _bind(root: int, op: ViewOp, source: int, prepared: dict[str, int]) -> None:
    device = op.kind == "device"
    if op.private:
        attach(prepared[op.source], root, op.path)
        return
    attrs = ATTR_NOSUID | (0 if op.writable else ATTR_RDONLY) | (ATTR_NOEXEC if device else ATTR_NODEV)
    clone = clone_tree(source, op.source)
    try:
        set_attrs(clone, attrs, op.path)
        attach(clone, root, op.path)
    finally:
        os.close(clone)


def _staging_dir() -> str:
    for path in _STAGING:
        if os.path.isdir(path) and not os.path.islink(path):
            return path
    raise ConfinementError(f"no folder to build the view on (none of {', '.join(_STAGING)} exists)", step=_STEP)


def _pivot(root: int) -> None:
    number = _SYS_PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise ConfinementError(f"pivot_root is not known on {os.uname().machine}", step=_STEP)
    os.fchdir(root)
    syscall("pivot_root", number, b".", b".")
    ctypes.set_errno(0)
    if LIBC.umount2(b".", ctypes.c_int(_MNT_DETACH)) != 0:
        raise fail("detaching the old root", ctypes.get_errno())
    os.chdir("/")


def apply_view(plan: ViewPlan) -> None:
    """Make ``plan`` this process's root (see the module docstring). The mount namespace must be private already."""
    sources = _open_sources(plan)
    own: OwnInodes | None = None
    prepared: dict[str, int] = {}
    null = -1
    try:
        own = OwnInodes()
        null = own_null(own, locked=plan.locked)
        prepared = prepare_private(plan, sources, own)
        base = tmpfs(1 << 20, 0o755, ATTR_NOSUID | ATTR_NODEV, "the root")
        try:
            move_to_path(base, _staging_dir(), "the root tmpfs")
            root = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=base)
        finally:
            os.close(base)
        try:
            for op in plan.ops:
                _apply_op(root, op, sources, null, prepared)
            _pivot(root)
        finally:
            os.close(root)
    finally:
        for fd in [null, *prepared.values(), *sources.values()]:
            if fd >= 0:
                os.close(fd)
        if own is not None:
            own.close()
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:  # the root itself: read-only, but not recursively (the binds keep their own modes)
        set_attrs(fd, ATTR_RDONLY | ATTR_NOSUID | ATTR_NODEV, "the view's root", recursive=False)
    finally:
        os.close(fd)


def _apply_op(root: int, op: ViewOp, sources: dict[str, int], null: int, prepared: dict[str, int]) -> None:
    if op.op == "dir":
        parent = _target(root, os.path.dirname(op.path))
        try:
            os.mkdir(os.path.basename(op.path), op.mode, dir_fd=parent)
        except FileExistsError:
            pass
        except OSError as exc:
            raise fail(f"mkdir {op.path} in the view", exc.errno or errno.EINVAL) from exc
        finally:
            os.close(parent)
    elif op.op == "file":
        if op.overlay:
            _overlay_file(root, op)
        else:
            _write_file(root, op)
    elif op.op == "symlink":
        parent = _target(root, os.path.dirname(op.path))
        try:
            os.symlink(op.source, os.path.basename(op.path), dir_fd=parent)
        except OSError as exc:
            raise fail(f"symlink {op.path} in the view", exc.errno or errno.EINVAL) from exc
        finally:
            os.close(parent)
    elif op.op == "tmpfs":
        fs = tmpfs(op.size, op.mode, ATTR_NOSUID | ATTR_NODEV, op.path)
        try:
            attach(fs, root, op.path)
        finally:
            os.close(fs)
    elif op.op == "proc":
        mount_proc(root, null)
    elif op.op == "bind" and op.source in sources:
        _bind(root, op, sources[op.source], prepared)


def set_hostname(name: str) -> None:
    """``sethostname`` in this process's UTS namespace (the launcher made it its own)."""
    raw = name.encode()
    ctypes.set_errno(0)
    if LIBC.sethostname(raw, ctypes.c_size_t(len(raw))) != 0:
        raise fail(f"sethostname({name!r})", ctypes.get_errno())
