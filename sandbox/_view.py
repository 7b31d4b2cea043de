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
   and, devices aside, ``nodev``;
3. the worker's procfs (``fsopen("proc")`` in its PID namespace) with the masks of :mod:`sandbox._procfs`, plus
   ``/proc/cmdline`` and ``/proc/sys/kernel/random/boot_id``;
4. ``pivot_root(".", ".")`` into the tmpfs and ``umount2(MNT_DETACH)`` of the old root: from then on no path of
   the host outside the binds exists for the worker, and its mountinfo lists only the view's mounts;
5. the root tmpfs is made read-only.

Needs Linux 5.12 (``mount_setattr``) and ``CAP_SYS_ADMIN`` over the mount namespace. Failures are
:class:`~sandbox._errors.ConfinementError` with step ``view``; the worker then never runs.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import struct

from sandbox._errors import ConfinementError
from sandbox._procfs import MASKED_DIRS, MASKED_FILES
from sandbox._view_plan import PathInfo, ViewOp, ViewPlan

__all__ = ["apply_view", "probe_host", "set_hostname"]

_STEP = "view"
_SYS_OPEN_TREE, _SYS_MOVE_MOUNT, _SYS_FSOPEN, _SYS_FSCONFIG, _SYS_FSMOUNT = 428, 429, 430, 431, 432
_SYS_OPENAT2, _SYS_MOUNT_SETATTR = 437, 442
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
_OPEN_TREE_CLONE, _AT_EMPTY_PATH, _AT_RECURSIVE = 1, 0x1000, 0x8000
_MOVE_MOUNT_F_EMPTY_PATH, _MOVE_MOUNT_T_EMPTY_PATH = 0x4, 0x40
_FSCONFIG_SET_STRING, _FSCONFIG_CMD_CREATE = 1, 6
_ATTR_RDONLY, _ATTR_NOSUID, _ATTR_NODEV, _ATTR_NOEXEC = 0x1, 0x2, 0x4, 0x8
_RESOLVE_NO_XDEV, _RESOLVE_NO_MAGICLINKS, _RESOLVE_NO_SYMLINKS, _RESOLVE_BENEATH = 0x1, 0x2, 0x4, 0x8
_MNT_DETACH = 2
#: Host folders the new root's tmpfs may be mounted on (in the worker's mount namespace only); the first that is
#: a real folder is used. Nothing of it remains visible after the pivot.
_STAGING = ("/tmp", "/mnt", "/media", "/srv", "/run", "/var/tmp")

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _fail(what: str, err: int) -> ConfinementError:
    return ConfinementError(f"{what}: {os.strerror(err)}", step=_STEP, errno=err)


def _sys(what: str, number: int, *args: object) -> int:
    ctypes.set_errno(0)
    result = _libc.syscall(ctypes.c_long(number), *args)
    if result < 0:
        raise _fail(what, ctypes.get_errno())
    return int(result)


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


def _openat2(dirfd: int, path: str, resolve: int, flags: int = os.O_PATH) -> int:
    """``openat2``; raises ``OSError`` (so callers can tell ``ENOENT`` apart)."""
    how = struct.pack("QQQ", flags | os.O_CLOEXEC, 0, resolve)
    ctypes.set_errno(0)
    fd = _libc.syscall(ctypes.c_long(_SYS_OPENAT2), ctypes.c_int(dirfd), path.encode(), how, ctypes.c_size_t(24))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return int(fd)


def _beneath(root: int, path: str, flags: int = os.O_PATH) -> int:
    """Open ``path`` (absolute in the view) beneath the new root, following no symlink."""
    return _openat2(root, path.lstrip("/") or ".", _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS,
                    flags)


def _setattr(fd: int, attrs: int, what: str) -> None:
    attr = struct.pack("QQQQ", attrs, 0, 0, 0)
    _sys(f"mount_setattr of {what}", _SYS_MOUNT_SETATTR, ctypes.c_int(fd), b"", ctypes.c_uint(_AT_EMPTY_PATH |
         _AT_RECURSIVE), attr, ctypes.c_size_t(32))


def _clone(fd: int, what: str) -> int:
    return _sys(f"open_tree of {what}", _SYS_OPEN_TREE, ctypes.c_int(fd), b"",
                ctypes.c_uint(_OPEN_TREE_CLONE | _AT_RECURSIVE | _AT_EMPTY_PATH | os.O_CLOEXEC))


def _attach(mount_fd: int, root: int, path: str) -> None:
    """Move the detached mount ``mount_fd`` onto ``path`` (beneath ``root``, no symlink followed)."""
    target = _target(root, path)
    try:
        _sys(f"move_mount onto {path}", _SYS_MOVE_MOUNT, ctypes.c_int(mount_fd), b"", ctypes.c_int(target), b"",
             ctypes.c_uint(_MOVE_MOUNT_F_EMPTY_PATH | _MOVE_MOUNT_T_EMPTY_PATH))
    finally:
        os.close(target)


def _target(root: int, path: str) -> int:
    try:
        return _beneath(root, path)
    except OSError as exc:
        raise _fail(f"mount point {path} of the view", exc.errno or errno.EINVAL) from exc


def _new_fs(fstype: str, options: dict[str, str], attrs: int, what: str) -> int:
    """A detached mount of a new ``fstype`` (``fsopen``/``fsconfig``/``fsmount``)."""
    fs = _sys(f"fsopen({fstype}) for {what}", _SYS_FSOPEN, fstype.encode(), ctypes.c_uint(1))
    try:
        for key, value in options.items():
            _sys(f"fsconfig {key} for {what}", _SYS_FSCONFIG, ctypes.c_int(fs), ctypes.c_uint(_FSCONFIG_SET_STRING),
                 key.encode(), value.encode(), ctypes.c_int(0))
        _sys(f"creating the {fstype} of {what}", _SYS_FSCONFIG, ctypes.c_int(fs), ctypes.c_uint(_FSCONFIG_CMD_CREATE),
             None, None, ctypes.c_int(0))
        return _sys(f"fsmount for {what}", _SYS_FSMOUNT, ctypes.c_int(fs), ctypes.c_uint(1), ctypes.c_uint(attrs))
    finally:
        os.close(fs)


def _tmpfs(size: int, mode: int, attrs: int, what: str) -> int:
    return _new_fs("tmpfs", {"size": str(max(size, 4096)), "mode": f"{mode:o}"}, attrs, what)


def _open_sources(plan: ViewPlan) -> dict[str, int]:
    """Open every bind source before anything is mounted; a source gone since planning is left out."""
    sources: dict[str, int] = {}
    want = {"dir": stat.S_ISDIR, "file": stat.S_ISREG, "device": lambda m: stat.S_ISCHR(m) or stat.S_ISBLK(m)}
    for op in plan.ops:
        if op.op != "bind" or op.source in sources:
            continue
        try:
            fd = _openat2(-100, op.source, _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS)  # AT_FDCWD
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                continue
            for fd in sources.values():
                os.close(fd)
            if exc.errno == errno.ELOOP:
                raise ConfinementError(f"{op.source} now passes through a symlink; it is not followed",
                                       step=_STEP, errno=exc.errno) from exc
            raise _fail(f"cannot open {op.source}", exc.errno or errno.EINVAL) from exc
        if not want.get(op.kind, lambda m: False)(os.fstat(fd).st_mode):
            os.close(fd)
            for fd in sources.values():
                os.close(fd)
            raise ConfinementError(f"{op.source} is no longer a {op.kind}", step=_STEP)
        sources[op.source] = fd
    return sources


def _write_file(root: int, op: ViewOp) -> None:
    parent = _target(root, os.path.dirname(op.path))
    try:
        fd = os.open(os.path.basename(op.path), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     op.mode, dir_fd=parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), op.mode)  # whatever the umask
            f.write(op.content or "")
    except OSError as exc:
        raise _fail(f"writing {op.path} of the view", exc.errno or errno.EINVAL) from exc
    finally:
        os.close(parent)


def _overlay_file(root: int, op: ViewOp) -> None:
    """Show generated content read-only over the host's file at ``op.path`` (inside a bind)."""
    staged = ViewOp("file", f"/.view-{os.path.basename(op.path)}", content=op.content, mode=op.mode)
    _write_file(root, staged)
    src = _target(root, staged.path)
    try:
        clone = _clone(src, op.path)
        try:
            _setattr(clone, _ATTR_RDONLY | _ATTR_NOSUID | _ATTR_NODEV | _ATTR_NOEXEC, op.path)
            _attach(clone, root, op.path)
        finally:
            os.close(clone)
    finally:
        os.close(src)
        os.unlink(staged.path.lstrip("/"), dir_fd=root)


def _bind(root: int, op: ViewOp, source: int) -> None:
    attrs = _ATTR_NOSUID | (0 if op.writable else _ATTR_RDONLY) | (_ATTR_NOEXEC if op.kind == "device" else
                                                                    _ATTR_NODEV)
    clone = _clone(source, op.source)
    try:
        _setattr(clone, attrs, op.path)
        _attach(clone, root, op.path)
    finally:
        os.close(clone)


def _mount_proc(root: int, null: int) -> None:
    """The worker's procfs on ``/proc``, host-wide files masked (``/dev/null`` over files, empty tmpfs over dirs)."""
    proc = _new_fs("proc", {}, _ATTR_NOSUID | _ATTR_NODEV | _ATTR_NOEXEC, "/proc")
    try:
        _attach(proc, root, "/proc")
    finally:
        os.close(proc)
    for name in MASKED_FILES:
        path = f"/proc/{name}"
        try:
            os.close(_beneath(root, path))
        except OSError:
            continue  # this kernel has no such file
        clone = _clone(null, "/dev/null")
        try:
            _attach(clone, root, path)
        finally:
            os.close(clone)
    for name in MASKED_DIRS:
        path = f"/proc/{name}"
        try:
            fd = _beneath(root, path)
        except OSError:
            continue
        is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
        os.close(fd)
        if is_dir:
            empty = _tmpfs(4096, 0o555, _ATTR_RDONLY | _ATTR_NOSUID | _ATTR_NODEV | _ATTR_NOEXEC, path)
            try:
                _attach(empty, root, path)
            finally:
                os.close(empty)


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
    _sys("pivot_root", number, b".", b".")
    ctypes.set_errno(0)
    if _libc.umount2(b".", ctypes.c_int(_MNT_DETACH)) != 0:
        raise _fail("detaching the old root", ctypes.get_errno())
    os.chdir("/")


def apply_view(plan: ViewPlan) -> None:
    """Make ``plan`` this process's root (see the module docstring). The mount namespace must be private already."""
    sources = _open_sources(plan)
    try:
        null = _openat2(-100, "/dev/null", _RESOLVE_NO_SYMLINKS)
    except OSError as exc:
        raise _fail("cannot open /dev/null", exc.errno or errno.EINVAL) from exc
    try:
        base = _tmpfs(1 << 20, 0o755, _ATTR_NOSUID | _ATTR_NODEV, "the root")
        try:
            _sys("move_mount of the root tmpfs", _SYS_MOVE_MOUNT, ctypes.c_int(base), b"", ctypes.c_int(-100),
                 _staging_dir().encode(), ctypes.c_uint(_MOVE_MOUNT_F_EMPTY_PATH))
            root = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=base)
        finally:
            os.close(base)
        try:
            for op in plan.ops:
                _apply_op(root, op, sources, null)
            _pivot(root)
        finally:
            os.close(root)
    finally:
        os.close(null)
        for fd in sources.values():
            os.close(fd)
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:  # the root itself: read-only, but not recursively (the binds keep their own modes)
        attr = struct.pack("QQQQ", _ATTR_RDONLY | _ATTR_NOSUID | _ATTR_NODEV, 0, 0, 0)
        _sys("making the view's root read-only", _SYS_MOUNT_SETATTR, ctypes.c_int(fd), b"",
             ctypes.c_uint(_AT_EMPTY_PATH), attr, ctypes.c_size_t(32))
    finally:
        os.close(fd)


def _apply_op(root: int, op: ViewOp, sources: dict[str, int], null: int) -> None:
    if op.op == "dir":
        parent = _target(root, os.path.dirname(op.path))
        try:
            os.mkdir(os.path.basename(op.path), op.mode, dir_fd=parent)
        except FileExistsError:
            pass
        except OSError as exc:
            raise _fail(f"mkdir {op.path} in the view", exc.errno or errno.EINVAL) from exc
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
            raise _fail(f"symlink {op.path} in the view", exc.errno or errno.EINVAL) from exc
        finally:
            os.close(parent)
    elif op.op == "tmpfs":
        fs = _tmpfs(op.size, op.mode, _ATTR_NOSUID | _ATTR_NODEV, op.path)
        try:
            _attach(fs, root, op.path)
        finally:
            os.close(fs)
    elif op.op == "proc":
        _mount_proc(root, null)
    elif op.op == "bind" and op.source in sources:
        _bind(root, op, sources[op.source])


def set_hostname(name: str) -> None:
    """``sethostname`` in this process's UTS namespace (the launcher made it its own)."""
    raw = name.encode()
    ctypes.set_errno(0)
    if _libc.sethostname(raw, ctypes.c_size_t(len(raw))) != 0:
        raise _fail(f"sethostname({name!r})", ctypes.get_errno())
