"""A cgroup per worker: a process count (``pids.max``), a memory limit and a CPU bandwidth for the whole tree of one
toolbox.

Why: every worker runs as the same uid, so ``RLIMIT_NPROC`` is shared machine-wide (a fork bomb in one toolbox stops
every other toolbox from creating a thread) and ``RLIMIT_AS`` is per process (many processes together exhaust
memory), and ``RLIMIT_CPU`` is per process (a tree of busy processes takes every CPU of the host). A cgroup counts
the worker's whole tree, and only it.

How: :func:`~sandbox._cgroup_plan.detect_layout` looks at the mounts and the supervisor's own cgroup and picks
cgroup v2 when ``pids`` and ``memory`` are enabled there, else the v1 ``pids`` and ``memory`` hierarchies; the ``cpu``
controller is used where it is found beside them (v2: enabled there too; v1: a hierarchy with ``cpu``). Groups are
made *below the supervisor's own cgroup* in each hierarchy, in ``agents-supervise/<toolbox>-<id>``: the limits of
whatever runs the supervisor (a systemd unit, a container) keep applying to the workers.
:func:`~sandbox._cgroup_plan.plan_cgroup` (pure) decides the limits; :meth:`CgroupPlan.instance` (pure) names the
directories and the files to write for one start of the worker (both in :mod:`sandbox._cgroup_plan`). The thin part,
here: :func:`create_cgroup` makes the group and writes its limits (before the worker is spawned),
:func:`open_procs_files` opens its ``cgroup.procs`` files for a fork of the zygote, which joins the group itself
(writes ``0``) before it reads its plan, :func:`enter_cgroup` moves a process in (the supervisor moves a launcher
right after spawning it, before sending the plan: the launcher blocks reading the plan, so it forks nothing outside
the group), :func:`remove_cgroup` removes it once the worker was reaped.

Limits: ``pids.max`` counts every task (threads too). Memory: v1 ``memory.limit_in_bytes`` and, when swap is
accounted, ``memory.memsw.limit_in_bytes`` at the same value (no escape into swap); v2 ``memory.max``,
``memory.swap.max`` 0 and ``memory.oom.group`` 1. Past the memory limit the kernel reclaims, then its OOM killer
kills in the group only: in v1 the largest process of the group (the hog; the worker if it is the hog, and the
supervisor restarts it), in v2 the whole group (the worker restarts). CPU: a CFS bandwidth quota, ``cpus`` CPUs per
100 ms period (v1 ``cpu.cfs_quota_us``/``cpu.cfs_period_us``, v2 ``cpu.max``): a tree that wants more is throttled
until the next period, so one toolbox cannot take the CPUs from the others or from the host.

The worker cannot leave its group: moving a process needs write access to a ``cgroup.procs`` file owned by root
(mode 0644); the worker runs as the sandbox uid without capabilities, Landlock grants it nothing under ``/sys``, and
its mounts are locked (Landlock refuses ``mount`` to a sandboxed process, so it cannot mount a cgroupfs of its own).

What it does NOT cover: disk I/O and disk usage, kernel memory outside the memory controller's accounting, network
buffers of the supervisor's egress proxy (those are the supervisor's). Under v2 the supervisor's own cgroup must
allow the controllers in its ``cgroup.subtree_control`` (a cgroup with processes in it cannot: run the supervisor in
a leaf of its own, as systemd's ``Delegate=yes`` does). A supervisor killed by SIGKILL leaves its groups behind
(empty; removable with ``rmdir``). Memory charged before the launcher enters the group (its start-up; for a fork of
the zygote, only the fork itself) stays with the supervisor's group.
"""

from __future__ import annotations

import errno as errno_mod
import os
import signal
from typing import TYPE_CHECKING

from sandbox._cgroup_plan import read_or_none
from sandbox._dirfd import open_anchor, open_dir
from sandbox._errors import ConfinementError

if TYPE_CHECKING:
    from collections.abc import Callable

    from sandbox._cgroup_plan import CgroupInstance, CgroupLayout

__all__ = ["create_cgroup", "enter_cgroup", "open_procs_files", "remove_cgroup", "stale_groups", "sweep_stale_cgroups"]


def _fail(what: str, exc: OSError) -> ConfinementError:
    return ConfinementError(f"{what}: {exc.strerror or exc}", step="cgroup", errno=exc.errno)


def _write(path: str, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def create_cgroup(instance: CgroupInstance) -> None:
    """Make the group's directories and write its limits, each read back where the kernel reports it.

    Raises:
        ConfinementError: a directory or a required limit could not be made (what was made is removed again).
    """
    try:
        for path, value in instance.enable:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            _write(path, value)
        for d in instance.dirs:
            for _ in range(3):  # another supervisor may remove the empty shared parent between our two mkdirs
                os.makedirs(os.path.dirname(d), exist_ok=True)
                try:
                    os.mkdir(d)
                    break
                except FileNotFoundError:
                    continue
            else:
                os.mkdir(d)
        for path, value, required in instance.writes:
            if not required and not os.path.exists(path):
                continue
            _write(path, value)
            got = (read_or_none(path) or "").strip()
            if got != value and not (value.isdigit() and got.isdigit() and int(got) <= int(value)):
                raise ConfinementError(f"{path} reads {got!r} after writing {value!r}", step="cgroup")
    except OSError as exc:
        remove_cgroup(instance)
        raise _fail(f"cannot set up the worker's cgroup ({exc.filename or ''})", exc) from exc
    except ConfinementError:
        remove_cgroup(instance)
        raise


def enter_cgroup(instance: CgroupInstance, pid: int) -> None:
    """Move process ``pid`` (all its threads) into the group.

    Raises:
        ConfinementError: the kernel refused (the process is then in no group of ours; the caller kills it).
    """
    for path in instance.procs_files:
        try:
            _write(path, str(pid))
        except OSError as exc:
            raise _fail(f"cannot move pid {pid} into {os.path.dirname(path)}", exc) from exc


def open_procs_files(instance: CgroupInstance) -> list[int]:
    """Open each ``cgroup.procs`` of the group for writing, for a new process to join the group itself (it writes
    ``0``) before it reads its plan. Each group directory is opened below its parent without following a link
    (``O_DIRECTORY | O_NOFOLLOW``, ``sandbox._dirfd``), the file in it with ``O_NOFOLLOW``. The fds are the
    caller's to close.

    Raises:
        ConfinementError: a file could not be opened (none is left open then).
    """
    fds: list[int] = []
    try:
        for path in instance.procs_files:
            group = os.path.dirname(path)
            parent = open_anchor(os.path.dirname(group))  # the supervisor's own base: only root writes there
            try:
                dfd = open_dir(parent, os.path.basename(group))
            finally:
                os.close(parent)
            try:
                fds.append(os.open("cgroup.procs", os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd))
            finally:
                os.close(dfd)
    except OSError as exc:
        for fd in fds:
            os.close(fd)
        raise _fail(f"cannot open the worker's cgroup ({exc.filename or ''})", exc) from exc
    return fds


def remove_cgroup(instance: CgroupInstance) -> bool:
    """Remove the group (and the shared ``agents-supervise`` directory when it is empty). Safe to call twice.

    Call it after the worker was reaped: its PID namespace is empty by then. Any process still listed (none should
    be) is killed with SIGKILL and the removal retried twice. Returns whether every directory is gone; the caller
    retries a while later when not (the kernel releases reaped tasks from a group after an RCU grace period).
    """
    gone = True
    for d in reversed(instance.dirs):
        for attempt in range(3):
            try:
                os.rmdir(d)
                break
            except FileNotFoundError:
                break
            except OSError as exc:
                if exc.errno != errno_mod.EBUSY or attempt == 2:
                    gone = False
                    break
                for pid in (read_or_none(os.path.join(d, "cgroup.procs")) or "").split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except (ProcessLookupError, ValueError):
                        pass
                os.sched_yield()
        try:
            os.rmdir(os.path.dirname(d))  # the shared directory, when no other worker uses it
        except OSError:
            pass
    return gone


def stale_groups(
    layout: CgroupLayout, *, names: list[str], procs_of: Callable[[str], str | None], alive: Callable[[int], bool]
) -> list[str]:
    """The worker groups under ``layout`` left by supervisors that died: empty, and the pid they name is gone. Pure.

    Group names are ``<toolbox>-<pid>-<random>``, the pid the supervisor's that made the group (before the worker
    is spawned; older supervisors named the launcher's); a group whose pid is alive may be one being set up right
    now (made, not yet entered), so it is never stale.
    """
    out = []
    for base in layout.bases():
        for name in names:
            parts = name.rsplit("-", 2)
            if len(parts) != 3 or not parts[1].isdigit():
                continue
            path = os.path.join(base, name)
            procs = procs_of(os.path.join(path, "cgroup.procs"))
            if procs is None or procs.strip() or alive(int(parts[1])):
                continue
            out.append(path)
    return out


def sweep_stale_cgroups(layout: CgroupLayout) -> list[str]:
    """Remove the groups :func:`stale_groups` finds (a supervisor killed with SIGKILL leaves them); returns them."""
    names: set[str] = set()
    for base in layout.bases():
        try:
            names.update(e.name for e in os.scandir(base) if e.is_dir(follow_symlinks=False))
        except OSError:
            continue
    removed = []
    for path in stale_groups(
        layout, names=sorted(names), procs_of=read_or_none, alive=lambda pid: os.path.exists(f"/proc/{pid}")
    ):
        try:
            os.rmdir(path)
            removed.append(path)
        except OSError:
            pass
    return removed
