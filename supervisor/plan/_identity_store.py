"""The identity table and the host-wide uid registry read and recorded: the I/O around ``_identities.py``.

- :func:`read_identities` reads both as they are now, without a lock and without making anything (what planning and
  ``check`` see: a state dir or registry that does not exist reads as empty).
- :func:`record_identities` applies a plan's :class:`~._identities.IdentityRequest`: under ``flock`` on
  ``<state_dir>/identities.lock`` (an open file description lock, so two supervisors in one process exclude each
  other too), opened through the state dir's fd with ``O_NOFOLLOW``, then under the registry's lock, it reads both
  again, plans again (another supervisor may have recorded numbers since they were read) and writes what changed:
  the registry first (a crash leaves a number claimed, never given twice), then the table, each whole to a temporary
  file renamed into place. A state dir whose id the registry knows at another path that still holds it (a copy) is
  refused here.

Nothing recorded is ever taken back: a number once given stays its toolbox's (``_uid_registry.py``), so applying a
plan again gives the same numbers, and a rolled-back start leaves only these records.
"""

from __future__ import annotations

import os
import secrets
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sandbox import open_anchor
from supervisor._errors import PolicyRefused
from supervisor.config import ConfigError

from ._agent_bindings import agent_file_identity, bind_agents, loaded_agent_claim
from ._identities import TABLE_FILE, IdentitiesChanged, IdentityPlan, IdentityRequest, IdentityTable
from ._locked_json import flocked, read_json, write_json
from ._uid_registry import HostRegistry, locked_registry, read_registry, registry_dir, write_registry

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping

    from supervisor.config import LoadedAgent

    from ._agent_bindings import AgentFile
    from ._identities import WorkerIdentity

__all__ = [
    "Assignment",
    "IdentitySnapshot",
    "assign_identities",
    "bound_elsewhere",
    "read_identities",
    "rebind_agent",
    "record_identities",
    "state_id_at",
]

_LOCK_FILE = "identities.lock"


@dataclass(frozen=True)
class IdentitySnapshot:
    """The identity table and the host-wide registry as read (``registry`` ``None``: not read, no uids asked)."""

    table: IdentityTable
    registry: HostRegistry | None


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


def _same(result: IdentityPlan, expected: Mapping[str, WorkerIdentity] | None) -> None:
    if expected is not None and not result.conflicts and result.workers != dict(expected):
        changed = sorted(k for k in {*result.workers, *expected} if result.workers.get(k) != expected.get(k))
        raise IdentitiesChanged(
            f"the identity table or the uid registry changed since the plan was made (another supervisor recorded "
            f"uids meanwhile): {', '.join(changed[:5])} would get other uids; plan again"
        )


def bound_elsewhere(state_dir: str) -> Callable[[LoadedAgent], str | None]:
    """For ``expand_agents``: why a sub-agent file cannot have its slug in ``state_dir`` (bound in the identity
    table to another file, or to this path as another owner's file), or ``None``. Such a sub-agent is then the naming
    agent's load error instead of a ``ConfigError`` that would stop every tenant when the plan binds the slugs. A
    table that cannot be read judges nothing here (the plan reports it)."""
    state_dir = os.path.abspath(state_dir)
    try:
        bound = read_identities(state_dir, None).table.agents
    except (OSError, PolicyRefused):
        bound = {}
    table = os.path.join(state_dir, TABLE_FILE)

    def refusal(agent: LoadedAgent) -> str | None:
        if agent.slug not in bound:
            return None
        claim = {agent.slug: loaded_agent_claim(agent)}
        conflicts = bind_agents({agent.slug: bound[agent.slug]}, claim, table, {})
        return f"{conflicts[0].message}; {conflicts[0].expected}" if conflicts else None

    return refusal


def read_identities(state_dir: str, registry: str | None) -> IdentitySnapshot:
    """The table of ``state_dir`` and the registry in ``registry`` (``None``: not read) as they are now: no lock
    taken, nothing made (a missing state dir or registry reads as empty).

    Raises:
        PolicyRefused: the table or the registry is damaged, or the registry is not root's alone.
    """
    table = _read(None, state_dir) if os.path.isdir(state_dir) else IdentityTable()
    return IdentitySnapshot(table, read_registry(registry) if registry is not None else None)


def record_identities(
    request: IdentityRequest, *, expected: Mapping[str, WorkerIdentity] | None = None
) -> IdentityPlan:
    """Apply ``request`` (module docstring): plan it again under both locks on the tables as they are then, record
    the result, and return it. ``expected``: the identities a plan was made with; when the tables now give others,
    nothing is written.

    Raises:
        IdentitiesChanged: the tables give other identities than ``expected`` (plan again).
        ConfigError: a slug is bound to another agent file or another owner's file (nothing is written).
        TooManyWorkers: the range is full.
        PolicyRefused: a table or the registry is damaged, the registry is not root's, the state dir is a copy.
        OSError: the state dir or the registry cannot be opened or written.
    """
    with _locked(request.state_dir) as anchor:
        table = _read(anchor, request.state_dir)
        fresh_id = request.registry is not None and table.state_id is None
        if request.registry is None:
            result = request.plan(table, None)
            _same(result, expected)
        else:
            if table.state_id is None:
                table.state_id = secrets.token_hex(16)
            with locked_registry(request.registry) as (reg_fd, host):
                _check_not_a_copy(host, table.state_id, request.state_dir, request.registry)
                result = request.plan(table, host)
                _same(result, expected)
                if not result.conflicts and result.host_changed and result.host is not None:
                    write_registry(reg_fd, result.host)  # the host's record first: a crash leaves it claimed
        if not result.conflicts and (result.changed or fresh_id):
            _write(anchor, result.table)
    if result.conflicts:
        raise ConfigError(result.conflicts)
    return result


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
    ``persist`` recorded (:func:`record_identities`), without only read and planned (:func:`read_identities`),
    nothing created.

    Raises:
        ConfigError: a slug is bound to another agent file or another owner's file (every such slug is named).
        TooManyWorkers: the range is full.
        PolicyRefused: a table or the registry is damaged, the registry is not root's, the state dir is a copy.
    """
    request = IdentityRequest(
        state_dir,
        agents,
        tuple(workers),
        first,
        count,
        dict(agent_prefix or {}),
        registry_dir(registry, os.environ) if first is not None else None,
    )
    if persist:
        result = record_identities(request)
    else:
        seen = read_identities(state_dir, request.registry)
        result = request.plan(seen.table, seen.registry)
        if result.conflicts:
            raise ConfigError(result.conflicts)
    return Assignment(
        result.workers, result.notes, request.registry, result.table.state_id if request.registry is not None else None
    )


def rebind_agent(state_dir: str, slug: str, agent_file: str) -> tuple[str, str | None]:
    """Bind ``slug`` to ``agent_file`` (absolute, as named: bound as :func:`agent_file_identity` says, with its
    owner and inode as they are now) in the table of ``state_dir``, keeping the slug's workers (uids, folders).
    Returns the path bound and the one bound before (``None``: it was not bound)."""
    claim = agent_file_identity(agent_file)
    with _locked(state_dir) as anchor:
        table = _read(anchor, state_dir)
        before = table.agents.get(slug)
        table.agents[slug] = claim
        _write(anchor, table)
    return claim.file, before.file if before is not None else None
