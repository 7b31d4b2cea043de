"""The operator's view of the host-wide uid registry, and releasing the uids of a state dir that is gone
(``agents-supervise uids list``, ``agents-supervise uids release --state-dir-id ID``).

The registry (``_uid_registry.py``) never frees a number by itself: a range would be used up over time by state
dirs that no longer exist. Only the operator frees them, one state dir at a time, and only when:

- no state dir with that id is where the registry last saw it (a state dir that exists keeps its uids; one that
  moved is known at its new place once a supervisor starts there);
- no running supervisor holds it (``UidHold``: its folder may have been removed under it while its workers run);
- no process runs as one of its uids (a worker left behind, a command someone started as that uid).

Even then files those uids own may be left outside the state dir (FileSandbox folders, folders shared by several
toolboxes, the host's ``/tmp``): the next toolbox given such a uid owns them. The release says so, with the numbers
to look for. The pure parts (:func:`state_dirs`, :func:`release_refusal`, :func:`without_state`) are tested apart
from the registry's files and the process table.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import psutil

from supervisor._errors import PolicyRefused

from ._identity_store import state_id_at
from ._uid_registry import (
    HostRegistry,
    held_by_supervisor,
    held_lock_name,
    locked_registry,
    read_registry,
    write_registry,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

__all__ = [
    "ReleaseRefused",
    "StateDirUids",
    "files_warning",
    "list_state_dirs",
    "processes_of",
    "release_refusal",
    "release_state_dir",
    "state_dirs",
    "uid_ranges",
    "without_state",
]

#: The holder name the identity tables give numbers retired from a range (never handed out again).
RETIRED = "(retired)"


class ReleaseRefused(PolicyRefused):
    """``uids release`` refused: the state dir exists, a supervisor holds it, a process runs as one of its uids, or
    the registry knows no such state dir. The message says which and what to do."""


@dataclass(frozen=True)
class StateDirUids:
    """One state dir in the registry: its id, where it was last seen, whether a state dir with that id is there
    now (``present``), whether a running supervisor holds it (``held``), its numbers and the toolboxes holding
    them (``slug/toolbox``; numbers retired from a range have none)."""

    state_id: str
    path: str
    present: bool
    held: bool
    numbers: tuple[int, ...]
    toolboxes: tuple[str, ...]

    @property
    def status(self) -> str:
        """``exists``, ``gone`` or ``gone, held by a running supervisor``."""
        if self.present:
            return "exists"
        return "gone, held by a running supervisor" if self.held else "gone"


def state_dirs(
    registry: HostRegistry, *, present: Callable[[str, str], bool], held: Callable[[str], bool]
) -> list[StateDirUids]:
    """Every state dir the registry holds numbers for (or knows a path of), by last-seen path then id.
    ``present(state_id, path)``: a state dir with that id is at ``path``; ``held(state_id)``: a supervisor holds it."""
    ids = sorted({h.state for h in registry.numbers.values()} | set(registry.states))
    out: list[StateDirUids] = []
    for sid in ids:
        path = registry.states.get(sid, "")
        numbers = tuple(sorted(n for n, h in registry.numbers.items() if h.state == sid))
        boxes = tuple(sorted({h.toolbox for h in registry.numbers.values() if h.state == sid} - {RETIRED}))
        out.append(StateDirUids(sid, path, bool(path) and present(sid, path), held(sid), numbers, boxes))
    return sorted(out, key=lambda r: (r.path, r.state_id))


def uid_ranges(numbers: Iterable[int]) -> str:
    """``3000000001-3000000003, 3000000007``: runs of consecutive numbers."""
    runs: list[list[int]] = []
    for n in sorted(numbers):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def release_refusal(record: StateDirUids | None, state_id: str, running: Mapping[int, Sequence[str]]) -> str:
    """Why the uids of ``state_id`` may not be released (``record``: its entry, ``None`` when the registry has
    none; ``running``: uid -> the processes running as it, ``pid name``); empty when they may."""
    if record is None or not record.numbers:
        return (
            f"the uid registry holds no uids of a state dir with id {state_id}; 'agents-supervise uids list' shows "
            "the state dirs it knows and their ids"
        )
    if record.present:
        return (
            f"the state dir {record.path} (id {state_id}) still exists: its toolboxes keep their uids while it does. "
            "Remove that state dir first if it is no longer used (nothing is released until you do)"
        )
    if record.held:
        where = record.path or "an unknown path"
        return (
            f"a running supervisor holds the state dir id {state_id} (last seen at {where}): its workers may run as "
            "these uids even though the folder is gone. Stop that supervisor first"
        )
    busy = [f"uid {uid}: {', '.join(procs)}" for uid, procs in sorted(running.items()) if uid in record.numbers]
    if busy:
        return (
            f"processes run as uids of the state dir id {state_id}: {'; '.join(busy)}. Stop them first: a uid "
            "given to a new toolbox while they run would share it with them"
        )
    return ""


def without_state(registry: HostRegistry, state_id: str) -> HostRegistry:
    """``registry`` with the numbers of ``state_id`` freed and its path forgotten (pure: a new registry)."""
    out = registry.copy()
    out.numbers = {n: h for n, h in out.numbers.items() if h.state != state_id}
    out.states.pop(state_id, None)
    return out


def files_warning(numbers: Collection[int]) -> str:
    """What the operator must know before (and after) releasing ``numbers``: files they own outlive the state
    dir, and the next toolbox given such a uid owns them."""
    first = min(numbers) if numbers else 0
    return (
        f"files these uids own outside the state dir (FileSandbox folders, folders shared by several toolboxes, the "
        f"host's /tmp) are not removed: the next toolbox given one of these uids owns them. Find them first, e.g. "
        f"find / -xdev -uid {first} (for each uid: {uid_ranges(numbers)}), and remove them or give them to "
        "another owner"
    )


def processes_of(uids: Collection[int]) -> dict[int, list[str]]:
    """uid -> the processes (``pid name``) whose real, effective or saved uid is one of ``uids``."""
    found: dict[int, list[str]] = {}
    wanted = set(uids)
    for proc in psutil.process_iter(["pid", "name", "uids"]):
        ids = proc.info.get("uids")
        if ids is None:
            continue
        for uid in {*ids} & wanted:
            found.setdefault(uid, []).append(f"pid {proc.info['pid']} {proc.info.get('name') or ''}".rstrip())
    return found


def _present(state_id: str, path: str) -> bool:
    return state_id_at(path) == state_id


def list_state_dirs(path: str) -> list[StateDirUids]:
    """The state dirs of the registry at ``path`` as they are now (nothing is made or locked)."""
    registry = read_registry(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return state_dirs(registry, present=_present, held=lambda _sid: False)
    try:
        return state_dirs(registry, present=_present, held=lambda sid: held_by_supervisor(fd, sid))
    finally:
        os.close(fd)


def release_state_dir(path: str, state_id: str) -> StateDirUids:
    """Free the numbers of ``state_id`` in the registry at ``path`` (under its lock) and remove its hold file;
    returns what was released.

    Raises:
        ReleaseRefused: :func:`release_refusal` said why not (nothing changed).
        PolicyRefused: the registry is damaged, not root's, or ``state_id`` is no state id.
    """
    hold = held_lock_name(state_id)  # refuses a name that is no state id before anything is opened
    with locked_registry(path) as (fd, registry):
        records = state_dirs(registry, present=_present, held=lambda sid: held_by_supervisor(fd, sid))
        record = next((r for r in records if r.state_id == state_id), None)
        running = processes_of(record.numbers) if record is not None else {}
        refused = release_refusal(record, state_id, running)
        if refused:
            raise ReleaseRefused(refused)
        assert record is not None
        write_registry(fd, without_state(registry, state_id))
        try:
            os.unlink(hold, dir_fd=fd)
        except FileNotFoundError:
            pass
    return record
