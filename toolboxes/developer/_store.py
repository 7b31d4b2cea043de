"""Durable state of the Developer toolbox, under the worker's state folder: snapshots, edit sessions, and the
atomic file write every tool uses.

Layout: ``<state_dir>/developer/<sha256(caller session)[:32]>/``

- ``snapshots/<md5>``: file contents by their snapshot ref (MD5), taken when a file is read and before each
  write, for ``restore-file``. Only the caller's session sees its snapshots.
- ``edits/<sha256(path, edit session id)[:32]>.json``: a staged edit session: the path, the ref of the
original
  it numbers lines against, its edits, its status and when it was last used.

Everything is written with :func:`atomic_write`, so a worker killed at any point leaves each file old or
new and
the state readable after a restart.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from .._atomic import atomic_write

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["EDIT_SESSION_IDLE_S", "EditSession", "Store", "atomic_write", "snapshot_ref"]

#: An edit session untouched for this long is dropped (seed: 1 h idle expiry).
EDIT_SESSION_IDLE_S = 3600.0


def snapshot_ref(content: bytes) -> str:
    """The seed's snapshot reference: the MD5 of the content, in hex."""
    return hashlib.md5(content, usedforsecurity=False).hexdigest()


@dataclass
class EditSession:
    """A staged edit session (see the module docstring). ``edits`` hold ``[range label, content block]``."""

    session_id: str
    path: str
    base_ref: str
    edits: list[list[str]] = field(default_factory=list)
    status: str = "staged"
    last_used: float = field(default_factory=time.time)

    def expired(self, now: float | None = None) -> bool:
        return (now if now is not None else time.time()) - self.last_used > EDIT_SESSION_IDLE_S


class Store:
    """The state of one caller session. Thread-safe enough for one worker: every file is replaced
    atomically."""

    def __init__(self, state_dir: str, caller_session: str, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        key = hashlib.sha256(caller_session.encode()).hexdigest()[:32]
        self.root = os.path.join(state_dir, "developer", key)
        self.snapshots = os.path.join(self.root, "snapshots")
        self.edits = os.path.join(self.root, "edits")
        os.makedirs(self.snapshots, mode=0o700, exist_ok=True)
        os.makedirs(self.edits, mode=0o700, exist_ok=True)

    # -- snapshots
    # ----------------------------------------------------------------------------------------------
    def save_snapshot(self, content: bytes) -> str:
        ref = snapshot_ref(content)
        target = os.path.join(self.snapshots, ref)
        if not os.path.exists(target):
            atomic_write(target, content, 0o600)
        return ref

    def load_snapshot(self, ref: str) -> bytes | None:
        if not (len(ref) == 32 and all(c in "0123456789abcdef" for c in ref)):
            return None
        try:
            with open(os.path.join(self.snapshots, ref), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    # -- edit sessions
    # -------------------------------------------------------------------------------------------
    def _session_file(self, path: str, session_id: str) -> str:
        key = hashlib.sha256(f"{path}\0{session_id}".encode()).hexdigest()[:32]
        return os.path.join(self.edits, key + ".json")

    def load_session(self, path: str, session_id: str) -> EditSession | None:
        try:
            with open(self._session_file(path, session_id), encoding="utf-8") as f:
                data: dict[str, Any] = json.load(f)
        except (FileNotFoundError, ValueError):
            return None
        return EditSession(**data)

    def save_session(self, session: EditSession) -> None:
        session.last_used = self.clock()
        atomic_write(self._session_file(session.path, session.session_id), json.dumps(asdict(session)).encode(), 0o600)

    def drop_session(self, session: EditSession) -> None:
        try:
            os.unlink(self._session_file(session.path, session.session_id))
        except FileNotFoundError:
            pass
