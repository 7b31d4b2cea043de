"""Resource limits: address space, CPU time, open files, file size, processes, core dumps.

What it enforces: the plan's :class:`~sandbox._plan.Rlimits`, soft and hard, so the worker cannot raise them
again. CPU time gets a soft limit (``SIGXCPU``, which would dump core, hence ``RLIMIT_CORE`` 0) and a hard
limit one second later (``SIGKILL``). A file write past ``RLIMIT_FSIZE`` fails (``EFBIG`` in Python;
``SIGXFSZ`` kills programs that do not ignore it).

What it does NOT cover: memory that is not address space (page cache, kernel memory), total CPU of a process
tree (each process has its own ``RLIMIT_CPU``), wall time (the supervisor's per-call timeout), disk usage as a
whole (many files below ``RLIMIT_FSIZE`` each). ``RLIMIT_NPROC`` counts every process of the *real uid* on the
machine, not of the worker: all workers sharing uid 65534 share that count, and it is not enforced for root.
Cgroups would cover the rest; they are not set up here.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandbox._errors import ConfinementError

if TYPE_CHECKING:
    from collections.abc import Callable

    from sandbox._plan import Rlimits

__all__ = ["RlimitSetting", "apply_rlimits", "plan_rlimits"]

_INF = resource.RLIM_INFINITY

_NAMES = {
    resource.RLIMIT_AS: "RLIMIT_AS",
    resource.RLIMIT_CPU: "RLIMIT_CPU",
    resource.RLIMIT_NOFILE: "RLIMIT_NOFILE",
    resource.RLIMIT_FSIZE: "RLIMIT_FSIZE",
    resource.RLIMIT_NPROC: "RLIMIT_NPROC",
    resource.RLIMIT_CORE: "RLIMIT_CORE",
}


@dataclass(frozen=True)
class RlimitSetting:
    """One ``setrlimit`` call: ``resource`` (a ``resource.RLIMIT_*`` number), ``soft`` and ``hard``."""

    resource: int
    soft: int
    hard: int

    @property
    def name(self) -> str:
        """The kernel's name of the limit, for messages."""
        return _NAMES.get(self.resource, str(self.resource))


def _min_limit(a: int, b: int) -> int:
    if a == _INF:
        return b
    if b == _INF:
        return a
    return min(a, b)


def plan_rlimits(limits: Rlimits, current_hard: Callable[[int], int]) -> list[RlimitSetting]:
    """Turn the plan's limits into ``setrlimit`` calls. Pure (``current_hard`` is asked, never changed).

    Args:
        limits: the plan's limits; ``None`` leaves a limit as inherited.
        current_hard: returns the current hard limit of a resource. A requested value above it is lowered to
            it (a process without ``CAP_SYS_RESOURCE`` cannot raise a hard limit; the lower value is the
            stricter one, so this never grants more than asked).

    Raises:
        ConfinementError: a negative value.
    """
    wanted: list[tuple[int, int | None]] = [
        (resource.RLIMIT_AS, limits.address_space_bytes),
        (resource.RLIMIT_CPU, limits.cpu_seconds),
        (resource.RLIMIT_NOFILE, limits.open_files),
        (resource.RLIMIT_FSIZE, limits.file_size_bytes),
        (resource.RLIMIT_NPROC, limits.processes),
        (resource.RLIMIT_CORE, limits.core_bytes),
    ]
    settings: list[RlimitSetting] = []
    for res, value in wanted:
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfinementError(f"{_NAMES[res]}: invalid limit {value!r}", step="rlimits")
        ceiling = current_hard(res)
        soft = _min_limit(value, ceiling)
        hard = soft
        if res == resource.RLIMIT_CPU:
            # SIGXCPU at the soft limit, SIGKILL one second later if the worker ignores it.
            hard = _min_limit(value + 1, ceiling)
        settings.append(RlimitSetting(res, soft, hard))
    return settings


def apply_rlimits(settings: list[RlimitSetting]) -> None:
    """Apply ``settings`` with ``setrlimit`` and read each back.

    Raises:
        ConfinementError: a ``setrlimit`` failed or the kernel reports other values than were set.
    """
    for s in settings:
        try:
            resource.setrlimit(s.resource, (s.soft, s.hard))
        except (OSError, ValueError) as exc:
            raise ConfinementError(
                f"setrlimit {s.name} ({s.soft}, {s.hard}) failed: {exc}",
                step="rlimits",
                errno=getattr(exc, "errno", None),
            ) from exc
        if resource.getrlimit(s.resource) != (s.soft, s.hard):
            raise ConfinementError(f"{s.name} did not take effect", step="rlimits")
