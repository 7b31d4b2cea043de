"""A private ``/proc`` for the worker's PID namespace.

The host's ``/proc`` shows every process of the machine (command lines are world-readable) and ``/proc/<pid>/root``
magic links. After the fork into its own PID namespace, the worker (PID 1 there) enters a new mount namespace, makes
every mount private (nothing it mounts propagates to the host) and mounts a fresh procfs on ``/proc``: that procfs
belongs to the worker's PID namespace, so it lists only the worker and its descendants, and ``/proc/self`` works for
every one of them (tools such as bash's ``<(...)``, ``ps`` or Python's ``os.cpu_count`` rely on it). The launcher then
grants ``/proc`` read-only in Landlock.

What it does not cover: ``/proc/sys`` and other global files still show host-wide values (read-only, and writes need
privileges the worker drops); ``/sys`` is not remounted (the policy grants none of it by default).
"""

from __future__ import annotations

import ctypes
import os

from ._errors import ConfinementError

__all__ = ["mount_private_proc"]

CLONE_NEWNS = 0x00020000
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REC = 0x4000
MS_PRIVATE = 1 << 18


def mount_private_proc(target: str = "/proc") -> None:
    """Enter a new mount namespace and mount this PID namespace's procfs on ``target``.

    Must run in the PID namespace's first process (after the fork), with ``CAP_SYS_ADMIN`` over the namespaces.
    Raises :class:`ConfinementError` naming the failing call.
    """
    libc = ctypes.CDLL(None, use_errno=True)

    def check(result: int, what: str) -> None:
        if result != 0:
            err = ctypes.get_errno()
            raise ConfinementError(f"{what} failed: {os.strerror(err)}", step="procfs", errno=err)

    check(libc.unshare(ctypes.c_int(CLONE_NEWNS)), "unshare(CLONE_NEWNS)")
    check(libc.mount(None, b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None), "making / private")
    check(libc.mount(b"proc", target.encode(), b"proc", ctypes.c_ulong(MS_NOSUID | MS_NODEV | MS_NOEXEC), None),
          f"mounting a private procfs on {target}")
