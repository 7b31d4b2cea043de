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

This module is the pure part: the table's contents, :func:`plan_identities` (which number for which toolbox) and
:class:`IdentityRequest` (what one plan asks). Reading and recording are ``_identity_store.py``'s: allocation is
recorded under ``flock`` on ``<state_dir>/identities.lock``, then under the registry's lock.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from supervisor._errors import PolicyRefused

from ._agent_bindings import AgentFile, bind_agents
from ._uid_registry import Holder, HostRegistry

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from supervisor.config import ConfigProblem

__all__ = [
    "TABLE_FILE",
    "IdentitiesChanged",
    "IdentityPlan",
    "IdentityRequest",
    "IdentityTable",
    "TooManyWorkers",
    "WorkerIdentity",
    "plan_identities",
]

TABLE_FILE = "identities.json"
_VERSION = 1


class TooManyWorkers(PolicyRefused):
    """The ``worker_uids`` range holds no free uid for a new toolbox."""


class IdentitiesChanged(PolicyRefused):
    """The identity table or the registry gave other identities when a plan was applied than when it was made
    (another supervisor recorded numbers meanwhile); nothing was recorded. Read the facts and plan again. Unlike
    :class:`TooManyWorkers` it says nothing about the policy: a second plan normally succeeds."""


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


@dataclass(frozen=True)
class IdentityRequest:
    """What one plan asks of the identity table and the host-wide registry (everything :func:`plan_identities`
    takes besides those two): made by planning from the policy and the host's facts, answered from the tables as
    read (``check``, planning) and again under their locks when the plan is applied (``_identity_store.py``).

    ``first`` ``None``: no uids (``worker_uids: null``, or not root), agent bindings only; ``registry``: the
    host-wide registry's directory (``None`` exactly when ``first`` is).
    """

    state_dir: str
    agents: Mapping[str, AgentFile | str]
    workers: tuple[str, ...]
    first: int | None
    count: int
    agent_prefix: Mapping[str, str] = field(default_factory=dict)
    registry: str | None = None

    @property
    def table_path(self) -> str:
        return os.path.join(self.state_dir, TABLE_FILE)

    def plan(self, table: IdentityTable, host: HostRegistry | None) -> IdentityPlan:
        """:func:`plan_identities` of this request on ``table`` and ``host`` (pure).

        Raises:
            TooManyWorkers: the range has no free number left for a new toolbox.
        """
        return plan_identities(
            table,
            self.agents,
            self.workers,
            first=self.first,
            count=self.count,
            table_path=self.table_path,
            agent_prefix=self.agent_prefix,
            host=host,
            state_dir=self.state_dir,
            registry_path=self.registry or "",
        )
