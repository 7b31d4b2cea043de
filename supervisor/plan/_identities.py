"""The identity table of a state dir (``<state_dir>/identities.json``): which agent file owns a slug, and the uid
and gid of each (agent, toolbox) worker. Kept across restarts and shared by every supervisor using the state dir;
every number it gives is also claimed in the host-wide uid registry (``_uid_registry.py``), so no other state dir
or supervisor on the host ever gets it.

Why a uid per worker at all: with one sandbox uid for every worker, everything the kernel counts *per user* is shared
by all toolboxes (pending signals, POSIX message queue bytes, ``RLIMIT_NPROC``, pipe buffer pages), so one toolbox
can use up such a count and make another fail; and the file modes cannot tell two workers apart (Landlock up to ABI
7 does not mediate ``chmod``, ``utimensat``, ``*xattr``), so neither can a shared group.

Why a table: the work folder, HOME and toolbox state of ``<slug>/<toolbox>`` and the uid that owns them are the identity
of a tenant. A uid computed from the name (a hash made unique only within one process) gave two supervisors on one
state dir the same uid for colliding names, and moved toolboxes to new uids when an agent was added; an agent file
was known only by its slug, so any file with slug X got X's folders. The table fixes both:

- **Workers**: each ``slug/toolbox`` gets a uid from the policy's ``worker_uids`` range the first time it is seen,
  and the same number as its own gid (a private group: no other worker is in it). Numbers are never reused: a
  toolbox removed from the agent files keeps its entry, and an entry the range no longer holds (the policy's range
  changed) is retired, not freed. The first choice is the slot the former hash gave (so a state dir from before
  keeps its uids), then the next free one, never a number the host-wide registry gives another state dir's toolbox.
  A number this table holds but the registry gives another (two state dirs that collided before the registry) is
  not taken: the first to claim it keeps it, the other toolbox gets a new uid (its folders are handed over).
- **Agents**: a slug is bound to the canonical path of the agent file that first claimed it *and to that file's
  owner* (uid), with its device and inode recorded. Editing that file changes nothing (an editor that saves by
  rename makes a new inode of the same owner: recorded, accepted); another file claiming the slug, or a file of
  another owner put at the bound path once the first was removed, is refused with a load error naming both and the
  way to re-bind (``agents-supervise rebind-agent SLUG FILE``, which hands the slug, with its uids and folders,
  over).

Allocation happens under ``flock`` on ``<state_dir>/identities.lock`` (an open file description lock, so two
supervisors in one process exclude each other too), opened through the state dir's fd with ``O_NOFOLLOW``, then
under the registry's lock; each file is written whole to a temporary file and renamed into place.
:func:`plan_identities` is the pure part.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sandbox import open_anchor
from supervisor._errors import PolicyRefused
from supervisor.config import ConfigError, ConfigProblem

from ._agent_bindings import AgentFile, agent_file_identity, bind_agents
from ._locked_json import flocked, read_json, write_json
from ._uid_registry import Holder, HostRegistry, locked_registry, read_registry, registry_dir, write_registry

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping

__all__ = [
    "TABLE_FILE",
    "Assignment",
    "IdentityPlan",
    "IdentityTable",
    "TooManyWorkers",
    "WorkerIdentity",
    "assign_identities",
    "plan_identities",
    "rebind_agent",
    "state_id_at",
]

TABLE_FILE = "identities.json"
_LOCK_FILE = "identities.lock"
_VERSION = 1


class TooManyWorkers(PolicyRefused):
    """The ``worker_uids`` range holds no free uid for a new toolbox."""


@dataclass(frozen=True)
class WorkerIdentity:
    """The uid and the gid (its own group) one worker runs as."""

    uid: int
    gid: int


@dataclass
class IdentityTable:
    """The table's contents: ``agents`` slug -> the agent file bound to it; ``workers`` ``slug/toolbox`` ->
    identity; ``retired``: numbers once given and never given again; ``state_id``: the state dir's name in the
    host-wide uid registry (made with the first number it gives)."""

    agents: dict[str, AgentFile] = field(default_factory=dict)
    workers: dict[str, WorkerIdentity] = field(default_factory=dict)
    retired: set[int] = field(default_factory=set)
    state_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "version": _VERSION,
            "agents": {s: f.to_json() for s, f in sorted(self.agents.items())},
            "workers": {k: {"uid": w.uid, "gid": w.gid} for k, w in sorted(self.workers.items())},
            "retired": sorted(self.retired),
        }
        if self.state_id is not None:
            out["state_id"] = self.state_id
        return out

    @classmethod
    def from_json(cls, data: Any, where: str) -> IdentityTable:
        try:
            if data.get("version") != _VERSION:
                raise ValueError(f"version {data.get('version')!r}, not {_VERSION}")
            state_id = data.get("state_id")
            return cls(
                agents={str(s): AgentFile.from_json(v) for s, v in data["agents"].items()},
                workers={str(k): WorkerIdentity(int(v["uid"]), int(v["gid"])) for k, v in data["workers"].items()},
                retired={int(n) for n in data["retired"]},
                state_id=None if state_id is None else str(state_id),
            )
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise PolicyRefused(
                f"the identity table {where} is damaged ({exc}); nothing was started. Restore it from a backup: "
                "removing it would give toolboxes new uids (their folders are handed over at the next start) and "
                "let any agent file claim any slug again"
            ) from exc

    def numbers(self) -> set[int]:
        return {n for w in self.workers.values() for n in (w.uid, w.gid)} | self.retired


@dataclass
class IdentityPlan:
    """What :func:`plan_identities` decided: the table to keep, each worker's identity, the slug conflicts, the
    host-wide registry to keep (``None``: not consulted) and notes on numbers another state dir holds."""

    table: IdentityTable
    workers: dict[str, WorkerIdentity]
    conflicts: list[ConfigProblem]
    changed: bool
    host: HostRegistry | None = None
    host_changed: bool = False
    notes: list[str] = field(default_factory=list)


def _slot(key: str, count: int) -> int:
    """The slot the former name hash gave (before the table), kept as the first choice."""
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % count


def plan_identities(
    table: IdentityTable,
    agents: Mapping[str, AgentFile | str],
    workers: Iterable[str],
    *,
    first: int | None,
    count: int,
    table_path: str = TABLE_FILE,
    agent_prefix: Mapping[str, str] | None = None,
    host: HostRegistry | None = None,
    state_dir: str = "",
    registry_path: str = "",
) -> IdentityPlan:
    """Bind each agent slug to its file (``agents``: slug -> :class:`AgentFile`, or a bare canonical path whose
    owner is not checked) and give each ``slug/toolbox`` of ``workers`` an identity from ``first .. first + count -
    1`` (``first`` ``None``: no uids, bindings only). With ``host`` (the host-wide registry) no number another state
    dir's toolbox holds is given or kept, and every number of the table is claimed there for ``table.state_id``
    (the caller sets one before persisting; without one, as in ``check`` of a new state dir, every number the
    registry holds counts as another's). Pure: returns new tables.

    Raises:
        TooManyWorkers: the range has no free number left for a new toolbox.
    """
    new = IdentityTable(dict(table.agents), dict(table.workers), set(table.retired), table.state_id)
    conflicts = bind_agents(new.agents, agents, table_path, agent_prefix or {})
    reg = host.copy() if host is not None else None
    notes: list[str] = []
    mine = new.state_id

    def elsewhere(number: int, key: str) -> bool:
        held = reg.numbers.get(number) if reg is not None else None
        return held is not None and held != Holder(mine or "", key)

    out: dict[str, WorkerIdentity] = {}
    wanted = set(workers)
    if first is not None:
        last = first + count - 1
        for key, kept in sorted(new.workers.items()):
            clash = [n for n in (kept.uid, kept.gid) if elsewhere(n, key)]
            if clash:  # not this table's to give: the first claim wins
                assert reg is not None
                if key in wanted:
                    notes.append(
                        f"toolbox {key}: uid {clash[0]} is held host-wide by {reg.holder_text(clash[0])} (uid "
                        f"registry {registry_path or 'given'}); this toolbox gets a uid of its own instead, and its "
                        "folders are handed over at start"
                    )
                del new.workers[key]
                new.retired |= {n for n in (kept.uid, kept.gid) if n not in clash}
        taken = {n for n in new.numbers() if first <= n <= last}
        if reg is not None:
            taken |= {n for n in reg.numbers if first <= n <= last}
        for key in sorted(wanted):
            have = new.workers.get(key)
            if have is not None and first <= have.uid <= last and first <= have.gid <= last:
                out[key] = have
                continue
            if have is not None:  # outside the range the policy names now: retired, never handed out again
                new.retired |= {have.uid, have.gid}
            if len(taken) >= count:
                raise TooManyWorkers(
                    f"worker_uids {first}..{last} has no uid left for toolbox {key} (every uid once given stays "
                    f"its toolbox's, on the whole host: uid registry {registry_path or 'given'}); make the range "
                    "larger or give this policy a range of its own"
                )
            slot = _slot(key, count)
            while first + slot in taken:
                slot = (slot + 1) % count
            ident = WorkerIdentity(first + slot, first + slot)
            taken.add(ident.uid)
            new.workers[key] = out[key] = ident
    host_changed = False
    if reg is not None and mine is not None and first is not None:
        claims = {w.uid: k for k, w in new.workers.items()} | {n: "(retired)" for n in new.retired}
        for number, key in claims.items():
            if number not in reg.numbers:
                reg.numbers[number] = Holder(mine, key)
                host_changed = True
        if state_dir and reg.states.get(mine) != state_dir:
            reg.states[mine] = state_dir
            host_changed = True
    changed = new.to_json() != table.to_json()
    return IdentityPlan(new, out, conflicts, changed, reg, host_changed, notes)


@contextmanager
def _locked(state_dir: str) -> Iterator[int]:
    anchor = open_anchor(state_dir)
    try:
        with flocked(anchor, _LOCK_FILE):
            yield anchor
    finally:
        os.close(anchor)


def _read(anchor: int | None, state_dir: str) -> IdentityTable:
    where = os.path.join(state_dir, TABLE_FILE)
    fd = anchor if anchor is not None else os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        data = read_json(fd, TABLE_FILE, what=f"the identity table {where}")
    finally:
        if anchor is None:
            os.close(fd)
    return IdentityTable() if data is None else IdentityTable.from_json(data, where)


def _write(anchor: int, table: IdentityTable) -> None:
    write_json(anchor, TABLE_FILE, table.to_json(), mode=0o644)


def state_id_at(path: str) -> str | None:
    """The state id the identity table of the state dir at ``path`` holds (``None``: no state dir there, no table,
    a table without one, or one that cannot be read). Only reads."""
    if not os.path.isdir(path):
        return None
    try:
        return _read(None, path).state_id
    except (OSError, PolicyRefused):
        return None


def _check_not_a_copy(host: HostRegistry, state_id: str, state_dir: str, registry: str) -> None:
    """Refuse a state dir whose id the registry knows at another path that still holds it: a copy, whose toolboxes
    would run as the original's uids. A state dir that moved (nothing of it left at the old path) keeps its id."""
    seen = host.states.get(state_id)
    if seen is None or seen == state_dir:
        return
    if state_id_at(seen) == state_id:
        raise PolicyRefused(
            f"the state dir {state_dir} has the identity of the state dir {seen} (state_id {state_id} in both "
            f"identity tables; uid registry {registry}): a copy, whose toolboxes would run as the other's uids. "
            f"Give the copy its own: remove state_id from {os.path.join(state_dir, TABLE_FILE)} (its toolboxes get "
            "new uids and their folders are handed over at the next start)"
        )


@dataclass(frozen=True)
class Assignment:
    """What :func:`assign_identities` gave: each worker's identity, notes for the operator, the registry asked."""

    workers: dict[str, WorkerIdentity]
    notes: list[str] = field(default_factory=list)
    #: the host-wide uid registry's directory (``None``: no uids were assigned)
    registry: str | None = None
    #: the state dir's id in that registry (``None``: none kept yet, as in ``check`` of a new state dir)
    state_id: str | None = None


def assign_identities(
    state_dir: str,
    agents: Mapping[str, AgentFile | str],
    workers: Iterable[str],
    *,
    first: int | None,
    count: int,
    persist: bool,
    agent_prefix: Mapping[str, str] | None = None,
    registry: str | None = None,
) -> Assignment:
    """Bind ``agents`` and give ``workers`` their identities from the table in ``state_dir`` and the host-wide
    registry (``registry``: its directory; ``None``: the environment's or the default, ``_uid_registry.py``); with
    ``persist`` (a starting supervisor) under both locks and written back, without (``check``) only read, nothing
    created.

    Raises:
        ConfigError: a slug is bound to another agent file or another owner's file (every such slug is named).
        TooManyWorkers: the range is full.
        PolicyRefused: a table or the registry is damaged, the registry is not root's, the state dir is a copy.
    """
    table_path = os.path.join(state_dir, TABLE_FILE)
    workers = list(workers)
    where = registry_dir(registry, os.environ) if first is not None else None

    def plan(table: IdentityTable, host: HostRegistry | None) -> IdentityPlan:
        return plan_identities(
            table,
            agents,
            workers,
            first=first,
            count=count,
            table_path=table_path,
            agent_prefix=agent_prefix,
            host=host,
            state_dir=state_dir,
            registry_path=where or "",
        )

    if not persist:
        table = _read(None, state_dir) if os.path.isdir(state_dir) else IdentityTable()
        result = plan(table, read_registry(where) if where is not None else None)
    else:
        with _locked(state_dir) as anchor:
            table = _read(anchor, state_dir)
            fresh_id = where is not None and table.state_id is None
            if where is None:
                result = plan(table, None)
            else:
                if table.state_id is None:
                    table.state_id = secrets.token_hex(16)
                with locked_registry(where) as (reg_fd, host):
                    _check_not_a_copy(host, table.state_id, state_dir, where)
                    result = plan(table, host)
                    if not result.conflicts and result.host_changed and result.host is not None:
                        write_registry(reg_fd, result.host)  # the host's record first: a crash leaves it claimed
            if not result.conflicts and (result.changed or fresh_id):
                _write(anchor, result.table)
    if result.conflicts:
        raise ConfigError(result.conflicts)
    return Assignment(result.workers, result.notes, where, result.table.state_id if where is not None else None)


def rebind_agent(state_dir: str, slug: str, agent_file: str) -> str | None:
    """Bind ``slug`` to ``agent_file`` (canonical path, its owner and inode as they are now) in the table of
    ``state_dir``, keeping the slug's workers (uids, folders). Returns the file it was bound to before (``None``: it
    was not bound)."""
    claim = agent_file_identity(agent_file)
    with _locked(state_dir) as anchor:
        table = _read(anchor, state_dir)
        before = table.agents.get(slug)
        table.agents[slug] = claim
        _write(anchor, table)
    return before.file if before is not None else None
