"""The event counters of a worker's cgroup: how often its process limit refused a fork and its memory limit
killed a process.

Why: a fork that fails with ``EAGAIN`` or a process killed by the OOM killer looks, from inside the worker, like any
other failure; the supervisor reads these counters around a call to say *which* limit stopped it
(docs/CONFINEMENT.md, "When a limit stops a call").

What is read (small files the kernel fills on read; no polling, nothing written):

- ``pids.events`` (v1 and v2): ``max N`` — forks refused because ``pids.max`` was reached.
- v2 ``memory.events``: ``oom_kill N`` — processes the OOM killer killed in the group (``oom`` counts the times the
  limit was reached with nothing left to reclaim; it rises with ``oom_kill``).
- v1 ``memory.oom_control``: ``oom_kill N`` (kernels since 4.13). ``memory.failcnt`` is NOT used: it rises every
  time usage touches the limit, reclaim of page cache included, so it says nothing about a call being stopped.

:func:`counter_files` (pure) names the files of one group, :func:`parse_counters` (pure) reads their texts,
:func:`read_counters` is the thin reader. A counter whose file is missing or unreadable (no such controller, the
group already removed) is ``None``: unknown, never zero.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandbox._cgroup_plan import V1, V2, CgroupInstance, CgroupLayout

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["CounterFiles", "LimitCounters", "counter_files", "parse_counters", "read_counters", "rises"]


@dataclass(frozen=True)
class CounterFiles:
    """Where one group's counters are; ``""``: that controller is not limited for this group."""

    pids_events: str = ""
    memory: str = ""


@dataclass(frozen=True)
class LimitCounters:
    """One reading of a group's counters; ``None``: not known (no file, or unreadable)."""

    #: forks refused at ``pids.max``
    pids_max: int | None = None
    #: processes killed by the OOM killer in the group
    oom_kills: int | None = None


def counter_files(layout: CgroupLayout, instance: CgroupInstance) -> CounterFiles:
    """The counter files of the group ``instance`` made under ``layout`` (pure)."""
    pids = memory = ""
    for d in instance.dirs:
        parent = os.path.dirname(d)
        if layout.version == V2:
            pids, memory = os.path.join(d, "pids.events"), os.path.join(d, "memory.events")
        elif layout.version == V1 and parent == layout.pids_base and not pids:
            pids = os.path.join(d, "pids.events")
        elif layout.version == V1 and parent == layout.memory_base and not memory:
            memory = os.path.join(d, "memory.oom_control")
    return CounterFiles(pids, memory)


def _field(text: str | None, key: str) -> int | None:
    if text is None:
        return None
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == key and parts[1].isdigit():
            return int(parts[1])
    return None


def parse_counters(pids_events: str | None, memory: str | None) -> LimitCounters:
    """The counters in the texts of ``pids.events`` and ``memory.events``/``memory.oom_control`` (pure; ``None``
    for a file that could not be read)."""
    return LimitCounters(pids_max=_field(pids_events, "max"), oom_kills=_field(memory, "oom_kill"))


def rises(before: LimitCounters, after: LimitCounters) -> dict[str, int]:
    """How much each known counter rose between two readings: ``{"pids_max": n, "oom_kills": n}`` for those that
    rose (pure). A counter unknown in either reading is left out."""
    out = {}
    for name in ("pids_max", "oom_kills"):
        a, b = getattr(before, name), getattr(after, name)
        if a is not None and b is not None and b > a:
            out[name] = b - a
    return out


def _read_small(path: str) -> str | None:
    if not path:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        return os.read(fd, 4096).decode("ascii", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def read_counters(files: CounterFiles, read: Callable[[str], str | None] = _read_small) -> LimitCounters:
    """Read the counters now (two small reads of kernel files; a missing group reads as unknown)."""
    return parse_counters(read(files.pids_events), read(files.memory))
