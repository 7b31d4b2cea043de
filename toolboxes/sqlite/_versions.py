"""Versioned SQLite databases: one snapshot copy per scope, and promotion of a chosen snapshot.

``SqliteVersioned {shared, storageRoot, basePath}``: the base database is never written by a query. The first
statement that writes, in a scope, copies the base (SQLite's backup API, so a base in use by others is copied
consistently) to ``<storageRoot>/<handle>.db`` and runs there; later statements of the same scope read and
write
that copy. The handle names the scope, not the caller's ids in clear:

- ``global``: one snapshot for everyone;
- ``conversation``: one per conversation id; ``turn``: one per (conversation, turn);
- ``tool-call``: a new snapshot for every writing call.

Reads never make a snapshot: they run on the scope's snapshot when it has one, else on the base. A call may
name
a ``versionHandle`` to run on that snapshot instead. ``promote`` copies a snapshot over the base atomically: a
temporary file in the base's directory, fsync, rename, fsync of the directory. An unknown handle is an error,
never a silent fallback to the base.
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import uuid
from typing import TYPE_CHECKING

from toolboxes._atomic import fsync_dir, make_temporary

from ._engine import sqlite_uri

if TYPE_CHECKING:
    from toolboxes._toolbox import CallContext

__all__ = ["HANDLE_RE", "SCOPES", "copy_database", "promote", "scope_handle", "snapshot_path"]

SCOPES = ("global", "conversation", "turn", "tool-call")
HANDLE_RE = re.compile(r"^(global|conversation|turn|tool-call)-[0-9a-f]{24}$")


def scope_handle(shared: str, ctx: CallContext) -> tuple[str | None, str | None]:
    """The version handle of the caller's scope. Pure.

    Returns:
        ``(handle, None)``, or ``(None, reason)`` when the call lacks the id the scope is keyed on.
    """
    if shared == "global":
        key = "global"
    elif shared == "conversation":
        if not ctx.conversation_id:
            return (
                None,
                "this versioned database is shared per conversation, but the call carries no conversation id",
            )
        key = f"c:{ctx.conversation_id}"
    elif shared == "turn":
        if not (ctx.conversation_id and ctx.turn_id):
            return (
                None,
                "this versioned database is shared per turn, but the call carries no conversation/turn id",
            )
        key = f"t:{ctx.conversation_id}:{ctx.turn_id}"
    elif shared == "tool-call":
        key = f"k:{ctx.session_id}:{ctx.call_id}:{uuid.uuid4().hex}"
    else:
        return None, f"unknown sharing scope {shared!r}; expected one of {', '.join(SCOPES)}"
    return f"{shared}-{hashlib.sha256(key.encode()).hexdigest()[:24]}", None


def snapshot_path(storage_root: str, handle: str) -> str | None:
    """The file of ``handle`` under ``storage_root``, or ``None`` when ``handle`` is not a well-formed
    handle."""
    if not HANDLE_RE.match(handle):
        return None
    return os.path.join(storage_root, handle + ".db")


def copy_database(source: str | None, target: str, *, journal_mode: str = "DELETE") -> None:
    """Write a consistent copy of ``source`` (``None``: an empty database) to ``target``, atomically.

    The copy is made in a temporary file beside ``target`` (SQLite's backup API, reading ``source``
    read-only),
    switched to ``journal_mode`` (so that no ``-wal`` of another file can be replayed into it), fsynced and
    renamed over ``target``; the directory is fsynced last. A crash leaves ``target`` old or new, never a mix.

    Raises:
        sqlite3.Error, OSError: the source cannot be read or the target's directory cannot be written.
    """
    directory = os.path.dirname(target) or "."
    fd, tmp = make_temporary(target)
    os.close(fd)
    try:
        dst = sqlite3.connect(tmp, isolation_level=None)
        try:
            if source is not None:
                src = sqlite3.connect(sqlite_uri(source, mode="ro"), uri=True)
                try:
                    src.backup(dst)
                finally:
                    src.close()
            dst.execute(f"PRAGMA journal_mode = {journal_mode}").fetchone()
        finally:
            dst.close()
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
        fsync_dir(directory)
    except BaseException:
        for leftover in (tmp, tmp + "-journal", tmp + "-wal", tmp + "-shm"):
            try:
                os.unlink(leftover)
            except FileNotFoundError:
                pass
        raise


def promote(snapshot: str, base: str) -> None:
    """Replace ``base`` by the content of ``snapshot``, atomically.

    When ``base`` is a WAL database with a ``-wal`` file, its WAL is checkpointed and truncated first (so that
    stale frames cannot be replayed onto the new file), then the copy replaces the file and the emptied
    ``-wal``/``-shm`` are removed. Connections that other processes hold open on the old file keep reading
    the old
    file: promote when nobody else writes the base.

    Raises:
        sqlite3.Error, OSError: as :func:`copy_database`.
    """
    if os.path.exists(base + "-wal"):
        conn = sqlite3.connect(sqlite_uri(base, mode="rw"), uri=True, isolation_level=None)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        finally:
            conn.close()
    copy_database(snapshot, base)
    wal = base + "-wal"
    if not os.path.exists(wal) or os.path.getsize(wal) == 0:
        for leftover in (wal, base + "-shm"):
            try:
                os.unlink(leftover)
            except FileNotFoundError:
                pass
