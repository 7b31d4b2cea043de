"""Opening a database and running exactly one statement on it.

Every call gets its own connection (cheap for SQLite, and it makes calls on different threads independent): a
transaction an agent leaves open ends, rolled back, when the call returns. Read-only connections are opened
``mode=ro`` with ``PRAGMA query_only=1`` and the read-only :class:`~toolboxes.sqlite._authorizer.Authorizer`.

A WAL database opened read-only needs its ``-wal`` and ``-shm`` files. When they exist, SQLite reads them
even if
it may not write the ``-shm`` (the kernel grants read only): it falls back to a private copy of the index,
and the
latest committed data is visible. When the last writer has closed, the ``-wal`` is gone, every committed
page is
in the main file, and SQLite would need to *create* the ``-wal``/``-shm`` to read, which a read-only worker
cannot: then the file is opened ``immutable=1`` (no locks, no ``-wal``). The limit of that fallback: a
writer that
starts and checkpoints during that one read could show it a torn page; readers of a database that other
processes
write constantly should be given a WAL database whose ``-wal`` exists (see docs/SQLITE.md).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import os
import sqlite3
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolboxes._toolbox import CallContext

    from ._authorizer import Authorizer

__all__ = ["Limits", "Outcome", "check_params", "open_connection", "run_statement", "sqlite_uri"]


@dataclass(frozen=True)
class Limits:
    """Per-toolbox limits (from ``config["policy"]``): rows returned, bytes of JSON returned, busy wait."""

    max_rows: int = 1000
    output_bytes: int = 1024 * 1024
    busy_timeout_s: float = 5.0

    @classmethod
    def from_policy(cls, policy: dict[str, Any] | None) -> Limits:
        """Read ``config["policy"]``: its own keys first, then the policy's per-toolbox ``limits.output_bytes``."""
        policy = policy or {}
        limits = policy.get("limits") or {}
        return cls(
            max_rows=int(policy.get("max_rows", cls.max_rows)),
            output_bytes=int(policy.get("output_bytes", limits.get("output_bytes") or cls.output_bytes)),
            busy_timeout_s=float(policy.get("busy_timeout_s", cls.busy_timeout_s)),
        )


@dataclass
class Outcome:
    """What one statement did: ``status`` passed|failed|error, ``message`` for failures, ``data`` on
    success."""

    status: str
    message: str = ""
    data: dict[str, Any] = field(default_factory=dict)
    wrote: bool = False
    truncated: bool = False


def sqlite_uri(path: str, **query: str) -> str:
    """A ``file:`` URI for ``path`` (quoted, so ``?``/``#``/``%`` in names stay part of the path)."""
    return "file:" + urllib.parse.quote(path) + ("?" + urllib.parse.urlencode(query) if query else "")


def _is_wal_without_wal_file(path: str) -> bool:
    """True when ``path`` is a WAL-mode database (header bytes 18/19 = 2) whose ``-wal`` file does not
    exist."""
    try:
        with open(path, "rb") as f:
            header = f.read(20)
    except OSError:
        return False
    return len(header) == 20 and header[18] == 2 and not os.path.exists(path + "-wal")


def open_connection(path: str, *, read_only: bool, busy_timeout_s: float, create: bool = False) -> sqlite3.Connection:
    """Open ``path``; read-only connections never create the file and refuse writes in the engine. A
    read-write
    connection creates a missing file only when ``create`` is set.

    Raises:
        sqlite3.Error: the file cannot be opened (missing, not a database, no permission).
    """
    if read_only:
        conn = sqlite3.connect(
            sqlite_uri(path, mode="ro"),
            uri=True,
            timeout=busy_timeout_s,
            isolation_level=None,
            check_same_thread=False,
        )
        try:
            conn.execute("PRAGMA query_only = 1")
            conn.execute("PRAGMA schema_version").fetchone()
        except sqlite3.OperationalError:
            conn.close()
            if not _is_wal_without_wal_file(path):
                raise
            conn = sqlite3.connect(
                sqlite_uri(path, mode="ro", immutable="1"),
                uri=True,
                timeout=busy_timeout_s,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.execute("PRAGMA query_only = 1")
        return conn
    conn = sqlite3.connect(
        sqlite_uri(path, mode="rwc" if create else "rw"),
        uri=True,
        timeout=busy_timeout_s,
        isolation_level=None,
        check_same_thread=False,
    )
    return conn


def check_params(params: Any) -> tuple[Any, str | None]:
    """Turn JSON ``params`` into SQLite parameters. Pure.

    A list binds ``?`` positionally, a map binds ``:name``; values are null, booleans, numbers, strings or
    ``{"base64": "..."}`` for a blob. Returns ``(params, None)`` or ``(None, what to fix)``.
    """

    def one(value: Any, where: str) -> tuple[Any, str | None]:
        if value is None or isinstance(value, bool | int | float | str):
            return value, None
        if isinstance(value, dict) and set(value) == {"base64"} and isinstance(value["base64"], str):
            try:
                return base64.b64decode(value["base64"], validate=True), None
            except (binascii.Error, ValueError):
                return None, f"params{where}: base64 value is not valid base64"
        return None, (
            f'params{where}: a parameter is null, a boolean, a number, a string or {{"base64": "..."}} for a blob'
        )

    if params is None:
        return (), None
    if isinstance(params, list):
        out = []
        for i, v in enumerate(params):
            conv, err = one(v, f"[{i}]")
            if err:
                return None, err
            out.append(conv)
        return tuple(out), None
    if isinstance(params, dict):
        named = {}
        for k, v in params.items():
            conv, err = one(v, f".{k}")
            if err:
                return None, err
            named[str(k).lstrip(":@$")] = conv
        return named, None
    return None, "params must be a list (for ? placeholders) or a map (for :name placeholders)"


def _cell(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


#: SQLite refused a write to a database it opened read-only (or whose files it cannot write)
READ_ONLY_MESSAGE = "this database is read-only: the statement would write to it"


def _message(exc: sqlite3.Error, auth: Authorizer, busy_timeout_s: float) -> tuple[str, str]:
    text = str(exc)
    if auth.refusal:
        return "error", auth.refusal
    if isinstance(exc, sqlite3.ProgrammingError) and "one statement at a time" in text:
        return "error", (
            "exactly one SQL statement per call: this text holds more than one; send each statement in its own call"
        )
    if isinstance(exc, sqlite3.ProgrammingError) and "bindings" in text:
        return "error", f"the parameters do not match the statement's placeholders: {text}"
    if "readonly database" in text:
        return "error", READ_ONLY_MESSAGE
    if "database is locked" in text or "database table is locked" in text:
        return "failed", (f"the database is locked by another connection (waited {busy_timeout_s:g} s); retry later")
    if text == "interrupted":
        return "error", "the query was stopped: the call was cancelled or ran past its time limit"
    return "failed", f"SQL error: {text}"


def run_statement(
    conn: sqlite3.Connection, auth: Authorizer, sql: str, params: Any, limits: Limits, ctx: CallContext
) -> Outcome:
    """Run one statement on ``conn`` under ``auth`` and shape its result.

    Result data: ``{columns, rows, rowCount, executionTime}`` (+ ``truncated`` when rows were cut at
    ``limits.max_rows`` or ``limits.output_bytes``). Blobs come back as ``{"base64": ...}``. A cancel or the
    call's deadline interrupts the statement. Never raises for anything the SQL or the database does.
    """
    if not sql.strip():
        return Outcome("error", "sql is empty: send one SQL statement")
    bound, err = check_params(params)
    if err:
        return Outcome("error", err)
    auth.reset()
    conn.set_authorizer(auth)

    def progress() -> int:
        return 1 if ctx.cancelled.is_set() or (ctx.deadline is not None and time.monotonic() > ctx.deadline) else 0

    conn.set_progress_handler(progress, 10_000)
    ctx.on_cancel(conn.interrupt)
    start = time.monotonic()
    rows: list[list[Any]] = []
    truncated = False
    try:
        cur = conn.execute(sql, bound)
        columns = [d[0] for d in cur.description] if cur.description else []
        if cur.description:
            budget = limits.output_bytes
            while True:
                row = cur.fetchone()
                if row is None:
                    break
                if len(rows) >= limits.max_rows:
                    truncated = True
                    break
                cells = [_cell(v) for v in row]
                budget -= len(json.dumps(cells, ensure_ascii=False, default=str)) + 1
                if budget < 0:
                    truncated = True
                    break
                rows.append(cells)
            row_count = len(rows)
        else:
            row_count = max(cur.rowcount, 0)
        cur.close()
    except sqlite3.Error as exc:
        status, message = _message(exc, auth, limits.busy_timeout_s)
        return Outcome(status, message, wrote=auth.wrote)
    finally:
        conn.set_progress_handler(None, 0)
    data: dict[str, Any] = {
        "columns": columns,
        "rows": rows,
        "rowCount": row_count,
        "executionTime": round(time.monotonic() - start, 6),
    }
    if truncated:
        data["truncated"] = True
    return Outcome("passed", data=data, wrote=auth.wrote, truncated=truncated)
