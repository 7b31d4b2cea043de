"""A private ``/proc`` for the worker's PID namespace.

The host's ``/proc`` shows every process of the machine (command lines are world-readable) and ``/proc/<pid>/root``
magic links. After the fork into its own PID namespace, the worker (PID 1 there) enters a new mount namespace, makes
every mount private (nothing it mounts propagates to the host) and mounts a fresh procfs on ``/proc``: that procfs
belongs to the worker's PID namespace, so it lists only the worker and its descendants, and ``/proc/self`` works for
every one of them (tools such as bash's ``<(...)``, ``ps`` or Python's ``os.cpu_count`` rely on it). The launcher then
grants ``/proc`` read-only in Landlock.

The host-wide files of procfs that no tool needs and that leak what other tenants do or how the kernel is built are
masked (as container runtimes do): :data:`MASKED_FILES` by ``/dev/null`` bind-mounted over them (they read empty),
:data:`MASKED_DIRS` by an empty read-only tmpfs. Among them: ``key-users`` and ``keys`` (other uids' key counts),
``interrupts``/``softirqs`` and ``timer_list`` (timing side channels), ``config.gz``, ``kallsyms``, ``iomem``,
``modules``, ``slabinfo``, ``vmallocinfo`` and the page maps (kernel layout), ``kmsg``, ``sysrq-trigger``, and the
host's identity: ``cmdline`` (the kernel's boot arguments) and ``sys/kernel/random/boot_id``. The private filesystem
view (``sandbox._view``) mounts its own procfs with the same masks.

What it does not cover: ``/proc/sys``, ``/proc/stat``, ``/proc/meminfo``, ``/proc/pressure`` and other global
files that programs read (``ps``, ``top``, ``free``) still show host-wide values (read-only, and writes need
privileges the worker drops); ``/sys`` is not remounted (the policy grants none of it by default).
"""

from __future__ import annotations

import os

from ._private_files import MS_BIND, MS_NODEV, MS_NOEXEC, MS_NOSUID, MS_RDONLY, enter_private_mounts, mount

__all__ = ["MASKED_DIRS", "MASKED_FILES", "mount_private_proc"]

#: Host-wide procfs files no tool needs (read empty in a worker).
MASKED_FILES = (
    "key-users",
    "keys",
    "kcore",
    "kmsg",
    "config.gz",
    "kallsyms",
    "timer_list",
    "sched_debug",
    "latency_stats",
    "interrupts",
    "softirqs",
    "iomem",
    "ioports",
    "modules",
    "slabinfo",
    "vmallocinfo",
    "pagetypeinfo",
    "buddyinfo",
    "zoneinfo",
    "kpagecount",
    "kpageflags",
    "kpagecgroup",
    "lock_stat",
    "sysrq-trigger",
    "timer_stats",
    "cmdline",
    "sys/kernel/random/boot_id",
)
#: Host-wide procfs folders no tool needs (empty in a worker).
MASKED_DIRS = ("acpi", "asound", "bus", "driver", "irq", "scsi", "dynamic_debug")


def mount_private_proc(target: str = "/proc") -> None:
    """Enter a new mount namespace and mount this PID namespace's procfs on ``target``.

    Must run in the PID namespace's first process (after the fork), with ``CAP_SYS_ADMIN`` over the namespaces.
    Raises :class:`ConfinementError` naming the failing call.
    """
    enter_private_mounts(step="procfs")
    mount("proc", target, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, step="procfs")
    for name in MASKED_FILES:
        path = os.path.join(target, name)
        if os.path.isfile(path):
            mount("/dev/null", path, None, MS_BIND, step="procfs")
    for name in MASKED_DIRS:
        path = os.path.join(target, name)
        if os.path.isdir(path) and not os.path.islink(path):
            mount(
                "none", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0555", step="procfs"
            )
