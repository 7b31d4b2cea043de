"""The identity table of a state dir (``<state_dir>/identities.json``): which agent file owns a slug, and the uid
and gid of each (agent, toolbox) worker. Kept across restarts and shared by every supervisor using the state dir.

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
  keeps its uids), then the next free one.
- **Agents**: a slug is bound to the canonical path of the agent file that first claimed it. Editing that file
  changes nothing; another file claiming the slug is refused with a load error naming both files and the way to
  re-bind (``agents-supervise rebind-agent SLUG FILE``, which hands the slug, with its uids and folders, over).

Allocation happens under ``flock`` on ``<state_dir>/identities.lock`` (an open file description lock, so two
supervisors in one process exclude each other too), opened through the state dir's fd with ``O_NOFOLLOW``; the
table is written whole to a temporary file and renamed into place. :func:`plan_identities` is the pure part.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sandbox._dirfd import open_anchor
from supervisor._errors import PolicyRefused
from supervisor.config import ConfigError, ConfigProblem, display_path

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping

__all__ = [
    "TABLE_FILE",
    "IdentityPlan",
    "IdentityTable",
    "TooManyWorkers",
    "WorkerIdentity",
    "assign_identities",
    "plan_identities",
    "rebind_agent",
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
    """The table's contents: ``agents`` slug -> canonical agent file; ``workers`` ``slug/toolbox`` -> identity;
    ``retired``: numbers once given and never given again."""

    agents: dict[str, str] = field(default_factory=dict)
    workers: dict[str, WorkerIdentity] = field(default_factory=dict)
    retired: set[int] = field(default_factory=set)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": _VERSION,
            "agents": {s: {"file": f} for s, f in sorted(self.agents.items())},
            "workers": {k: {"uid": w.uid, "gid": w.gid} for k, w in sorted(self.workers.items())},
            "retired": sorted(self.retired),
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> IdentityTable:
        try:
            if data.get("version") != _VERSION:
                raise ValueError(f"version {data.get('version')!r}, not {_VERSION}")
            return cls(
                agents={str(s): str(v["file"]) for s, v in data["agents"].items()},
                workers={str(k): WorkerIdentity(int(v["uid"]), int(v["gid"])) for k, v in data["workers"].items()},
                retired={int(n) for n in data["retired"]},
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
    """What :func:`plan_identities` decided: the table to keep, each worker's identity, and the slug conflicts."""

    table: IdentityTable
    workers: dict[str, WorkerIdentity]
    conflicts: list[ConfigProblem]
    changed: bool


def _slot(key: str, count: int) -> int:
    """The slot the former name hash gave (before the table), kept as the first choice."""
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % count


def plan_identities(
    table: IdentityTable,
    agents: Mapping[str, str],
    workers: Iterable[str],
    *,
    first: int | None,
    count: int,
    table_path: str = TABLE_FILE,
    agent_prefix: Mapping[str, str] | None = None,
) -> IdentityPlan:
    """Bind each agent slug to its file (``agents``: slug -> canonical path) and give each ``slug/toolbox`` of
    ``workers`` an identity from ``first .. first + count - 1`` (``first`` ``None``: no uids, bindings only). Pure:
    returns a new table.

    Raises:
        TooManyWorkers: the range has no free number left for a new toolbox.
    """
    new = IdentityTable(dict(table.agents), dict(table.workers), set(table.retired))
    conflicts: list[ConfigProblem] = []
    for slug, file in agents.items():
        bound = new.agents.get(slug)
        if bound is None:
            new.agents[slug] = file
        elif bound != file:
            prefix = (agent_prefix or {}).get(slug, "$")
            conflicts.append(
                ConfigProblem(
                    file,
                    f"{prefix}.slug",
                    f"agent slug {slug!r} belongs to {display_path(bound)} "
                    f"(identity table {display_path(table_path)}): "
                    "its uids, work folders and HOME are that file's, so this file cannot claim them",
                    f"another slug, or, if this file replaces that one, hand the slug over: agents-supervise "
                    f"rebind-agent {slug} {display_path(file)} --policy POLICY",
                )
            )
    out: dict[str, WorkerIdentity] = {}
    if first is not None:
        last = first + count - 1
        taken = {n for n in new.numbers() if first <= n <= last}
        for key in sorted(set(workers)):
            have = new.workers.get(key)
            if have is not None and first <= have.uid <= last and first <= have.gid <= last:
                out[key] = have
                continue
            if have is not None:  # outside the range the policy names now: retired, never handed out again
                new.retired |= {have.uid, have.gid}
            if len(taken) >= count:
                raise TooManyWorkers(
                    f"worker_uids {first}..{last} has no uid left for toolbox {key} (every uid "
                    "once given stays its toolbox's); make the range larger"
                )
            slot = _slot(key, count)
            while first + slot in taken:
                slot = (slot + 1) % count
            ident = WorkerIdentity(first + slot, first + slot)
            taken.add(ident.uid)
            new.workers[key] = out[key] = ident
    changed = new.to_json() != table.to_json()
    return IdentityPlan(new, out, conflicts, changed)


@contextmanager
def _locked(state_dir: str) -> Iterator[int]:
    anchor = open_anchor(state_dir)
    try:
        lock = os.open(_LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=anchor)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield anchor
        finally:
            os.close(lock)  # releases the lock
    finally:
        os.close(anchor)


def _read(anchor: int | None, state_dir: str) -> IdentityTable:
    where = os.path.join(state_dir, TABLE_FILE)
    try:
        if anchor is None:
            fd = os.open(where, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        else:
            fd = os.open(TABLE_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=anchor)
    except FileNotFoundError:
        return IdentityTable()
    with os.fdopen(fd, "rb") as f:
        raw = f.read()
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PolicyRefused(
            f"the identity table {where} is not JSON ({exc}); nothing was started. Restore it from a backup"
        ) from exc
    return IdentityTable.from_json(data, where)


def _write(anchor: int, table: IdentityTable) -> None:
    tmp = f".{TABLE_FILE}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=anchor)
    with os.fdopen(fd, "w") as f:
        json.dump(table.to_json(), f, indent=1)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, TABLE_FILE, src_dir_fd=anchor, dst_dir_fd=anchor)
    os.fsync(anchor)


def assign_identities(
    state_dir: str,
    agents: Mapping[str, str],
    workers: Iterable[str],
    *,
    first: int | None,
    count: int,
    persist: bool,
    agent_prefix: Mapping[str, str] | None = None,
) -> dict[str, WorkerIdentity]:
    """Bind ``agents`` and give ``workers`` their identities from the table in ``state_dir``; with ``persist``
    (a starting supervisor) under the lock and written back, without (``check``) only read, nothing created.

    Raises:
        ConfigError: a slug is bound to another agent file (every such slug is named).
        TooManyWorkers: the range is full.
        PolicyRefused: the table is damaged.
    """
    table_path = os.path.join(state_dir, TABLE_FILE)
    if not persist:
        plan = plan_identities(
            _read(None, state_dir) if os.path.isdir(state_dir) else IdentityTable(),
            agents,
            workers,
            first=first,
            count=count,
            table_path=table_path,
            agent_prefix=agent_prefix,
        )
    else:
        with _locked(state_dir) as anchor:
            plan = plan_identities(
                _read(anchor, state_dir),
                agents,
                workers,
                first=first,
                count=count,
                table_path=table_path,
                agent_prefix=agent_prefix,
            )
            if not plan.conflicts and plan.changed:
                _write(anchor, plan.table)
    if plan.conflicts:
        raise ConfigError(plan.conflicts)
    return plan.workers


def rebind_agent(state_dir: str, slug: str, agent_file: str) -> str | None:
    """Bind ``slug`` to ``agent_file`` (canonical path) in the table of ``state_dir``, keeping the slug's workers
    (uids, folders). Returns the file it was bound to before (``None``: it was not bound)."""
    path = os.path.realpath(agent_file)
    with _locked(state_dir) as anchor:
        table = _read(anchor, state_dir)
        before = table.agents.get(slug)
        table.agents[slug] = path
        _write(anchor, table)
    return before
