"""A policy plan applied: the effects a plan needs before its workers start, in order, and how to take them back.

:func:`apply_plan` does, as root and only through directory fds that never follow a link (``sandbox._dirfd``):

0. the state dir, root's, 0711 (``_compile.stage_code`` made it already when it staged the worker code);
1. **identities** (``_identity_store.record_identities``): the plan's request asked again under the table's and
   the registry's locks and recorded. First, so that a number is claimed before any folder is owned by it. When
   another supervisor recorded numbers since the plan was made and the answer differs, nothing is written and
   :class:`IdentitiesChanged` is raised: plan again (``_compile.compile_policy`` does, a few times);
2. **the CA's certificate** (``_tls_termination.write_ca_file``) when a worker terminates TLS: the file the plan
   granted those workers;
3. **each worker's folders** (work folder with ``tmp``, state folder), owned by its uid, 0700, the folders above
   them root's, 0711; a folder of the worker's former uid is handed over first. A toolbox whose folders cannot be
   made safely is that toolbox's load error (its spec is left out), the others go on.

:meth:`AppliedPlan.rollback` takes back what this apply made: the folders it created (deepest first, each only
while empty) and the CA file it wrote (first); a start or reload that fails after the apply calls it, one that
goes through calls :meth:`AppliedPlan.keep` instead (``supervisor/_running.py``). Identity records are kept: a
number once given stays its toolbox's (``_uid_registry.py``), and planning again gives the same; a worker of
another supervisor on the same state dir may run under it already (docs/DECISIONS.md). An exception or
cancellation during :func:`apply_plan` rolls back what it made so far, then propagates.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sandbox import ensure_dir, ensure_path, open_anchor, open_dir, reown_tree

from ._compiled import load_error
from ._identities import IdentitiesChanged
from ._identity_store import record_identities
from ._tls_termination import ca_file_path, write_ca_file

if TYPE_CHECKING:
    from supervisor.workers import WorkerSpec

    from ._compiled import CompiledPolicy
    from ._policy_plan import PolicyPlan

__all__ = ["AppliedPlan", "IdentitiesChanged", "apply_plan", "prepare_worker_folders"]


@dataclass
class AppliedPlan:
    """What :func:`apply_plan` did: the policy as applied, and what :meth:`rollback` takes back."""

    #: the plan's policy, without the toolboxes whose folders could not be made (their load errors added)
    compiled: CompiledPolicy
    #: the folders this apply created, in the order made (absolute paths; the CA's folder among them)
    made: list[str] = field(default_factory=list)
    #: the CA file this apply wrote (``None``: none, or it was there already)
    ca_file: str | None = None

    def rollback(self) -> None:
        """Remove what this apply made (module docstring); what cannot be removed (a folder no longer empty, gone,
        or replaced) is left. Never raises ``OSError``; calling it twice is fine."""
        state_dir = self.compiled.state_dir
        for path in [*([self.ca_file] if self.ca_file else []), *reversed(self.made)]:
            with contextlib.suppress(OSError):
                _remove(state_dir, path, folder=path != self.ca_file)
        self.made, self.ca_file = [], None

    def keep(self) -> None:
        """What this apply made is the running policy's from now on (its generation runs): :meth:`rollback` takes
        back nothing after this."""
        self.made, self.ca_file = [], None


def _remove(state_dir: str, path: str, *, folder: bool) -> None:
    """Remove ``path`` (beneath ``state_dir``) through dir fds that never follow a link: a folder only when empty."""
    *above, name = os.path.relpath(path, state_dir).split(os.sep)
    fd = open_anchor(state_dir)
    try:
        for part in above:
            child = open_dir(fd, part)
            os.close(fd)
            fd = child
        if folder:
            os.rmdir(name, dir_fd=fd)
        else:
            os.unlink(name, dir_fd=fd)
    finally:
        os.close(fd)


def _first_missing(anchor: int, parts: list[str]) -> int:
    """How many leading components of ``parts`` exist beneath ``anchor`` as folders (not followed through links)."""
    fd = os.dup(anchor)
    try:
        for i, part in enumerate(parts):
            try:
                child = open_dir(fd, part)
            except OSError:
                return i
            os.close(fd)
            fd = child
        return len(parts)
    finally:
        os.close(fd)


def prepare_worker_folders(anchor: int, state_dir: str, spec: WorkerSpec) -> list[str]:
    """The worker's work folder (with its ``tmp``) and state folder, under ``state_dir`` (open as ``anchor``),
    owned by the worker's uid with mode 0700; the folders above them root's, 0711. All through dir fds that never
    follow a link (``sandbox._dirfd``): a worker's link at ``tmp`` is replaced, never followed. A folder that
    belongs to another uid (the worker's uid changed) is handed over first, entry by entry, through fds. Returns
    the folders it created (not the ones it found), in the order made.

    Raises:
        UnsafeTreeError: a folder cannot be prepared safely (the toolbox is then left out, see the caller).
    """
    uid, gid = spec.plan.uid, spec.plan.gid
    made: list[str] = []
    for path in (spec.plan.workdir, spec.plan.payload["state_dir"]):
        parts = os.path.relpath(path, state_dir).split(os.sep)
        *above, name = parts
        found = _first_missing(anchor, parts)
        new = [os.path.join(state_dir, *parts[: i + 1]) for i in range(found, len(parts))]
        parent = ensure_path(anchor, above, mode=0o711, where=os.path.join(state_dir, *above))
        try:
            if uid is not None and gid is not None:
                reown_tree(parent, name, uid, gid)  # a worker whose uid changed gets its own files back
            own = ensure_dir(parent, name, mode=0o700, uid=uid, gid=gid, where=path)
            made += new
            try:
                if path == spec.plan.workdir:
                    os.close(ensure_dir(own, "tmp", mode=0o700, uid=uid, gid=gid, where=os.path.join(path, "tmp")))
                    if path in new:  # (a tmp inside a folder the worker already had is the worker's own business)
                        made.append(os.path.join(path, "tmp"))
            finally:
                os.close(own)
        finally:
            os.close(parent)
    return made


def apply_plan(plan: PolicyPlan) -> AppliedPlan:
    """Apply ``plan`` (module docstring). Not a checkpoint (synchronous file work: run it off the trio thread).

    Raises:
        IdentitiesChanged: plan again (nothing was recorded or made).
        ConfigError: a slug was bound to another agent file since the plan was made (nothing recorded).
        PolicyRefused: the identity table or the registry is damaged or not root's, the state dir is a copy.
        OSError: the state dir, the registry or the CA file cannot be written (what was made is taken back).
    """
    compiled = plan.compiled
    os.close(open_anchor(compiled.state_dir, mode=0o711))  # made by stage_code already, unless staging was skipped
    recorded = record_identities(plan.identities, expected=plan.planned_identities)
    registry, state_id = plan.identities.registry, recorded.table.state_id
    applied = AppliedPlan(
        dataclasses.replace(
            compiled,
            specs=list(compiled.specs),
            load_errors=list(compiled.load_errors),
            uid_claim=(registry, state_id) if registry is not None and state_id is not None else None,
        )
    )
    try:
        ca = plan.ca
        if ca is not None:
            path = ca_file_path(compiled.state_dir, ca)
            fresh = [p for p in (os.path.dirname(path), path) if not os.path.lexists(p)]
            write_ca_file(compiled.state_dir, ca)  # the workers are granted this file
            applied.made += [p for p in fresh if p != path]  # its folder, when made now
            applied.ca_file = path if path in fresh else None
        anchor = open_anchor(compiled.state_dir)
        try:
            for spec in list(applied.compiled.specs):
                try:
                    applied.made += prepare_worker_folders(anchor, compiled.state_dir, spec)
                except Exception as exc:  # unsafe or impossible: this toolbox's load error, the others start
                    tb = plan.origins[(spec.agent, spec.toolbox)]
                    applied.compiled.load_errors.append(load_error(tb, "its work and state folders", exc))
                    applied.compiled.specs.remove(spec)
        finally:
            os.close(anchor)
    except BaseException:
        applied.rollback()
        raise
    kept = {(s.agent, s.toolbox) for s in applied.compiled.specs}
    applied.compiled.git_sources = [g for g in compiled.git_sources if (g.agent, g.toolbox) in kept]
    return applied
