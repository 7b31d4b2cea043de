"""The session store: sessions with parent/child links, their turns and tool calls, in SQLite under the state dir.

A *session* here is one conversation of one agent (the seed's ``sessionId`` + ``conversationId``). A frontend's
session (MCP, ``agents-supervise call``) is a root session, created the first time the portal sees its id. A
sub-agent call makes a *child* session (new ids) whose parent is the caller's session: the child's turns (the
prompt, the model's answers, tool results) are the sub-agent's conversation. Every tool call the portal runs is
recorded against the session that made it (tool, arguments, status, output, duration, call ids).

The System toolbox's ``list-sessions``, ``search-sessions``, ``read-session`` and ``get-session-stats`` are answered
by :func:`answer_host_request` from the supervisor's own copy of that toolbox's config (the worker's copy is not
trusted): the scope (``SessionIntrospectionScope``), ``SessionIntrospectionMaxResults`` and
``SessionIntrospectionIncludeToolOutputs`` are enforced here. Scopes are relative to the calling session:

- ``subtree``: the calling session and all its descendants (the default);
- ``children-only``: its descendants, not itself;
- ``parents-only``: its ancestors (parent, grandparent, ...), not itself;
- ``all``: every session in the store.

Writes are small and synchronous on the trio thread (WAL mode); a session left ``running`` by a supervisor that died
is marked ``interrupted`` when the store opens. A write that fails (disk full, database locked by another program)
never fails the call or loop it records: it is counted in :attr:`SessionStore.write_errors` with the last message.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["SCOPES", "SESSION_OPS", "SessionRow", "SessionStore", "answer_host_request", "scope_members"]

SCOPES = ("parents-only", "children-only", "subtree", "all")
SESSION_OPS = ("list-sessions", "search-sessions", "read-session", "get-session-stats")
#: Longest text kept per turn or tool output (more is cut with a note).
MAX_TEXT = 64 * 1024
_PREVIEW = 80

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY, conversation_id TEXT NOT NULL, parent_id TEXT, agent TEXT NOT NULL DEFAULT '',
    parent_call_id TEXT, created REAL NOT NULL, modified REAL NOT NULL, status TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS sessions_parent ON sessions(parent_id);
CREATE TABLE IF NOT EXISTS turns (
    session_id TEXT NOT NULL, n INTEGER NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL,
    tool TEXT, ts REAL NOT NULL, PRIMARY KEY (session_id, n));
CREATE TABLE IF NOT EXISTS tool_calls (
    id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL, call_id TEXT, parent_call_id TEXT,
    tool TEXT NOT NULL, args TEXT NOT NULL, status TEXT NOT NULL, summary TEXT, output TEXT,
    started REAL NOT NULL, duration_s REAL NOT NULL);
CREATE INDEX IF NOT EXISTS tool_calls_session ON tool_calls(session_id);
"""


@dataclass(frozen=True)
class SessionRow:
    """One session as the store keeps it."""

    id: str
    conversation_id: str
    parent_id: str | None
    agent: str
    created: float
    modified: float
    status: str
    turn_count: int


def _cut(text: str, limit: int = MAX_TEXT) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n[... {len(text) - limit} more characters cut]"


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def scope_members(scope: str, current: str, parents: Mapping[str, str | None]) -> set[str]:
    """The session ids ``scope`` lets the session ``current`` see, given every session's parent (pure).

    Raises ``ValueError`` for an unknown scope. A parent cycle (impossible through the store) is walked once.
    """
    if scope == "all":
        return set(parents)
    if scope == "parents-only":
        out: set[str] = set()
        node = parents.get(current)
        while node is not None and node not in out and node != current:
            out.add(node)
            node = parents.get(node)
        return out
    if scope not in ("subtree", "children-only"):
        raise ValueError(f"unknown session scope {scope!r}; expected one of {', '.join(SCOPES)}")
    children: dict[str, list[str]] = {}
    for sid, parent in parents.items():
        if parent is not None:
            children.setdefault(parent, []).append(sid)
    seen = {current}
    stack = [current]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in seen:
                seen.add(child)
                stack.append(child)
    if scope == "children-only":
        seen.discard(current)
    return seen


class SessionStore:
    """Sessions, turns and tool calls in ``<state_dir>/sessions.sqlite3`` (``path`` ``":memory:"`` in tests)."""

    def __init__(self, path: str) -> None:
        if path != ":memory:":
            os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o700, exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        if path != ":memory:":
            os.chmod(path, 0o600)
            self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._db.execute("UPDATE sessions SET status='interrupted' WHERE status='running'")
        self.write_errors = 0
        self.last_write_error: str | None = None
        self._pending: list[Callable[[], None]] = []
        self._known: set[str] = set()

    def _write(self, action: Callable[[], None]) -> None:
        """Queue a write; :meth:`flush` runs queued writes in one transaction (the supervisor flushes every
        0.2 s, and every read flushes first, so readers always see every write made before them)."""
        self._pending.append(action)
        if len(self._pending) >= 512:
            self.flush()

    def flush(self) -> None:
        """Run the queued writes in one transaction. A failing write is counted and skipped, never raised."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        self._db.execute("BEGIN")
        for action in pending:
            try:
                action()
            except sqlite3.Error as exc:
                self.write_errors += 1
                self.last_write_error = f"{type(exc).__name__}: {exc}"
        try:
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            self.write_errors += len(pending)
            self.last_write_error = f"{type(exc).__name__}: {exc}"

    def close(self) -> None:
        """Flush and close the database; safe to call twice."""
        try:
            self.flush()
        except sqlite3.ProgrammingError:
            pass  # already closed
        self._db.close()

    # -- writing ------------------------------------------------------------------------------------------------
    def ensure_session(self, session_id: str, conversation_id: str = "", agent: str = "") -> None:
        """Create a root session record for a frontend's session id unless it exists."""
        if session_id in self._known:
            return
        self._known.add(session_id)
        now = time.time()
        self._write(lambda: self._db.execute(
            "INSERT OR IGNORE INTO sessions (id, conversation_id, parent_id, agent, created, modified, status) "
            "VALUES (?, ?, NULL, ?, ?, ?, 'idle')", (session_id, conversation_id or session_id, agent, now, now)))

    def start_child(self, session_id: str, conversation_id: str, parent_id: str, agent: str,
                    parent_call_id: str | None) -> None:
        """Record a sub-agent's session, child of ``parent_id`` (created as a root first if unknown)."""
        self.ensure_session(parent_id)
        now = time.time()
        self._write(lambda: self._db.execute(
            "INSERT INTO sessions (id, conversation_id, parent_id, agent, parent_call_id, created, modified, status) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, 'running')",
            (session_id, conversation_id, parent_id, agent, parent_call_id, now, now)))

    def add_turn(self, session_id: str, role: str, content: str, tool: str | None = None) -> None:
        """Append a turn (``user``, ``assistant`` or ``tool``) to a session."""
        now = time.time()

        def write() -> None:
            self._db.execute("INSERT INTO turns (session_id, n, role, content, tool, ts) VALUES (?, (SELECT "
                             "COALESCE(MAX(n), 0) + 1 FROM turns WHERE session_id = ?), ?, ?, ?, ?)",
                             (session_id, session_id, role, _cut(content), tool, now))
            self._db.execute("UPDATE sessions SET modified = ? WHERE id = ?", (now, session_id))

        self._write(write)

    def finish(self, session_id: str, status: str) -> None:
        """Mark a session ``idle`` (answered) or ``failed``."""
        self._write(lambda: self._db.execute("UPDATE sessions SET status = ?, modified = ? WHERE id = ?",
                                             (status, time.time(), session_id)))

    def record_call(self, session_id: str, *, call_id: str, parent_call_id: str | None, tool: str, args: Any,
                    status: str, summary: str | None, output: str | None, started: float, duration_s: float) -> None:
        """Record one finished tool call of a session (the session is created as a root if unknown)."""
        self.ensure_session(session_id)

        def write() -> None:
            self._db.execute("INSERT INTO tool_calls (session_id, call_id, parent_call_id, tool, args, status, "
                             "summary, output, started, duration_s) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                             (session_id, call_id, parent_call_id, tool, _cut(json.dumps(args, default=repr)),
                              status, summary, _cut(output or ""), started, duration_s))
            self._db.execute("UPDATE sessions SET modified = ? WHERE id = ?", (time.time(), session_id))

        self._write(write)

    # -- reading ------------------------------------------------------------------------------------------------
    def parents(self) -> dict[str, str | None]:
        """Every session id and its parent id."""
        self.flush()
        return dict(self._db.execute("SELECT id, parent_id FROM sessions").fetchall())

    def rows(self, ids: set[str]) -> list[SessionRow]:
        """The sessions among ``ids``, most recently modified first."""
        self.flush()
        out = []
        for row in self._db.execute(
                "SELECT s.id, s.conversation_id, s.parent_id, s.agent, s.created, s.modified, s.status, "
                "(SELECT COUNT(*) FROM turns t WHERE t.session_id = s.id) FROM sessions s "
                "ORDER BY s.modified DESC, s.created DESC"):
            if row[0] in ids:
                out.append(SessionRow(*row))
        return out

    def turns(self, session_id: str) -> list[tuple[int, str, str, str | None]]:
        """``(n, role, content, tool)`` of a session's turns, in order."""
        self.flush()
        return self._db.execute("SELECT n, role, content, tool FROM turns WHERE session_id = ? ORDER BY n",
                                (session_id,)).fetchall()

    def tool_calls(self, session_id: str) -> list[dict[str, Any]]:
        """A session's tool calls, in order."""
        self.flush()
        cur = self._db.execute("SELECT call_id, parent_call_id, tool, args, status, summary, output, started, "
                               "duration_s FROM tool_calls WHERE session_id = ? ORDER BY id", (session_id,))
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def prune(self, older_than: float) -> int:
        """Delete every session last modified before ``older_than`` (Unix time) that is not running, with its
        turns and tool calls; return how many sessions went. A child whose parent went keeps its (now dangling)
        parent id: scopes treat a missing session as none. Never raises for a database error (counted as a write
        error)."""
        self.flush()
        cutoff = (older_than,)
        try:
            self._db.execute("BEGIN")
            old = "SELECT id FROM sessions WHERE modified < ? AND status != 'running'"
            self._db.execute(f"DELETE FROM turns WHERE session_id IN ({old})", cutoff)
            self._db.execute(f"DELETE FROM tool_calls WHERE session_id IN ({old})", cutoff)
            gone = self._db.execute("DELETE FROM sessions WHERE modified < ? AND status != 'running'", cutoff).rowcount
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            self.write_errors += 1
            self.last_write_error = f"{type(exc).__name__}: {exc}"
            try:
                self._db.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            return 0
        self._known.clear()  # a pruned root session seen again is created again
        return gone

    def count_calls(self, ids: set[str]) -> int:
        self.flush()
        return sum(1 for (sid,) in self._db.execute("SELECT session_id FROM tool_calls") if sid in ids)


# --------------------------------------------------------------------------------------------- host requests
class _Refused(Exception):
    pass


def _preview(text: str, index: int, length: int) -> str:
    start = max(0, index - _PREVIEW)
    end = min(len(text), index + length + _PREVIEW)
    return ("..." if start else "") + " ".join(text[start:end].split()) + ("..." if end < len(text) else "")


def _render_turns(store: SessionStore, row: SessionRow, take_n: int, tool_outputs: bool) -> tuple[int, list[str]]:
    turns = store.turns(row.id)
    lines: list[str] = []
    if turns:
        for n, role, content, tool in turns[:take_n]:
            if role == "user":
                lines.append(f"Turn {n}: [User] {content}")
            elif role == "assistant":
                lines.append(f"Turn {n}: [LLM] {content}")
            elif tool_outputs:
                lines.append(f"Turn {n}: [Tool {tool}] {content}")
            else:
                lines.append(f"Turn {n}: [Tool {tool}] (output not shown)")
        return len(turns), lines
    calls = store.tool_calls(row.id)
    for i, call in enumerate(calls[:take_n], 1):
        text = f"Turn {i}: [Tool call] {call['tool']} {call['args']} -> {call['status']}"
        if tool_outputs and call["output"]:
            text += f": {call['output']}"
        lines.append(text)
    return len(calls), lines


def _search(store: SessionStore, rows: list[SessionRow], query: str, tool_outputs: bool) -> list[dict[str, Any]]:
    needle = query.casefold()
    results = []
    for row in rows:
        hit: tuple[str, str] | None = None
        for _n, role, content, _tool in store.turns(row.id):
            if role == "tool" and not tool_outputs:
                continue
            i = content.casefold().find(needle)
            if i >= 0:
                hit = (_preview(content, i, len(query)), "content" if role != "tool" else "tool_output")
                break
        if hit is None:
            for call in store.tool_calls(row.id):
                texts = [("tool_call", f"{call['tool']} {call['args']}")]
                if tool_outputs:
                    texts.append(("tool_output", call["output"] or ""))
                for kind, text in texts:
                    i = text.casefold().find(needle)
                    if i >= 0:
                        hit = (_preview(text, i, len(query)), kind)
                        break
                if hit:
                    break
        if hit is not None:
            results.append({"sessionId": row.id, "conversationId": row.conversation_id, "turnCount": row.turn_count,
                            "preview": hit[0], "matchType": hit[1]})
    return results


def _answer(store: SessionStore, config: Mapping[str, Any], current: str, op: str, args: Mapping[str, Any]) -> Any:
    scope = str(config.get("SessionIntrospectionScope") or "subtree")
    max_results = int(config.get("SessionIntrospectionMaxResults") or 50)
    tool_outputs = bool(config.get("SessionIntrospectionIncludeToolOutputs", False))
    parents = store.parents()
    members = scope_members(scope, current, parents)
    rows = store.rows(members)
    ancestors = scope_members("parents-only", current, parents)
    descendants = scope_members("children-only", current, parents)
    if op == "list-sessions":
        return {"sessions": [{"sessionId": r.id, "conversationId": r.conversation_id,
                              "modificationTime": _iso(r.modified), "turnCount": r.turn_count,
                              "isParent": r.id in ancestors, "isChild": r.id in descendants,
                              "isLocked": r.status == "running", "status": r.status, "agent": r.agent}
                             for r in rows[:max_results]],
                "totalAccessible": len(rows), "scope": scope, "truncated": len(rows) > max_results}
    if op == "search-sessions":
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            raise _Refused("MissingParameterError: search-sessions needs a non-empty 'query'")
        results = _search(store, rows, query.strip(), tool_outputs)
        return {"query": query, "results": results[:max_results], "totalMatches": len(results), "scope": scope}
    if op == "read-session":
        target = args.get("session_id")
        if not isinstance(target, str) or not target or len(target) > 200:
            raise _Refused("InvalidSessionIdError: read-session needs 'session_id', a session id from list-sessions")
        if target not in parents:
            raise _Refused(f"SessionNotFoundError: no session {target!r}")
        if target not in members:
            raise _Refused(f"SessionAccessDeniedError: session {target!r} is outside this toolbox's scope "
                           f"({scope})")
        take_n = args.get("take_n")
        take = max_results if not isinstance(take_n, int) or take_n < 1 else min(take_n, max_results)
        show_outputs = tool_outputs and args.get("include_tool_responses", True) is not False
        row = store.rows({target})[0]
        total, lines = _render_turns(store, row, take, show_outputs)
        return {"sessionId": row.id, "conversationId": row.conversation_id, "totalTurns": total,
                "returnedTurns": len(lines), "content": "\n".join(lines), "format": "condensed-text",
                "scope": scope, "access": "granted"}
    if op == "get-session-stats":
        return {"totalSessions": len(rows), "totalTurnsAcrossAllSessions": sum(r.turn_count for r in rows),
                "totalToolCalls": store.count_calls(members), "scope": scope,
                "note": "counts cover the sessions this toolbox's scope lets it see"}
    raise _Refused(f"unknown session operation {op!r}; expected one of {', '.join(SESSION_OPS)}")


def answer_host_request(store: SessionStore | None, config: Mapping[str, Any], session_id: str, op: Any,
                        args: Any) -> dict[str, Any]:
    """Answer a System toolbox's session ``host`` request as the reply frame's body (``result`` or ``error``).

    Args:
        store: the supervisor's store (``None``: no store configured).
        config: the supervisor's copy of the calling toolbox's config (its capabilities, scope and limits).
        session_id: the session of the call that made the request (from the supervisor's record of the call).
        op: the capability asked for; args: its arguments (untrusted).
    """
    if store is None:
        return {"error": "SessionStoreNotConfiguredError: this supervisor keeps no session store"}
    if op not in SESSION_OPS:
        return {"error": f"unknown host operation {op!r}; expected one of {', '.join(SESSION_OPS)}"}
    if op not in (config.get("Capabilities") or []):
        return {"error": f"CapabilityNotEnabledError: {op} is not among this toolbox's Capabilities"}
    if not isinstance(args, dict):
        args = {}
    store.ensure_session(session_id)
    try:
        return {"result": _answer(store, config, session_id, op, args)}
    except _Refused as exc:
        return {"error": str(exc)}
    except ValueError as exc:
        return {"error": str(exc)}
    except sqlite3.Error as exc:
        return {"error": f"SessionStoreError: the session store could not be read ({type(exc).__name__}: {exc})"}
