"""A uid of its own for every worker (the policy's ``worker_uids``): which uid, and handing a folder to it.

Why: with one sandbox uid for every worker, everything the kernel counts *per user* is shared by all toolboxes:
pending signals, POSIX message queue bytes, ``RLIMIT_NPROC``, pipe buffer pages (and inotify instances, were they
not refused by the seccomp filter). One toolbox can use up such a count and make another fail. A uid per worker
gives each toolbox its own counts. (The keyrings and SysV IPC, which a shared uid would also share, are closed off
by the seccomp filter and the worker's IPC namespace either way.)

:func:`assign_worker_uids` (pure) gives each toolbox a uid from the range that depends only on its name (a hash,
with linear probing in name order on a collision), so a toolbox keeps its uid from run to run and its files stay
its own. :func:`take_ownership` hands a worker's own folders to its uid when they belong to another (the range or
the hash slot changed), without following symbolic links.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable

__all__ = ["TooManyWorkers", "assign_worker_uids", "take_ownership"]


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


def take_ownership(path: str, uid: int, gid: int) -> int:
    """Give ``path`` and everything below it to ``uid``:``gid`` when ``path`` itself belongs to another uid.

    Symbolic links are changed themselves, never followed; other mount points are not entered. Returns how many
    entries were changed (0 when ``path`` already belonged to ``uid``).
    """
    try:
        top = os.lstat(path)
    except FileNotFoundError:
        return 0
    if top.st_uid == uid:
        return 0
    changed = 0
    for root, dirs, files in os.walk(path, followlinks=False):
        dirs[:] = [d for d in dirs if not os.path.ismount(os.path.join(root, d))]
        for name in (*dirs, *files):
            full = os.path.join(root, name)
            try:
                os.lchown(full, uid, gid)
                changed += 1
            except FileNotFoundError:
                continue
    os.lchown(path, uid, gid)
    return changed + 1
