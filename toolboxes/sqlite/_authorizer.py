"""What a SQLite statement may do, decided by the engine's authorizer, never by reading the SQL text.

SQLite calls the authorizer for every action while it *prepares* a statement (before anything runs), with an
action code and its arguments. :func:`classify` maps each action to ``read``, ``write`` or ``deny`` (pure,
tested
apart); :class:`Authorizer` is the callback that applies a mode's rule to that answer and remembers why it
refused
and whether the statement writes:

- read-only: ``write`` and ``deny`` are refused; the statement never runs. This is the second fence: the
connection
  is also opened ``mode=ro`` with ``PRAGMA query_only``, and the kernel grants the worker no write on the
  file.
- read-write: ``write`` is allowed and recorded (it makes ``state_effect`` ``mutate``); ``deny`` is refused.

Always refused: ``ATTACH`` of any file (it would open or *create* another database; ``VACUUM INTO``
attaches its
target, so it is refused with it) and ``PRAGMA writable_schema``. A plain ``VACUUM`` attaches the empty name
``''`` (a temporary database) and counts as a write.

Not covered here: what a function does at run time (the build has no ``readfile``/``writefile``, and extension
loading stays disabled); the kernel fence covers files.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

__all__ = ["READ_ONLY_PRAGMAS", "Authorizer", "classify"]

_READ_ACTIONS = frozenset(
    {
        sqlite3.SQLITE_SELECT,
        sqlite3.SQLITE_READ,
        sqlite3.SQLITE_FUNCTION,
        sqlite3.SQLITE_RECURSIVE,
        sqlite3.SQLITE_TRANSACTION,
        sqlite3.SQLITE_SAVEPOINT,
    }
)

#: Pragmas that only report, even when given an argument (``PRAGMA table_info(t)``).
READ_ONLY_PRAGMAS = frozenset(
    {
        "table_info",
        "table_xinfo",
        "table_list",
        "index_list",
        "index_info",
        "index_xinfo",
        "foreign_key_list",
        "foreign_key_check",
        "integrity_check",
        "quick_check",
        "database_list",
        "collation_list",
        "function_list",
        "module_list",
        "pragma_list",
        "compile_options",
        "data_version",
        "page_count",
        "freelist_count",
    }
)

_SCHEMA_TABLES = frozenset({"sqlite_master", "sqlite_schema", "sqlite_temp_master", "sqlite_temp_schema"})


def classify(action: int, arg1: str | None, arg2: str | None, dbname: str | None) -> tuple[str, str]:
    """Classify one authorizer call. Pure.

    Returns:
        ``(verdict, reason)``: verdict ``read`` (observes only), ``write`` (changes a database or its
        settings)
        or ``deny`` (never allowed); ``reason`` says, for an agent, what the action was.
    """
    if action in _READ_ACTIONS:
        return "read", "read"
    if action == sqlite3.SQLITE_ATTACH:
        if arg1 == "":  # plain VACUUM works through a temporary database with an empty name
            return "write", "VACUUM"
        return "deny", (
            f"ATTACH (and VACUUM INTO, which attaches its target) of {arg1!r} is not allowed: "
            "this toolbox works on its one database only"
        )
    if action == sqlite3.SQLITE_DETACH:
        return "write", "DETACH"
    if action == sqlite3.SQLITE_PRAGMA:
        name = (arg1 or "").lower()
        if name == "writable_schema":
            return ("read", "read") if arg2 is None else ("deny", "PRAGMA writable_schema is not allowed")
        if name in READ_ONLY_PRAGMAS or arg2 is None:
            return "read", "read"
        return "write", f"PRAGMA {name} = {arg2} changes a setting"
    if action == sqlite3.SQLITE_UPDATE and arg1 in _SCHEMA_TABLES:
        # SQLite itself reports these while it sets up a table-valued function such as pragma_table_info();
        # a statement cannot really change the schema table without writable_schema, which is denied.
        return "read", "read"
    names = {
        sqlite3.SQLITE_INSERT: "INSERT into",
        sqlite3.SQLITE_UPDATE: "UPDATE of",
        sqlite3.SQLITE_DELETE: "DELETE from",
        sqlite3.SQLITE_ALTER_TABLE: "ALTER TABLE",
        sqlite3.SQLITE_REINDEX: "REINDEX",
        sqlite3.SQLITE_ANALYZE: "ANALYZE",
    }
    what = names.get(action, "a schema change or other write")
    target = f" {arg1}" if arg1 else ""
    where = f" (database {dbname})" if dbname else ""
    return "write", f"{what}{target}{where}"


@dataclass
class Authorizer:
    """The authorizer callback for one statement on one connection.

    Attributes:
        allow_writes: ``False`` for read-only connections (a ``write`` is refused), ``True`` for read-write.
        wrote: set when the prepared statement contains a write (read-write mode: it will run; read-only: it
            was refused).
        refusal: the reason of the first refusal, to report instead of SQLite's bare "not authorized".
    """

    allow_writes: bool
    wrote: bool = False
    refusal: str | None = None

    def __call__(
        self, action: int, arg1: str | None, arg2: str | None, dbname: str | None, _trigger: str | None
    ) -> int:
        verdict, reason = classify(action, arg1, arg2, dbname)
        if verdict == "read":
            return sqlite3.SQLITE_OK
        if verdict == "write":
            self.wrote = True
            if self.allow_writes:
                return sqlite3.SQLITE_OK
            reason = f"this database is read-only: the statement would do {reason}"
        if self.refusal is None:
            self.refusal = reason
        return sqlite3.SQLITE_DENY

    def reset(self) -> None:
        """Forget what the previous statement did."""
        self.wrote = False
        self.refusal = None
