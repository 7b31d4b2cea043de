"""Showing a generated file at a system path, to this process and its children only (a read-only bind mount).

:func:`enter_private_mounts` gives the process a mount namespace of its own whose mounts never propagate to the host
(``/`` made private, recursively); :func:`show_private_file` then writes ``content`` to a fresh file in a folder the
caller names (mode 0644), bind-mounts it on the real path of the target (a symlink is followed), remounts it
read-only (and ``nosuid,nodev,noexec``), and unlinks the file: from then on it is reachable only through the
read-only target. Used for the worker's ``/etc/resolv.conf`` (``sandbox._resolver``) and, with a uid per worker,
its ``/etc/passwd`` and ``/etc/group`` (``sandbox._accounts``).

Both need ``CAP_SYS_ADMIN`` over the mount namespace (root, or a user namespace of the caller's own), so the
launcher calls them before it drops its privileges, and before Landlock: a Landlock rule on the target path then
covers the mounted file. Failures are :class:`~sandbox._errors.ConfinementError` with the caller's ``step``.
"""

from __future__ import annotations

import ctypes
import os
import secrets

from sandbox._errors import ConfinementError
from sandbox._libc import LIBC

__all__ = ["CLONE_NEWNS", "enter_private_mounts", "mount", "show_private_file"]

CLONE_NEWNS = 0x00020000
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000


def _check(result: int, what: str, step: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise ConfinementError(f"{what} failed: {os.strerror(err)}", step=step, errno=err)


def mount(
    source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None, *, step: str
) -> None:
    """``mount(2)``; :class:`ConfinementError` naming ``target`` when it fails."""
    ctypes.set_errno(0)
    result = LIBC.mount(
        source.encode() if source is not None else None,
        target.encode(),
        fstype.encode() if fstype is not None else None,
        ctypes.c_ulong(flags),
        data.encode() if data is not None else None,
    )
    _check(result, f"mount of {target}", step)


def enter_private_mounts(*, step: str) -> None:
    """Enter a new mount namespace and make every mount in it private (nothing propagates to the host)."""
    ctypes.set_errno(0)
    _check(LIBC.unshare(ctypes.c_int(CLONE_NEWNS)), "unshare(CLONE_NEWNS)", step)
    mount(None, "/", None, MS_REC | MS_PRIVATE, step=step)


def show_private_file(content: str, target: str, *, workdir: str, step: str) -> None:
    """Show ``content`` read-only at ``target`` in this mount namespace (see the module docstring).

    ``workdir`` receives the generated file for the moment of the mount (it is unlinked before this returns).

    Raises:
        ConfinementError: ``target`` is not an existing file, or a write or mount failed.
    """
    real_target = os.path.realpath(target)
    if not os.path.isfile(real_target):
        raise ConfinementError(f"{target} does not exist; there is nothing to mount over", step=step)
    # The launcher is root and ``workdir`` is writable by the worker's uid, which another process may hold (a second
    # supervisor serving this toolbox): after the create, only the fd is trusted. fchmod, and the mount's source is
    # the fd's magic link, which names the file opened, whatever the path has been swapped for since.
    # The create and the unlink go through one fd of ``workdir`` (no-follow), so both act in the same folder.
    name = f".{os.path.basename(real_target)}.{secrets.token_hex(8)}"
    try:
        folder = os.open(workdir, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfinementError(
            f"cannot write the worker's {target} in {workdir}: {exc.strerror}", step=step, errno=exc.errno
        ) from exc
    try:
        fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=folder)
    except OSError as exc:
        os.close(folder)
        raise ConfinementError(
            f"cannot write the worker's {target} in {workdir}: {exc.strerror}", step=step, errno=exc.errno
        ) from exc
    try:
        data = content.encode()
        while data:
            data = data[os.write(fd, data) :]
        os.fchmod(fd, 0o644)
        mount(f"/proc/self/fd/{fd}", real_target, None, MS_BIND, step=step)
        mount(None, real_target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, step=step)
    finally:
        os.close(fd)
        try:
            os.unlink(name, dir_fd=folder)  # whatever is at the name now, in the worker's own folder: harmless
        except OSError:
            pass
        os.close(folder)
