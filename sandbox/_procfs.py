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

from ._private_files import MS_NODEV, MS_NOEXEC, MS_NOSUID, enter_private_mounts, mount

__all__ = ["mount_private_proc"]


def mount_private_proc(target: str = "/proc") -> None:
    """Enter a new mount namespace and mount this PID namespace's procfs on ``target``.

    Must run in the PID namespace's first process (after the fork), with ``CAP_SYS_ADMIN`` over the namespaces.
    Raises :class:`ConfinementError` naming the failing call.
    """
    enter_private_mounts(step="procfs")
    mount("proc", target, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, step="procfs")
