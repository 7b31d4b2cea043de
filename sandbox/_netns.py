"""Namespaces over ctypes: a new network namespace with only ``lo`` up, a new PID namespace, a new IPC namespace,
a user namespace.

What it enforces: after :func:`enter_namespaces`, the process sees a network stack of its own with one
interface, ``lo``, brought up here; it has no route anywhere else, so the only way out is a socket handed in
from outside (the egress bridge). ``CLONE_NEWPID`` does not move the caller: its *next child* is PID 1 of the
new namespace, and when that PID 1 dies the kernel kills every process left in the namespace. ``CLONE_NEWIPC``
gives the worker SysV IPC objects (shared memory, semaphores, message queues) and POSIX message queues of its own:
they are not files, so Landlock does not see them, and every worker runs as the same uid, so without it a key
would name the same object in every worker and on the host (a channel between toolboxes). A launcher that
is not root also enters a new user namespace (mapping its own uid and gid to themselves) so that it may create
the others.

What it does NOT cover: the filesystem (``/proc`` stays the host's procfs, so PIDs seen in ``/proc`` are host
PIDs and not those of the new namespace), the mount table (no ``CLONE_NEWNS`` here: ``sandbox._procfs`` and
``sandbox._view`` make the mount namespace); pathname unix sockets are reachable through the filesystem unless
Landlock denies the path. No pyroute2 here: importing it costs about 300 ms; the ioctl costs 0.3 ms.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct
from dataclasses import dataclass

from sandbox._errors import ConfinementError
from sandbox._libc import LIBC

__all__ = [
    "CLONE_NEWIPC",
    "CLONE_NEWNET",
    "CLONE_NEWPID",
    "CLONE_NEWUSER",
    "CLONE_NEWUTS",
    "NamespacePlan",
    "bring_up_loopback",
    "enter_namespaces",
    "interface_is_up",
    "plan_namespaces",
    "restore_pid_namespace_for_children",
    "unshare_pid_namespace_for_children",
]

CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_IFREQ = "16sh22x"  # struct ifreq: name[IFNAMSIZ], short ifr_flags, padding to 40 bytes


@dataclass(frozen=True)
class NamespacePlan:
    """Which namespaces to enter, as one ``unshare`` flag mask.

    Attributes:
        flags: the ``CLONE_NEW*`` flags for ``unshare(2)``; 0 means nothing to do.
        user_ns: a user namespace is part of ``flags``; the uid/gid maps must then be written.
        net: a network namespace is part of ``flags``; ``lo`` must then be brought up.
        pid: a PID namespace is part of ``flags``; the caller must fork for it to take effect.
    """

    flags: int
    user_ns: bool
    net: bool
    pid: bool
    ipc: bool = False
    uts: bool = False


def plan_namespaces(
    *, new_netns: bool, new_pidns: bool, euid: int, new_ipcns: bool = False, new_utsns: bool = False
) -> NamespacePlan:
    """Decide the ``unshare`` flags. Pure.

    A root launcher needs no user namespace. A non-root one needs ``CLONE_NEWUSER`` to be allowed to create a
    network, PID, IPC or UTS namespace; with none requested, no namespace at all is entered. A UTS namespace (the
    private view's) gets its host name from the caller (``sandbox._view.set_hostname``).
    """
    flags = (
        (CLONE_NEWNET if new_netns else 0)
        | (CLONE_NEWPID if new_pidns else 0)
        | (CLONE_NEWIPC if new_ipcns else 0)
        | (CLONE_NEWUTS if new_utsns else 0)
    )
    user_ns = bool(flags) and euid != 0
    if user_ns:
        flags |= CLONE_NEWUSER
    return NamespacePlan(flags=flags, user_ns=user_ns, net=new_netns, pid=new_pidns, ipc=new_ipcns, uts=new_utsns)


def _unshare(flags: int) -> None:
    ctypes.set_errno(0)
    if LIBC.unshare(ctypes.c_int(flags)) != 0:
        err = ctypes.get_errno()
        raise ConfinementError(
            f"unshare({flags:#x}) failed: {os.strerror(err)} (errno {err}); are namespaces enabled?",
            step="namespaces",
            errno=err,
        )


def unshare_pid_namespace_for_children() -> None:
    """``unshare(CLONE_NEWPID)``: the caller's next child is PID 1 of a new PID namespace (the caller stays where it
    is). Needs ``CAP_SYS_ADMIN``. The zygote calls it just before a fork, then
    :func:`restore_pid_namespace_for_children`. Raises :class:`ConfinementError`."""
    _unshare(CLONE_NEWPID)


def restore_pid_namespace_for_children(ns_fd: int) -> None:
    """``setns(ns_fd, CLONE_NEWPID)`` with an fd of the caller's own ``/proc/self/ns/pid``: its later children are
    born in its own PID namespace again. Raises :class:`ConfinementError`."""
    ctypes.set_errno(0)
    if LIBC.setns(ctypes.c_int(ns_fd), ctypes.c_int(CLONE_NEWPID)) != 0:
        err = ctypes.get_errno()
        raise ConfinementError(
            f"setns(CLONE_NEWPID) failed: {os.strerror(err)} (errno {err})", step="namespaces", errno=err
        )


def _write_proc(path: str, text: str) -> None:
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as exc:
        raise ConfinementError(
            f"cannot write {path}: {exc.strerror} (errno {exc.errno})", step="namespaces", errno=exc.errno
        ) from exc


def enter_namespaces(plan: NamespacePlan) -> None:
    """Unshare the namespaces of ``plan`` and set them up (uid/gid maps, ``lo`` up).

    Must be called while the process is single-threaded (``unshare(CLONE_NEWUSER)`` refuses otherwise).
    Raises :class:`ConfinementError` if any step fails; the process is then in an unknown state and must exit.
    """
    if not plan.flags:
        return
    uid, gid = os.geteuid(), os.getegid()
    _unshare(plan.flags)
    if plan.user_ns:
        # setgroups must be denied before an unprivileged process may write gid_map.
        _write_proc("/proc/self/setgroups", "deny")
        _write_proc("/proc/self/uid_map", f"{uid} {uid} 1\n")
        _write_proc("/proc/self/gid_map", f"{gid} {gid} 1\n")
    if plan.net:
        bring_up_loopback()


def _ifflags(sock: socket.socket, name: str) -> int:
    request = struct.pack(_IFREQ, name.encode(), 0)
    answer = fcntl.ioctl(sock.fileno(), _SIOCGIFFLAGS, request)
    return int(struct.unpack(_IFREQ, answer)[1])


def bring_up_loopback() -> None:
    """Set ``IFF_UP`` on ``lo`` in the current network namespace (``SIOCSIFFLAGS``), then check it is up.

    Raises:
        ConfinementError: the ioctl failed (no ``CAP_NET_ADMIN`` in the namespace) or ``lo`` is still down.
    """
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            flags = _ifflags(sock, "lo")
            fcntl.ioctl(sock.fileno(), _SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | _IFF_UP))
            up = bool(_ifflags(sock, "lo") & _IFF_UP)
    except OSError as exc:
        raise ConfinementError(
            f"cannot bring up lo: {exc.strerror} (errno {exc.errno})", step="namespaces", errno=exc.errno
        ) from exc
    if not up:
        raise ConfinementError("lo is still down after SIOCSIFFLAGS", step="namespaces")


def interface_is_up(name: str) -> bool:
    """Return whether the interface ``name`` of this network namespace has ``IFF_UP`` (OSError if none)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        return bool(_ifflags(sock, name) & _IFF_UP)
