"""The SQLite toolbox (SPEC.md section 4, sqlite): ``sqlite_<Name>_query`` and, when versioned, ``_promote``.

Config (the seed's ``SqliteToolbox`` contents, paths resolved)::

    {"Name": ..., "Description": ..., "Versioning": {"tag": "SqliteReadOnly" | "SqliteReadWrite"
        | "SqliteNoVersioning", "path": "/abs/db"}
        or {"tag": "SqliteVersioned", "shared": "global|conversation|turn|tool-call",
            "storageRoot": "/abs/dir" (optional: the worker's state folder), "basePath": "/abs/db"},
     "policy": {"max_rows", "output_bytes", "busy_timeout_s"}}

Every result carries ``state_effect`` (``read`` or ``mutate``, as the engine's authorizer saw the
statement) and
``resource_id`` ``sqlite:<Name>``. What the kernel grants each mode is in :mod:`supervisor.plan._sqlite_grants`.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from typing import Any

from sandbox import uid_write_problem
from toolboxes._hints import ADDITIVE, DESTRUCTIVE, READ_ONLY
from toolboxes._names import tool_name
from toolboxes._result import ToolResult
from toolboxes._toolbox import CallContext, ToolSpec, WorkerEnv

from ._authorizer import Authorizer
from ._engine import READ_ONLY_MESSAGE, Limits, Outcome, open_connection, run_statement
from ._versions import SCOPES, copy_database, promote, scope_handle, snapshot_path

__all__ = ["SqliteToolbox", "open_toolbox", "parse_versioning"]

_MODES = {
    "SqliteReadOnly": "ro",
    "SqliteReadWrite": "rw",
    "SqliteNoVersioning": "rw",
    "SqliteVersioned": "versioned",
}


def parse_versioning(raw: Any) -> dict[str, Any]:
    """Normalise ``Versioning`` to ``{"mode": ro|rw|versioned, "path", "shared", "storageRoot"}``. Pure.

    Accepts the flat form (``{"tag", "path"}``) and the seed's tagged form (``{"tag", "contents": {...}}``).

    Raises:
        ValueError: an unknown tag, a missing or relative path, or an unknown sharing scope (the message says
            which, and what is expected).
    """
    if not isinstance(raw, dict) or raw.get("tag") not in _MODES:
        raise ValueError(f"Versioning.tag must be one of {', '.join(_MODES)}")
    body = contents if isinstance(contents := raw.get("contents"), dict) else raw
    mode = _MODES[raw["tag"]]
    key = "basePath" if mode == "versioned" else "path"
    path = body.get(key)
    if not isinstance(path, str) or not os.path.isabs(path):
        raise ValueError(f"Versioning.{key} must be an absolute path (resolved at load), got {path!r}")
    out: dict[str, Any] = {"mode": mode, "path": path}
    if mode == "versioned":
        shared = str(body.get("shared", "global")).lower().replace("_", "-")
        if shared not in SCOPES:
            raise ValueError(f"Versioning.shared must be one of {', '.join(SCOPES)}, got {body.get('shared')!r}")
        root = body.get("storageRoot")
        if root is not None and (not isinstance(root, str) or not os.path.isabs(root)):
            raise ValueError(f"Versioning.storageRoot must be an absolute path, got {root!r}")
        out["shared"] = shared
        out["storageRoot"] = root
    return out


class SqliteToolbox:
    """One SQLite database as tools. Thread-safe: every call opens its own connection; snapshot creation and
    promotion are serialised by a lock."""

    def __init__(self, config: dict[str, Any], env: WorkerEnv) -> None:
        name = config.get("Name")
        if not isinstance(name, str) or not name:
            raise ValueError("SqliteToolbox needs a Name")
        self.name = name
        self.description = str(config.get("Description") or f"SQLite database {name}")
        self.versioning = parse_versioning(config.get("Versioning"))
        self.mode: str = self.versioning["mode"]
        self.path: str = self.versioning["path"]
        self.limits = Limits.from_policy(config.get("policy"))
        self.resource = f"sqlite:{name}"
        self._lock = threading.Lock()
        self.storage_root = ""
        if self.mode == "versioned":
            self.storage_root = self.versioning["storageRoot"] or os.path.join(env.state_dir, "sqlite-versions")
            os.makedirs(self.storage_root, exist_ok=True)
        self.query_tool = tool_name("sqlite", name, "query")
        self.promote_tool = tool_name("sqlite", name, "promote")

    # -- interface
    # --------------------------------------------------------------------------------------------
    def tools(self) -> list[ToolSpec]:
        props: dict[str, Any] = {
            "sql": {"type": "string", "description": "Exactly one SQL statement."},
            "params": {
                "description": "Parameters: a list for ? placeholders or a map for :name placeholders. "
                'A blob is {"base64": "..."}.',
                "type": ["array", "object"],
            },
        }
        mode_text = {"ro": "read-only", "rw": "read-write", "versioned": "versioned"}[self.mode]
        if self.mode == "versioned":
            props["versionHandle"] = {
                "type": "string",
                "description": "Run on this snapshot instead of your scope's.",
            }
        specs = [
            ToolSpec(
                self.query_tool,
                f"{self.description} ({mode_text} SQLite database). Runs one statement; returns "
                "{columns, rows, rowCount, executionTime"
                + (", versionHandle" if self.mode == "versioned" else "")
                + "}.",
                {"type": "object", "properties": props, "required": ["sql"], "additionalProperties": False},
                hints=dict(READ_ONLY if self.mode == "ro" else ADDITIVE if self.mode == "versioned" else DESTRUCTIVE),
            )
        ]
        if self.mode == "versioned":
            specs.append(
                ToolSpec(
                    self.promote_tool,
                    f"Copy a snapshot of {self.name} (by its versionHandle) over the base database, atomically.",
                    {
                        "type": "object",
                        "properties": {"versionHandle": {"type": "string"}},
                        "required": ["versionHandle"],
                        "additionalProperties": False,
                    },
                    hints={**DESTRUCTIVE, "idempotentHint": True},
                )
            )
        return specs

    def load_errors(self) -> list[dict[str, str]]:
        return []

    def close(self) -> None:
        pass

    def call(self, tool: str, args: dict[str, Any], ctx: CallContext) -> ToolResult:
        if tool == self.query_tool:
            sql = args.get("sql")
            if not isinstance(sql, str):
                return self._meta(ToolResult.error("sql must be a string holding one SQL statement"), "read")
            if self.mode == "versioned":
                return self._query_versioned(sql, args.get("params"), args.get("versionHandle"), ctx)
            return self._finish(self._run(self.path, self.mode == "ro", sql, args.get("params"), ctx))
        if tool == self.promote_tool and self.mode == "versioned":
            return self._promote(args.get("versionHandle"))
        return ToolResult.error(f"unknown tool {tool!r}; this toolbox offers {self.query_tool}")

    # -- helpers
    # ----------------------------------------------------------------------------------------------
    def _meta(self, result: ToolResult, effect: str) -> ToolResult:
        return result.with_meta("state_effect", effect).with_meta("resource_id", self.resource)

    def _run(self, path: str, read_only: bool, sql: str, params: Any, ctx: CallContext) -> Outcome:
        busy = self.limits.busy_timeout_s
        remaining = ctx.remaining()
        if remaining is not None:
            busy = min(busy, remaining)
        try:
            conn = open_connection(path, read_only=read_only, busy_timeout_s=busy, create=self.mode == "rw")
        except sqlite3.Error as exc:
            problem = None if read_only else _modes_problem(path)
            return Outcome("failed", problem or f"cannot open the database {os.path.basename(path)}: {exc}")
        try:
            outcome = run_statement(conn, Authorizer(allow_writes=not read_only), sql, params, self.limits, ctx)
        finally:
            conn.close()
        if not read_only and outcome.status == "error" and outcome.message == READ_ONLY_MESSAGE:
            problem = _modes_problem(path)
            if problem is not None:
                return Outcome("error", problem)
        return outcome

    def _finish(self, outcome: Outcome, handle: str | None = None) -> ToolResult:
        effect = "mutate" if outcome.wrote and outcome.status == "passed" else "read"
        if outcome.status != "passed":
            result = (
                ToolResult.error(outcome.message)
                if outcome.status == "error"
                else ToolResult.failed(outcome.message, summary=outcome.message)
            )
            return self._meta(result, effect)
        data = outcome.data
        if handle is not None:
            data["versionHandle"] = handle
        if data["columns"]:
            summary = f"{data['rowCount']} row{'s' if data['rowCount'] != 1 else ''}"
        else:
            summary = f"ok, {data['rowCount']} row{'s' if data['rowCount'] != 1 else ''} changed"
        if outcome.truncated:
            summary += " (truncated: more rows exist; narrow the query or add LIMIT/OFFSET)"
        return self._meta(ToolResult.json(data, summary=summary, truncated=outcome.truncated), effect)

    def _query_versioned(self, sql: str, params: Any, requested: Any, ctx: CallContext) -> ToolResult:
        if requested is not None:
            path = snapshot_path(self.storage_root, str(requested))
            if path is None or not os.path.exists(path):
                return self._meta(
                    ToolResult.error(f"unknown versionHandle {requested!r}: use a handle returned by an earlier write"),
                    "read",
                )
            return self._finish(self._run(path, False, sql, params, ctx), str(requested))
        handle, why = scope_handle(self.versioning["shared"], ctx)
        if handle is None:
            return self._meta(ToolResult.error(why or "no scope"), "read")
        path = snapshot_path(self.storage_root, handle)
        assert path is not None
        if os.path.exists(path):
            return self._finish(self._run(path, False, sql, params, ctx), handle)
        # No snapshot yet in this scope: try the statement read-only on the base. The authorizer refuses a
        # write
        # while preparing it, before anything runs; only then is a snapshot made and the statement run there.
        outcome = self._run(self.path, True, sql, params, ctx)
        if not (outcome.status == "error" and outcome.wrote):
            return self._finish(outcome)
        with self._lock:
            if not os.path.exists(path):
                try:
                    copy_database(self.path if os.path.exists(self.path) else None, path)
                except (sqlite3.Error, OSError) as exc:
                    return self._meta(ToolResult.failed(f"could not make a snapshot of {self.name}: {exc}"), "read")
        return self._finish(self._run(path, False, sql, params, ctx), handle)

    def _promote(self, handle: Any) -> ToolResult:
        path = snapshot_path(self.storage_root, str(handle)) if isinstance(handle, str) else None
        if path is None or not os.path.exists(path):
            return self._meta(
                ToolResult.error(
                    f"unknown versionHandle {handle!r}: nothing was promoted; use a handle returned by a write"
                ),
                "read",
            )
        with self._lock:
            try:
                promote(path, self.path)
            except (sqlite3.Error, OSError) as exc:
                return self._meta(ToolResult.failed(f"promote failed, the base is unchanged: {exc}"), "read")
        return self._meta(
            ToolResult.json(
                {"promoted": handle, "basePath": self.path},
                summary=f"promoted {handle} to {os.path.basename(self.path)}",
            ),
            "mutate",
        )


def _modes_problem(path: str) -> str | None:
    """Why this worker's uid cannot write the read-write database ``path`` by its file modes, with the fix; or
    ``None`` (then SQLite's own message stands)."""
    uid, gid = os.getuid(), os.getgid()
    problem = uid_write_problem(path, uid, gid, groups=os.getgroups())
    if problem is None:
        return None
    folder = os.path.dirname(os.path.realpath(path))
    return (
        f"the database {path} cannot be written by this worker (uid {uid}): {problem}. An operator must give its "
        f"folder to a group (chgrp -R GID {folder} && chmod -R g+rwX {folder} && chmod g+s {folder}) and name "
        "this toolbox in the policy's shared_groups, or declare the database SqliteReadOnly; `agents-supervise "
        "check` warns about it with the same fix"
    )


def open_toolbox(config: dict[str, Any], env: WorkerEnv) -> SqliteToolbox:
    """Open the toolbox described by ``config`` (see the module docstring). Raises ``ValueError`` on bad
    config."""
    return SqliteToolbox(config, env)
