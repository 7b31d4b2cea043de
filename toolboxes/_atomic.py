"""Replacing a file atomically: a worker killed at any moment leaves the old or the new content, never a mix.

Shared by every toolbox that keeps state across restarts in its own folders (developer snapshots and edit
sessions, skills' session state, System attachments, SQLite snapshot copies). Edits of an agent's own files go
through :mod:`toolboxes._journal` instead, which needs no temporary file beside the target.

Temporary files carry :data:`TEMP_MARKER` in their name (``.<name>.~atomic-XXXXXXXX.tmp``): a worker killed between
creating one and renaming it leaves it behind, and :func:`sweep_temporaries` removes such leftovers from the
worker's own folders when it starts again (``toolboxes/_worker.py``).
"""

from __future__ import annotations

import os
import tempfile

from ._test_pause import pause_point

__all__ = ["TEMP_MARKER", "atomic_write", "fsync_dir", "is_temporary", "make_temporary", "sweep_temporaries"]

#: What marks a temporary file of an atomic write (never part of a name an agent or a tool chooses by chance).
TEMP_MARKER = ".~atomic-"
#: Suffixes SQLite adds beside a database while it is open (a snapshot copy in progress leaves them too).
_SQLITE_SIDECARS = ("", "-journal", "-wal", "-shm")
#: :func:`sweep_temporaries` looks at no more than this many entries (a huge work folder costs a bounded start).
MAX_SWEEP_ENTRIES = 200_000


def fsync_dir(directory: str) -> None:
    """Make a rename or creation in ``directory`` durable (fsync of the directory itself)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_temporary(path: str) -> tuple[int, str]:
    """Create the temporary file of an atomic write of ``path`` in its directory: ``(fd, temporary path)``."""
    directory = os.path.dirname(path) or "."
    return tempfile.mkstemp(prefix="." + os.path.basename(path) + TEMP_MARKER, suffix=".tmp", dir=directory)


def is_temporary(name: str) -> bool:
    """Whether the file name ``name`` is one :func:`make_temporary` made (or a SQLite sidecar of one)."""
    if not name.startswith(".") or TEMP_MARKER not in name:
        return False
    return any(name.endswith(".tmp" + sidecar) for sidecar in _SQLITE_SIDECARS)


def sweep_temporaries(root: str, *, max_entries: int = MAX_SWEEP_ENTRIES) -> list[str]:
    """Remove the leftover temporary files of interrupted atomic writes beneath ``root``; return their paths.

    Call it only on folders no other live process writes atomically into (a worker's own work and state folders,
    at its start). Symlinks are never followed; what cannot be removed is left (the next start tries again).
    """
    removed: list[str] = []
    seen = 0
    for directory, dirs, files in os.walk(root, followlinks=False):
        seen += len(dirs) + len(files)
        for name in files:
            if is_temporary(name):
                path = os.path.join(directory, name)
                try:
                    os.unlink(path)
                except OSError:
                    continue
                removed.append(path)
        if seen > max_entries:
            break
    return removed


def atomic_write(path: str, content: bytes, mode: int | None = None, *, fsync: bool = True) -> None:
    """Replace ``path`` by ``content``: a temporary file in the same directory, fsync, rename, fsync
    directory.

    A crash at any point leaves ``path`` with its old or its new content, never a mix (at worst a stray temporary
    file, which :func:`sweep_temporaries` removes at the next start). The new file keeps ``mode`` (default: the old
    file's permission bits, else 0644). ``fsync=False`` skips both fsyncs: the rename is still atomic for running
    processes, but a power loss may leave an empty file; for content that can be made again (the supervisor's
    attachment store, whose writes run on the trio loop and must not wait for the disk).

    Raises:
        OSError: the directory cannot be written (the sandbox or the kernel refused).
    """
    directory = os.path.dirname(path) or "."
    if mode is None:
        try:
            mode = os.stat(path).st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o644
    fd, tmp = make_temporary(path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(content)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        pause_point("atomic-write")
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    if fsync:
        fsync_dir(directory)
