"""What a worker's cgroup will be, decided before anything is made: where this host lets the supervisor make
groups (:func:`detect_layout`, pure on the texts of ``/proc/self/mountinfo`` and ``/proc/self/cgroup``;
:func:`read_layout` reads them), the limits of a worker's group (:func:`plan_cgroup`, pure) and the directories and
files of one start of it (:meth:`CgroupPlan.instance`, pure). Why cgroups and what they cover:
:mod:`sandbox._cgroups`, which applies these plans.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandbox._errors import ConfinementError

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "CGROUP_DIR",
    "CPU_PERIOD_US",
    "V1",
    "V2",
    "CgroupInstance",
    "CgroupLayout",
    "CgroupPlan",
    "detect_layout",
    "plan_cgroup",
    "read_layout",
    "read_or_none",
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


def read_or_none(path: str) -> str | None:
    """The text of the file at ``path``, or ``None`` when it cannot be read (a cgroup file that is gone)."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def read_layout() -> tuple[CgroupLayout | None, str]:
    """:func:`detect_layout` on this process's own files, then check that the bases can be written here."""
    layout, reason = detect_layout(
        read_or_none("/proc/self/mountinfo") or "",
        read_or_none("/proc/self/cgroup") or "",
        lambda d: read_or_none(os.path.join(d, "cgroup.controllers")),
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
