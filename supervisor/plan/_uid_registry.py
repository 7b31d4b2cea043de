"""The host-wide uid registry: which toolbox of which state dir holds each worker uid on this host.

Why: the identity table of a state dir (``_identities.py``) makes uids unique among the toolboxes of that state dir
only, and every shipped policy names the same ``worker_uids`` range. Two supervisors with two state dirs handed one
uid to two tenants (a slug that lands on another's slot is found in under a second), and one read and chmodded the
other's 0600 file in a folder both reach. The registry makes a number, once given to a toolbox, that toolbox's on
the whole host, whatever state dir or supervisor asks next.

- **Where**: one directory per host, :data:`DEFAULT_REGISTRY_DIR` unless the operator says otherwise (the policy's
  ``worker_uids.registry``, or the supervisor's environment :data:`REGISTRY_ENV`, which the tests use so that their
  state dirs never take uids of the host's registry). Root's, mode 0700: a directory another user owns or can write
  is refused. Files in it are opened through its fd with ``O_NOFOLLOW``, under ``flock`` on its lock file (an open
  file description lock, taken after the state dir's own lock, never before: one order, no deadlock), and written
  whole to a temporary file renamed into place.
- **Who holds a number**: ``(state id, "slug/toolbox")``. The state id is a random name kept in the state dir's
  identity table, made with it: a state dir moved elsewhere keeps its uids (the registry follows its path); a state
  dir deleted and made again is a new state dir and gets new uids. Two state dirs with one id (a copy) are refused.
- **Never reused on their own**: numbers are not freed when their state dir is gone. A toolbox's files can
  outlive its state dir (in FileSandbox trees, in folders shared with others), and a new tenant given that uid
  would own them. Only the operator frees them, for a state dir that no longer exists and that no running
  supervisor holds (``agents-supervise uids release``, ``_uid_release.py``), after a warning about such files. A
  test or benchmark that makes state dirs by the thousand uses a registry of its own (:data:`REGISTRY_ENV`) or
  ``worker_uids: null``.
- **Held while running**: a supervisor holds a shared ``flock`` on ``held-<state id>.lock`` in the registry for as
  long as it runs (:class:`UidHold`), so a release can tell that a state dir's uids are in use even after the
  folder itself was removed under it.

The pure part (which number for which toolbox) is ``_identities.plan_identities``; here is the I/O: the directory
checked, the file read, locked, written.
"""

from __future__ import annotations

import fcntl
import os
import re
import stat
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sandbox import open_anchor
from supervisor._errors import PolicyRefused

from ._locked_json import flocked, read_json, write_json

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

__all__ = [
    "DEFAULT_REGISTRY_DIR",
    "REGISTRY_ENV",
    "REGISTRY_FILE",
    "Holder",
    "HostRegistry",
    "UidHold",
    "held_by_supervisor",
    "locked_registry",
    "read_registry",
    "registry_dir",
    "write_registry",
]

#: Where the registry lives unless the policy or the environment says otherwise: beside, never inside, the default
#: state dir (a state dir removed must not take the host's record with it).
DEFAULT_REGISTRY_DIR = "/var/lib/agents-supervise-uids"
#: The environment variable that moves it (the operator's, or the tests' own registry).
REGISTRY_ENV = "AGENTS_SUPERVISE_UID_REGISTRY"
REGISTRY_FILE = "uids.json"
_LOCK_FILE = "uids.lock"
_VERSION = 1


@dataclass(frozen=True)
class Holder:
    """Who holds a number host-wide: the state dir (by its id) and the toolbox (``slug/toolbox``)."""

    state: str
    toolbox: str


@dataclass
class HostRegistry:
    """The registry's contents: ``numbers`` uid/gid -> its holder; ``states`` state id -> the state dir's path
    (where it was last seen)."""

    numbers: dict[int, Holder] = field(default_factory=dict)
    states: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": _VERSION,
            "numbers": {str(n): {"state": h.state, "toolbox": h.toolbox} for n, h in sorted(self.numbers.items())},
            "states": {s: {"path": p} for s, p in sorted(self.states.items())},
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> HostRegistry:
        try:
            if data.get("version") != _VERSION:
                raise ValueError(f"version {data.get('version')!r}, not {_VERSION}")
            return cls(
                numbers={int(n): Holder(str(v["state"]), str(v["toolbox"])) for n, v in data["numbers"].items()},
                states={str(s): str(v["path"]) for s, v in data["states"].items()},
            )
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise PolicyRefused(
                f"the host's uid registry {where} is damaged ({exc}); no supervisor with worker_uids can start. "
                "Restore it from a backup: without it, two state dirs could give one uid to two toolboxes"
            ) from exc

    def copy(self) -> HostRegistry:
        return HostRegistry(dict(self.numbers), dict(self.states))

    def holder_text(self, number: int) -> str:
        """``toolbox slug/tb of state dir PATH`` for messages (the path as last seen)."""
        holder = self.numbers[number]
        return f"toolbox {holder.toolbox} of state dir {self.states.get(holder.state, '(unknown)')}"


def registry_dir(policy_value: str | None, environ: Mapping[str, str]) -> str:
    """The registry directory: the policy's ``worker_uids.registry``, else :data:`REGISTRY_ENV`, else
    :data:`DEFAULT_REGISTRY_DIR`. Only the operator sets either (the policy file, the supervisor's environment)."""
    chosen = policy_value or environ.get(REGISTRY_ENV) or DEFAULT_REGISTRY_DIR
    if not os.path.isabs(chosen):
        raise PolicyRefused(f"the uid registry must be an absolute path, not {chosen!r} ({REGISTRY_ENV})")
    return os.path.normpath(chosen)


def _open_dir(path: str, *, create: bool) -> int | None:
    """The registry directory's fd (``None`` when it does not exist and ``create`` is false). Refused when another
    user owns it or may write it: whoever can write the registry can hand out anyone's uid."""
    try:
        fd = open_anchor(path)
    except FileNotFoundError:
        if not create:
            return None
        fd = open_anchor(path, mode=0o700)  # made now, with its parents (root's, in the operator's tree)
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        os.close(fd)
        raise PolicyRefused(
            f"the host's uid registry {path} belongs to uid {st.st_uid} with mode {stat.S_IMODE(st.st_mode):04o}: "
            "it must be root's and writable by root only (chown root {path} && chmod 700 {path})"
        )
    return fd


def _read_at(fd: int, where: str) -> HostRegistry:
    data = read_json(fd, REGISTRY_FILE, what=f"the host's uid registry {where}")
    return HostRegistry() if data is None else HostRegistry.from_json(data, where)


def read_registry(path: str) -> HostRegistry:
    """The registry in ``path`` as it is now, without the lock and without making anything (``check``)."""
    fd = _open_dir(path, create=False)
    if fd is None:
        return HostRegistry()
    try:
        return _read_at(fd, os.path.join(path, REGISTRY_FILE))
    finally:
        os.close(fd)


@contextmanager
def locked_registry(path: str) -> Iterator[tuple[int, HostRegistry]]:
    """Hold the registry's lock (made, root's 0700, when missing) for the block: yields its directory fd and its
    contents; :func:`write_registry` with that fd keeps a change."""
    fd = _open_dir(path, create=True)
    assert fd is not None
    try:
        with flocked(fd, _LOCK_FILE):
            yield fd, _read_at(fd, os.path.join(path, REGISTRY_FILE))
    finally:
        os.close(fd)


def write_registry(fd: int, registry: HostRegistry) -> None:
    """Replace the registry file in the directory ``fd`` (held locked) with ``registry``."""
    write_json(fd, REGISTRY_FILE, registry.to_json(), mode=0o600)


_STATE_ID = re.compile(r"[0-9a-f]{1,64}")


def held_lock_name(state_id: str) -> str:
    """The file a running supervisor holds for ``state_id`` (a state id is hex, as the identity table makes it).

    Raises:
        PolicyRefused: ``state_id`` is not one (it names a file of the registry: nothing else may reach there).
    """
    if not _STATE_ID.fullmatch(state_id):
        raise PolicyRefused(f"{state_id!r} is not a state dir id (hex digits, as 'agents-supervise uids list' shows)")
    return f"held-{state_id}.lock"


class UidHold:
    """A running supervisor's mark that the uids of its state dir (``state_id``) are in use: a shared ``flock`` on
    ``held-<state_id>.lock`` in the registry ``path``, kept until :meth:`close` (or the process ends). Several
    supervisors on one state dir each hold it; ``uids release`` refuses while any does."""

    def __init__(self, path: str, state_id: str) -> None:
        name = held_lock_name(state_id)
        fd = _open_dir(path, create=True)
        assert fd is not None
        try:
            self._lock: int | None = os.open(
                name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd
            )
        finally:
            os.close(fd)
        fcntl.flock(self._lock, fcntl.LOCK_SH)

    def close(self) -> None:
        """Let go (closing the file releases the lock)."""
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None


def held_by_supervisor(dir_fd: int, state_id: str) -> bool:
    """Whether a running supervisor holds ``state_id`` (:class:`UidHold`), asked without waiting."""
    try:
        lock = os.open(held_lock_name(state_id), os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(lock)
    return False
