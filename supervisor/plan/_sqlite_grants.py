"""What the kernel grants a SQLite worker, per versioning mode. Pure (it only looks at which files exist).

Landlock rules attach to the files and directories that exist when the worker is confined; rights on a
directory cover everything beneath it, rights on a file only that file (and only file rights: read, write,
truncate). Creating or deleting a file is a right on its *directory* (``MAKE_REG``, ``REMOVE_FILE``); Landlock
cannot say "only files named ``db-journal``". Hence:

``SqliteReadOnly {path}``
    ``read`` on the database file, and ``read`` on its ``-wal`` and ``-shm`` when they exist at compile time.
    Nothing is writable. Measured: a WAL database whose ``-wal``/``-shm`` exist is read, latest committed data
    included, with read-only rights on the three files (SQLite fails to open the ``-shm`` read-write and falls
    back to a private, read-only copy of the WAL index). A WAL database whose last writer closed has no
    ``-wal``: all committed data is in the main file, but SQLite would have to *create* ``-wal``/``-shm`` to
    read, which needs ``MAKE_REG`` on the directory; the toolbox then opens it ``immutable=1`` instead of
    granting the directory. A rollback-journal database needs only the file (a reader never writes the
    journal). A ``-wal`` created after the worker started is not covered by these rules: a database written
    live by others should be kept in WAL mode with its ``-wal`` present (a long-lived writer connection).

``SqliteReadWrite {path}`` / ``SqliteNoVersioning {path}``
    ``write`` on the database's directory. SQLite creates and deletes ``<db>-journal`` (rollback modes) or
    ``<db>-wal`` and ``<db>-shm`` (WAL) beside the file on every transaction or open/close, and may create the
    database itself; that takes ``MAKE_REG`` + ``REMOVE_FILE`` on the directory, plus ``READ_FILE``,
    ``WRITE_FILE`` and ``TRUNCATE`` on those files, which only a directory rule can give. The grant therefore
    covers every file in that directory: keep each read-write database in a directory of its own.

``SqliteVersioned {shared, storageRoot, basePath}``
    ``write`` on ``storageRoot`` (snapshots are created, written, journaled there) when it is given
    (without it,
    snapshots live in the worker's state folder, granted by the supervisor anyway), and ``write`` on the
    base's
    directory: ``promote`` writes a temporary file beside the base, renames it over the base and removes the
    emptied ``-wal``/``-shm``. Queries only ever open the base read-only.

The toolbox's own checks (``mode=ro``, ``query_only``, the authorizer) are the second fence: these rules are
what holds if the worker is subverted.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from sandbox import READ, WRITE, FsRule, uid_write_problem

if TYPE_CHECKING:
    from collections.abc import Callable, Collection

__all__ = ["sqlite_access_warnings", "sqlite_fs_rules"]

_TAGS = ("SqliteReadOnly", "SqliteReadWrite", "SqliteNoVersioning", "SqliteVersioned")


def _body(versioning: dict[str, Any]) -> dict[str, Any]:
    contents = versioning.get("contents")
    return contents if isinstance(contents, dict) else versioning


def _abs(value: Any, what: str) -> str:
    if not isinstance(value, str) or not os.path.isabs(value):
        raise ValueError(f"Versioning.{what} must be an absolute, resolved path, got {value!r}")
    return os.path.normpath(value)


def sqlite_fs_rules(versioning: dict[str, Any], exists: Callable[[str], bool] = os.path.exists) -> list[FsRule]:
    """The Landlock rules a SQLite worker needs for its database (see the module docstring for why).

    Args:
        versioning: the toolbox's ``Versioning`` (``{"tag", "path"}``, ``{"tag", "shared", "storageRoot",
            "basePath"}``, or the tagged ``{"tag", "contents": {...}}`` form), paths already absolute.
        exists: how to test that a companion file exists (injected by tests).

    Returns:
        The rules, most specific first. They never include anything outside the database's directory and the
        storage root.

    Raises:
        ValueError: an unknown tag or a path that is not absolute.
    """
    tag = versioning.get("tag")
    if tag not in _TAGS:
        raise ValueError(f"Versioning.tag must be one of {', '.join(_TAGS)}, got {tag!r}")
    body = _body(versioning)
    if tag == "SqliteReadOnly":
        db = _abs(body.get("path"), "path")
        rules = [FsRule(db, READ)]
        rules += [FsRule(db + ext, READ) for ext in ("-wal", "-shm") if exists(db + ext)]
        return rules
    if tag in ("SqliteReadWrite", "SqliteNoVersioning"):
        db = _abs(body.get("path"), "path")
        return [FsRule(os.path.dirname(db), WRITE)]
    base = _abs(body.get("basePath"), "basePath")
    rules = [FsRule(os.path.dirname(base), WRITE)]
    if body.get("storageRoot") is not None:
        rules.append(FsRule(_abs(body["storageRoot"], "storageRoot"), WRITE))
    return rules


def sqlite_access_warnings(
    toolbox: str, versioning: dict[str, Any], uid: int, gid: int, groups: Collection[int] = ()
) -> list[str]:
    """``check``'s warnings for a database the worker must write but whose file modes keep its uid out.

    Landlock grants the worker the database's folder, but the kernel's classic permissions still apply: a
    ``SqliteReadWrite`` database owned by another user with mode 0644 answers every write with "this database is
    read-only". The worker's supplementary ``groups`` (the policy's ``shared_groups`` it is in) count, as they do
    for the kernel. Each warning names the path, the uid and the fix the README gives: a folder several toolboxes
    write belongs to a shared group. Looks at mode bits only (see :func:`sandbox._syspaths.uid_write_problem`).
    """
    tag = versioning.get("tag")
    body = _body(versioning)
    if tag in ("SqliteReadWrite", "SqliteNoVersioning"):
        paths = [body.get("path")]
    elif tag == "SqliteVersioned":
        paths = [body.get("basePath")]
    else:
        return []
    out: list[str] = []
    for path in paths:
        if not isinstance(path, str) or not os.path.isabs(path):
            continue
        problem = uid_write_problem(path, uid, gid, groups=groups)
        if problem is not None:
            folder = os.path.dirname(path)  # canonical: resolved at load
            out.append(
                f"{toolbox}: the read-write database {path} cannot be written by the worker (uid {uid}"
                f"{', groups ' + ', '.join(map(str, groups)) if groups else ''}): {problem}, so every write would "
                f"answer 'this database is read-only'. Fix: give the folder to a group (chgrp -R GID {folder} && "
                f"chmod -R g+rwX {folder} && chmod g+s {folder}) and name the toolbox in the policy's "
                f"shared_groups: [{{gid: GID, toolboxes: [<agent>/{toolbox}]}}] (README, 'Landlock decides which "
                "paths'); or declare it SqliteReadOnly"
            )
    return out
