"""Replacing a file atomically: a worker killed at any moment leaves the old or the new content, never a mix.

Shared by every toolbox that writes files on an agent's behalf or keeps state across restarts (developer edits and
snapshots, skills' session state, System attachments).
"""

from __future__ import annotations

import os
import tempfile

__all__ = ["atomic_write", "fsync_dir"]


def fsync_dir(directory: str) -> None:
    """Make a rename or creation in ``directory`` durable (fsync of the directory itself)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str, content: bytes, mode: int | None = None) -> None:
    """Replace ``path`` by ``content``: a temporary file in the same directory, fsync, rename, fsync
    directory.

    A crash at any point leaves ``path`` with its old or its new content, never a mix (at worst a stray
    ``.<name>.*.tmp`` file). The new file keeps ``mode`` (default: the old file's permission bits, else 0644).

    Raises:
        OSError: the directory cannot be written (the sandbox or the kernel refused).
    """
    directory = os.path.dirname(path) or "."
    if mode is None:
        try:
            mode = os.stat(path).st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o644
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(directory)
