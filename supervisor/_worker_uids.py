"""A uid of its own for every worker (the policy's ``worker_uids``): which uid, and handing a folder to it.

Why: with one sandbox uid for every worker, everything the kernel counts *per user* is shared by all toolboxes:
pending signals, POSIX message queue bytes, ``RLIMIT_NPROC``, pipe buffer pages (and inotify instances, were they
not refused by the seccomp filter). One toolbox can use up such a count and make another fail. A uid per worker
gives each toolbox its own counts. (The keyrings and SysV IPC, which a shared uid would also share, are closed off
by the seccomp filter and the worker's IPC namespace either way.)

:func:`assign_worker_uids` (pure) gives each toolbox a uid from the range that depends only on its name (a hash,
with linear probing in name order on a collision), so a toolbox keeps its uid from run to run and its files stay
its own. Handing a worker's folders to its uid when they belong to another is ``sandbox._dirfd.reown_tree``'s job
(through dir fds, never by path).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

__all__ = ["TooManyWorkers", "assign_worker_uids"]


class TooManyWorkers(ValueError):
    """More toolboxes than uids in the range."""


def assign_worker_uids(keys: Iterable[str], first: int, count: int) -> dict[str, int]:
    """A distinct uid in ``first .. first + count - 1`` for each key (``agent-slug/toolbox``). Pure.

    Raises:
        TooManyWorkers: more keys than uids.
    """
    ordered = sorted(set(keys))
    if len(ordered) > count:
        raise TooManyWorkers(f"{len(ordered)} toolboxes need a uid each and worker_uids.count is {count}")
    taken: set[int] = set()
    out: dict[str, int] = {}
    for key in ordered:
        slot = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % count
        while slot in taken:
            slot = (slot + 1) % count
        taken.add(slot)
        out[key] = first + slot
    return out
