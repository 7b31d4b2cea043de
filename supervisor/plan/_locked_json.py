"""Root's small JSON records in a folder only root writes (the state dir's identity table, the host's uid
registry): one ``flock`` per folder, files opened through the folder's fd with ``O_NOFOLLOW``, written whole to a
temporary file that is renamed into place (a reader sees the old record or the new one, never half of one)."""

from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from supervisor._errors import PolicyRefused

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["flocked", "read_json", "write_json"]


@contextmanager
def flocked(dir_fd: int, lock_name: str) -> Iterator[None]:
    """Hold ``flock`` on ``lock_name`` in ``dir_fd`` (made 0600 when missing) for the block. An open file
    description lock: two holders in one process exclude each other too."""
    lock = os.open(lock_name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
    finally:
        os.close(lock)  # releases the lock


def read_json(dir_fd: int, name: str, *, what: str) -> Any:
    """The JSON value of ``name`` in ``dir_fd`` (``None`` when there is no such file; a link is not followed).

    Raises:
        PolicyRefused: the file is not JSON (``what`` names it: "the identity table /s/identities.json").
    """
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as f:
        raw = f.read()
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PolicyRefused(f"{what} is not JSON ({exc}); nothing was started. Restore it from a backup") from exc


def write_json(dir_fd: int, name: str, value: Any, *, mode: int) -> None:
    """Replace ``name`` in ``dir_fd`` with ``value`` (indented JSON, file mode ``mode``), synced before and after
    the rename."""
    tmp = f".{name}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    with os.fdopen(fd, "w") as f:
        json.dump(value, f, indent=1)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    os.fsync(dir_fd)
