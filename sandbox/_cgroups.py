"""A cgroup per worker: a process count (``pids.max``), a memory limit and a CPU bandwidth for the whole tree of one
toolbox.

Why: every worker runs as the same uid, so ``RLIMIT_NPROC`` is shared machine-wide (a fork bomb in one toolbox stops
every other toolbox from creating a thread) and ``RLIMIT_AS`` is per process (many processes together exhaust
memory), and ``RLIMIT_CPU`` is per process (a tree of busy processes takes every CPU of the host). A cgroup counts
the worker's whole tree, and only it.

How: :func:`detect_layout` looks at the mounts and the supervisor's own cgroup and picks cgroup v2 when ``pids`` and
``memory`` are enabled there, else the v1 ``pids`` and ``memory`` hierarchies; the ``cpu`` controller is used where it
is found beside them (v2: enabled there too; v1: a hierarchy with ``cpu``). Groups are made *below the
supervisor's own cgroup* in each hierarchy, in ``agents-supervise/<toolbox>-<id>``: the limits of whatever runs the
supervisor (a systemd unit, a container) keep applying to the workers. :func:`plan_cgroup` (pure) decides the limits;
:meth:`CgroupPlan.instance` (pure) names the directories and the files to write for one start of the worker. The
thin part: :func:`create_cgroup` makes the group and writes its limits (before the worker is spawned),
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
import re
import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandbox._dirfd import open_anchor, open_dir
from sandbox._errors import ConfinementError

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "CGROUP_DIR",
    "CgroupInstance",
    "CgroupLayout",
    "CgroupPlan",
    "create_cgroup",
    "detect_layout",
    "enter_cgroup",
    "open_procs_files",
    "plan_cgroup",
    "read_layout",
    "remove_cgroup",
    "stale_groups",
    "sweep_stale_cgroups",
]

#: The directory, below the supervisor's own cgroup, that holds the workers' groups.
CGROUP_DIR = "agents-supervise"
V1 = "v1"
V2 = "v2"
_NEEDED = ("pids", "memory")
#: CFS bandwidth period (us): a worker gets ``cpus * period`` of CPU time in each period
CPU_PERIOD_US = 100_000
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass(frozen=True)
class CgroupLayout:
    """Where this host lets the supervisor make worker groups.

    Attributes:
        version: ``"v1"`` or ``"v2"``.
        pids_base / memory_base: the directory that holds the worker groups for each controller (for v2 both are
            the same directory); it may not exist yet.
        parent_enable: v2 only: the supervisor's own cgroup, whose ``cgroup.subtree_control`` must enable the
            controllers for the base directory (``""`` for v1).
        cpu_base: the directory that holds the worker groups for the ``cpu`` controller (v2: the same directory as
            the others); ``""`` when this host offers no ``cpu`` controller to the supervisor.
    """

    version: str
    pids_base: str
    memory_base: str
    parent_enable: str = ""
    cpu_base: str = ""

    def bases(self) -> list[str]:
        """Every distinct base directory, sorted."""
        return sorted({self.pids_base, self.memory_base} | ({self.cpu_base} if self.cpu_base else set()))


@dataclass(frozen=True)
class CgroupInstance:
    """One group for one start of a worker: what to create, write and remove, in order. Plain data."""

    dirs: tuple[str, ...]
    #: (file, value, required): a write that is not required is skipped when the file does not exist
    writes: tuple[tuple[str, str, bool], ...]
    procs_files: tuple[str, ...]
    #: v2: (cgroup.subtree_control, "+pids +memory") written before the group is made
    enable: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class CgroupPlan:
    """The limits of a worker's group and where it goes; :meth:`instance` names one group of it.

    ``required``: a group that cannot be made at start stops the worker (strict policies); otherwise the supervisor
    warns and runs the worker without it.
    """

    layout: CgroupLayout
    pids_max: int | None
    memory_bytes: int | None
    required: bool = True
    #: CPU time per ``CPU_PERIOD_US`` period, in microseconds (``None``: no CPU limit)
    cpu_quota_us: int | None = None

    def describe(self) -> str:
        """One line for ``agents-supervise check``."""
        what = [
            f"pids.max={self.pids_max}" if self.pids_max is not None else "no process limit",
            f"memory={self.memory_bytes}" if self.memory_bytes is not None else "no memory limit",
            f"cpus={self.cpu_quota_us / CPU_PERIOD_US:g}" if self.cpu_quota_us is not None else "no CPU limit",
        ]
        return f"cgroup {self.layout.version} ({', '.join(what)}) under {' and '.join(self.layout.bases())}"

    def instance(self, toolbox: str, unique: str) -> CgroupInstance:
        """The group ``<base>/<toolbox>-<unique>`` of this plan. Pure."""
        name = _NAME_UNSAFE.sub("_", f"{toolbox}-{unique}")[:200]
        layout = self.layout
        writes: list[tuple[str, str, bool]] = []
        if layout.version == V2:
            group = os.path.join(layout.pids_base, name)
            controllers = "+pids +memory" + (" +cpu" if self.cpu_quota_us is not None else "")
            enable = (
                (os.path.join(layout.parent_enable, "cgroup.subtree_control"), controllers),
                (os.path.join(layout.pids_base, "cgroup.subtree_control"), controllers),
            )
            if self.cpu_quota_us is not None:
                writes.append((os.path.join(group, "cpu.max"), f"{self.cpu_quota_us} {CPU_PERIOD_US}", True))
            if self.pids_max is not None:
                writes.append((os.path.join(group, "pids.max"), str(self.pids_max), True))
            if self.memory_bytes is not None:
                writes += [
                    (os.path.join(group, "memory.max"), str(self.memory_bytes), True),
                    (os.path.join(group, "memory.swap.max"), "0", False),
                    (os.path.join(group, "memory.oom.group"), "1", True),
                ]
            return CgroupInstance((group,), tuple(writes), (os.path.join(group, "cgroup.procs"),), enable)
        dirs: list[str] = []
        if self.pids_max is not None:
            pids = os.path.join(layout.pids_base, name)
            dirs.append(pids)
            writes.append((os.path.join(pids, "pids.max"), str(self.pids_max), True))
        if self.memory_bytes is not None:
            memory = os.path.join(layout.memory_base, name)
            dirs.append(memory)
            writes += [
                (os.path.join(memory, "memory.limit_in_bytes"), str(self.memory_bytes), True),
                (os.path.join(memory, "memory.memsw.limit_in_bytes"), str(self.memory_bytes), False),
            ]
        if self.cpu_quota_us is not None:
            cpu = os.path.join(layout.cpu_base, name)
            dirs.append(cpu)
            writes += [
                (os.path.join(cpu, "cpu.cfs_period_us"), str(CPU_PERIOD_US), True),
                (os.path.join(cpu, "cpu.cfs_quota_us"), str(self.cpu_quota_us), True),
            ]
        return CgroupInstance(tuple(dirs), tuple(writes), tuple(os.path.join(d, "cgroup.procs") for d in dirs))


def _mounts(mountinfo: str) -> list[tuple[str, str, str, set[str]]]:
    """(mount point, fstype, root within the hierarchy, super options) of each cgroup mount in ``mountinfo``."""
    out = []
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        tail = right.split()
        if not sep or len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        point = fields[4].replace("\\040", " ")
        out.append((point, tail[0], fields[3], set(tail[2].split(","))))
    return out


def detect_layout(
    mountinfo: str, proc_cgroup: str, v2_controllers: Callable[[str], str | None]
) -> tuple[CgroupLayout | None, str]:
    """Pick the cgroup layout from ``/proc/self/mountinfo`` and ``/proc/self/cgroup``. Pure but for the reader.

    Args:
        mountinfo / proc_cgroup: the texts of those files (the supervisor's own).
        v2_controllers: returns the contents of a v2 directory's ``cgroup.controllers`` (``None`` if unreadable).

    Returns:
        ``(layout, "")``, or ``(None, reason)`` saying why neither v2 nor v1 can give both controllers.
    """
    own: dict[str, str] = {}  # controller (or "" for v2) -> own path in that hierarchy
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") if parts[1] else [""]:
                own[controller] = parts[2]
    mounts = _mounts(mountinfo)

    def below(point: str, mount_root: str, path: str) -> str:
        rel = os.path.relpath(path, mount_root) if path.startswith(mount_root) else path.lstrip("/")
        return os.path.normpath(os.path.join(point, rel if rel != "." else ""))

    reasons: list[str] = []
    for point, fstype, root, _ in mounts:
        if fstype != "cgroup2" or "" not in own:
            continue
        own_dir = below(point, root, own[""])
        available = (v2_controllers(own_dir) or "").split()
        if all(c in available for c in _NEEDED):
            base = os.path.join(own_dir, CGROUP_DIR)
            return CgroupLayout(V2, base, base, parent_enable=own_dir, cpu_base=base if "cpu" in available else ""), ""
        reasons.append(f"cgroup2 at {point} offers {' '.join(available) or 'no controllers'} in {own_dir}")
        break
    bases: dict[str, str] = {}
    for point, fstype, root, options in mounts:
        for controller in (*_NEEDED, "cpu"):
            if fstype == "cgroup" and controller in options and controller not in bases and controller in own:
                bases[controller] = os.path.join(below(point, root, own[controller]), CGROUP_DIR)
    if all(c in bases for c in _NEEDED):
        return CgroupLayout(V1, bases["pids"], bases["memory"], cpu_base=bases.get("cpu", "")), ""
    missing = [c for c in _NEEDED if c not in bases]
    reasons.append(f"no cgroup v1 hierarchy with {' and '.join(missing)} is mounted")
    return None, "; ".join(reasons)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def read_layout() -> tuple[CgroupLayout | None, str]:
    """:func:`detect_layout` on this process's own files, then check that the bases can be written here."""
    layout, reason = detect_layout(
        _read("/proc/self/mountinfo") or "",
        _read("/proc/self/cgroup") or "",
        lambda d: _read(os.path.join(d, "cgroup.controllers")),
    )
    if layout is None:
        return None, reason
    for base in layout.bases():
        existing = base if os.path.isdir(base) else os.path.dirname(base)
        if not os.access(existing, os.W_OK):
            return None, f"cannot create cgroups in {existing} (the supervisor runs as uid {os.geteuid()})"
    return layout, ""


def plan_cgroup(
    layout: CgroupLayout,
    *,
    pids_max: int | None,
    memory_bytes: int | None,
    required: bool = True,
    cpus: float | None = None,
) -> CgroupPlan | None:
    """The plan of a worker's group; ``None`` when no limit is asked for. Pure.

    ``cpus``: CPU bandwidth of the whole tree in CPUs (``0.5``: half of one CPU; ``2``: two CPUs).

    Raises:
        ConfinementError: a limit below 1 (a group that admits no process, or no memory), a CPU share below 0.01 CPU
            (the kernel's smallest quota is 1 ms per period), or a CPU limit on a host without the ``cpu``
            controller.
    """
    for name, value in (("pids_max", pids_max), ("memory_bytes", memory_bytes)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ConfinementError(f"cgroup {name}: invalid limit {value!r}", step="cgroup")
    quota = None
    if cpus is not None:
        if isinstance(cpus, bool) or not isinstance(cpus, int | float) or not cpus >= 0.01:
            raise ConfinementError(f"cgroup cpus: invalid limit {cpus!r} (at least 0.01)", step="cgroup")
        if not layout.cpu_base:
            raise ConfinementError("cgroup cpus: this host offers the supervisor no cpu controller", step="cgroup")
        quota = round(cpus * CPU_PERIOD_US)
    if pids_max is None and memory_bytes is None and quota is None:
        return None
    return CgroupPlan(layout, pids_max, memory_bytes, required, quota)


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
            got = (_read(path) or "").strip()
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
                for pid in (_read(os.path.join(d, "cgroup.procs")) or "").split():
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
        layout, names=sorted(names), procs_of=_read, alive=lambda pid: os.path.exists(f"/proc/{pid}")
    ):
        try:
            os.rmdir(path)
            removed.append(path)
        except OSError:
            pass
    return removed
