"""The session store: sessions with owners and parent/child links, their turns, tool calls and enabled skills, in
SQLite under the state dir.

A *session* here is one conversation of one agent (the seed's ``sessionId`` + ``conversationId``), owned by a
(tenant, agent) pair (:class:`~supervisor.sessions._ids.Owner`; the tenant is ``local`` until tenants exist). A
frontend's session (an MCP connection, ``agents-supervise call``, the Python API) is opened as a *root* session of
the agent whose tool it calls with :meth:`SessionStore.open_root`: its id is derived from the owner and the
frontend's name for it (:func:`~supervisor.sessions._ids.root_session_id`), so the same name used for two agents is
two sessions. A sub-agent call makes a *child* session (new ids, owned by the sub-agent, same tenant) whose parent
is the caller's session: the child's turns (the prompt, the model's answers, tool results) are the sub-agent's
conversation. Every tool call the portal runs is recorded against the session that made it (tool, arguments,
status, output, duration, call, conversation and turn ids).

The skills enabled in a session, per skills toolbox, are kept here too (:meth:`SessionStore.enabled_skills`): this
is the one copy; the supervisor hands them to the skills worker with every call, so a worker that restarts
forgets nothing, and so does a supervisor that restarts (a session named again, ``--session NAME``, finds them).

Introspection (the System toolbox's session capabilities) is answered in :mod:`supervisor.sessions._introspection`.

Writes are small and synchronous on the trio thread (WAL mode), queued by :class:`~._queued_db.QueuedDatabase`, which
this class builds on. A frontend call's commit (before its answer) holds its
record; the ``modified`` time of its session is set by the next flush that touches (the supervisor's flusher, at
most ``FLUSH_INTERVAL_S`` later, or any read), so a ``kill -9`` may leave a session's ``modified`` up to that much
older than its last call. The WAL's checkpoints (two fsyncs each) are made off that thread
(:meth:`SessionStore.checkpoint`); SQLite's own, on the committing thread, is kept only as a backstop far past the
usual size. A session left ``running`` by a supervisor that died is marked ``interrupted`` when the store opens. A
write that fails (disk full, database locked by another program) never fails the call or loop it records: it is
counted in :attr:`SessionStore.write_errors` with the last message. A store written by an older version gains the
new columns when it opens; its sessions have no agent (``''``), so they belong to no agent and no introspection sees
them.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._bounded import remember
from ._ids import LOCAL_TENANT, Owner, new_id, root_session_id
from ._prune import PRUNE_STEP_ROWS, PruneStep, prune_step
from ._queued_db import CHECKPOINT_COMMITS, QueuedDatabase

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = ["SessionRow", "SessionStore"]

#: Longest text kept per turn or tool output (more is cut with a note).
MAX_TEXT = 64 * 1024


@dataclass(frozen=True)
class SessionRow:
    """One session as the store keeps it."""

    id: str
    conversation_id: str
    parent_id: str | None
    agent: str
    tenant: str
    name: str | None
    created: float
    modified: float
    status: str
    turn_count: int


def _cut(text: str, limit: int = MAX_TEXT) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n[... {len(text) - limit} more characters cut]"


class SessionStore(QueuedDatabase):
    """Sessions, turns and tool calls in ``<state_dir>/sessions.sqlite3`` (``path`` ``":memory:"`` in tests)."""

    def __init__(self, path: str) -> None:
        """Open (or create) the store at ``path``. Raises :class:`SessionStoreUnavailable` (naming the file and
        the cause) when it cannot: the file is not a database or is damaged, or its folder cannot be made."""
        super().__init__(path)
        self.pruned_records = 0  # records of kept sessions the last prune deleted
        self._known: dict[str, None] = {}  # sessions whose row this process wrote or read (a bounded cache)
        #: root session id -> its conversation id, for the sessions this process opened most recently (a bounded
        #: cache: :meth:`open_root` reads a forgotten one back from the database)
        self._roots: dict[str, str] = {}

    # -- writing ------------------------------------------------------------------------------------------------
    @property
    def open_roots(self) -> Mapping[str, str]:
        """Root sessions opened through this store since it opened (or was last pruned), the most recent
        :data:`~supervisor.sessions._bounded.MAX_REMEMBERED_SESSIONS` of them: id -> conversation id."""
        return self._roots

    def open_root(self, owner: Owner, name: str) -> tuple[str, str]:
        """The root session ``name`` of ``owner`` as ``(session id, conversation id)``, created unless it exists.

        A new session gets a fresh conversation id and keeps it for its life (an id a client sends with one call is
        that call's, see :class:`~supervisor.calls._portal.CallOrigin`, and changes nothing here).
        """
        session_id = root_session_id(owner, name)
        known = self._roots.get(session_id)
        if known is not None:
            return session_id, known
        self.flush()
        try:
            row = self._db.execute("SELECT conversation_id FROM sessions WHERE id = ?", (session_id,)).fetchone()
        except sqlite3.Error as exc:
            self._count_error(exc)
            row = None
        conversation = row[0] if row else new_id()
        remember(self._roots, session_id, conversation)
        if row is None:
            self.ensure_session(session_id, conversation, owner.agent, tenant=owner.tenant, name=name)
        return session_id, conversation

    def ensure_session(
        self,
        session_id: str,
        conversation_id: str = "",
        agent: str = "",
        *,
        tenant: str = LOCAL_TENANT,
        name: str | None = None,
    ) -> None:
        """Create a root session record unless it exists (frontends use :meth:`open_root`)."""
        if session_id in self._known:
            return
        remember(self._known, session_id, None)  # a cache of rows written: one forgotten costs an INSERT OR IGNORE
        now = time.time()
        self._write("session", (session_id, conversation_id or session_id, agent, tenant, name, now, now))

    def forget(self, session_ids: Iterable[str]) -> None:
        """The sessions ``session_ids`` were closed: drop what this process caches of them (their records stay in
        the database until the retention removes them; a session of the same id opened again is read back)."""
        for session_id in session_ids:
            self._known.pop(session_id, None)
            self._roots.pop(session_id, None)

    def start_child(
        self,
        session_id: str,
        conversation_id: str,
        parent_id: str,
        agent: str,
        parent_call_id: str | None,
        tenant: str = LOCAL_TENANT,
    ) -> None:
        """Record a sub-agent's session, owned by ``(tenant, agent)``, child of ``parent_id`` (created as a root
        first if unknown)."""
        self.ensure_session(parent_id)
        now = time.time()
        self._write("child", (session_id, conversation_id, parent_id, agent, tenant, parent_call_id, now, now))

    def add_turn(self, session_id: str, role: str, content: str, tool: str | None = None) -> None:
        """Append a turn (``user``, ``assistant``, ``thinking`` (a model's reasoning) or ``tool``) to a session."""
        now = time.time()
        self._write("turn", (session_id, session_id, role, _cut(content), tool, now))
        self._touch(session_id)  # its modified time is set by the flush that touches

    def finish(self, session_id: str, status: str) -> None:
        """Mark a session ``idle`` (answered) or ``failed``."""
        self._write("status", (status, time.time(), session_id))

    def record_call(
        self,
        session_id: str,
        *,
        call_id: str,
        parent_call_id: str | None,
        tool: str,
        args: Any,
        status: str,
        summary: str | None,
        output: str | None,
        started: float,
        duration_s: float,
        conversation_id: str = "",
        turn_id: str = "",
        args_json: str | None = None,
    ) -> None:
        """Record one finished tool call of a session (the session is created as a root if unknown); ``args_json``:
        ``args`` already encoded as JSON (the portal's), else they are encoded here."""
        if session_id not in self._known:
            self.ensure_session(session_id)
        args_text = args_json if args_json is not None else json.dumps(args, default=repr)
        output = output or ""
        self._write(
            "call",
            (
                session_id,
                call_id,
                parent_call_id,
                tool,
                args_text if len(args_text) <= MAX_TEXT else _cut(args_text),
                status,
                summary,
                output if len(output) <= MAX_TEXT else _cut(output),
                started,
                duration_s,
                conversation_id,
                turn_id,
            ),
        )
        self._touch(session_id)  # its modified time is set by the flush that touches

    # -- enabled skills -----------------------------------------------------------------------------------------
    def enabled_skills(self, session_id: str, toolbox: str) -> frozenset[str] | None:
        """The skills enabled in ``session_id`` for the skills toolbox ``toolbox``; ``None`` when the session never
        changed them (it has the toolbox's ``autoEnableSkills``). A read error counts as ``None``."""
        self.flush()
        try:
            row = self._db.execute(
                "SELECT skills FROM session_skills WHERE session_id = ? AND toolbox = ?", (session_id, toolbox)
            ).fetchone()
            skills = json.loads(row[0]) if row else None
        except (sqlite3.Error, ValueError) as exc:
            self._count_error(exc)
            return None
        return frozenset(s for s in skills if isinstance(s, str)) if isinstance(skills, list) else None

    def set_enabled_skills(self, session_id: str, toolbox: str, skills: frozenset[str] | set[str]) -> None:
        """Keep ``skills`` as the skills enabled in ``session_id`` for ``toolbox`` (written at once)."""
        self.ensure_session(session_id)
        value = json.dumps(sorted(skills))
        self._write("skills", (session_id, toolbox, value))
        self.flush()

    def forget_skills(self, toolbox: str, skills: set[str], *, agent: str | None = None) -> None:
        """``skills`` left ``toolbox``: disable them in every session (of ``agent`` only, when given: another
        agent's toolbox of the same name is another toolbox; a session recorded without an agent counts as any
        agent's) that has its own list for it."""
        if not skills:
            return
        self.flush()
        try:
            if agent is None:
                rows = self._db.execute(
                    "SELECT session_id, skills FROM session_skills WHERE toolbox = ?", (toolbox,)
                ).fetchall()
            else:
                rows = self._db.execute(
                    "SELECT k.session_id, k.skills FROM session_skills k JOIN sessions s ON s.id = k.session_id "
                    "WHERE k.toolbox = ? AND s.agent IN (?, '')",
                    (toolbox, agent),
                ).fetchall()
        except sqlite3.Error as exc:
            self._count_error(exc)
            return
        for session_id, text in rows:
            try:
                before = set(json.loads(text))
            except (ValueError, TypeError):
                before = set()
            if before & skills:
                self.set_enabled_skills(session_id, toolbox, before - skills)

    # -- reading ------------------------------------------------------------------------------------------------
    def parents(self) -> dict[str, str | None]:
        """Every session id and its parent id."""
        self.flush()
        return dict(self._db.execute("SELECT id, parent_id FROM sessions").fetchall())

    def owners(self) -> dict[str, Owner]:
        """Every session id and its owner."""
        self.flush()
        return {
            sid: Owner(agent, tenant)
            for sid, agent, tenant in self._db.execute("SELECT id, agent, tenant FROM sessions").fetchall()
        }

    def rows(self, ids: set[str]) -> list[SessionRow]:
        """The sessions among ``ids``, most recently modified first."""
        self.flush()
        out = []
        for row in self._db.execute(
            "SELECT s.id, s.conversation_id, s.parent_id, s.agent, s.tenant, s.name, s.created, s.modified, "
            "s.status, "
            # a session's turns, or, for one with none (a frontend's), its tool calls: what read-session shows
            "COALESCE(NULLIF((SELECT COUNT(*) FROM turns t WHERE t.session_id = s.id), 0), "
            "(SELECT COUNT(*) FROM tool_calls c WHERE c.session_id = s.id)) FROM sessions s "
            "ORDER BY s.modified DESC, s.created DESC"
        ):
            if row[0] in ids:
                out.append(SessionRow(*row))
        return out

    def turns(self, session_id: str) -> list[tuple[int, str, str, str | None]]:
        """``(n, role, content, tool)`` of a session's turns, in order."""
        self.flush()
        return self._db.execute(
            "SELECT n, role, content, tool FROM turns WHERE session_id = ? ORDER BY n", (session_id,)
        ).fetchall()

    def tool_calls(self, session_id: str) -> list[dict[str, Any]]:
        """A session's tool calls, in order."""
        self.flush()
        cur = self._db.execute(
            "SELECT call_id, parent_call_id, tool, args, status, summary, output, started, "
            "duration_s, conversation_id, turn_id FROM tool_calls WHERE session_id = ? ORDER BY id",
            (session_id,),
        )
        names = [d[0] for d in cur.description]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def prune(self, older_than: float) -> int:
        """Delete every session last modified before ``older_than`` (Unix time) that is not running, with its
        turns and tool calls, and the turns and tool calls from before ``older_than`` of every other session that
        is not running (a session in use for longer than the retention keeps only its recent records, so the store
        stays bounded by the traffic of the retention period even when a session never ends); return how many
        sessions went (:attr:`pruned_records`: how many records of sessions still kept went). All at once, in
        steps (:meth:`prune_step`; the supervisor checkpoints between them). A child whose parent went keeps its
        (now dangling) parent id: scopes treat a missing session as none. Never raises for a database error
        (counted as a write error)."""
        gone = records = 0
        while (step := self.prune_step(older_than)) is not None:
            gone, records = gone + step.sessions, records + step.records
            if step.done:
                break
        self.pruned_records = records
        return gone

    def prune_step(self, older_than: float, limit: int = PRUNE_STEP_ROWS) -> PruneStep | None:
        """One step of :meth:`prune`: at most ``limit`` rows deleted in one transaction (``_prune.py``), after
        which a checkpoint is due; ``None`` after a database error (counted as a write error)."""
        self.flush()
        try:
            with self._applying:  # not while the flusher's thread applies a batch on the same connection
                step = prune_step(self._db, older_than, limit)
        except sqlite3.Error as exc:
            self._count_error(exc)
            return None
        self._commits += CHECKPOINT_COMMITS  # the step's pages are in the WAL: a checkpoint is due
        if step.sessions:
            self._known.clear()  # a pruned root session seen again is created again
            self._roots.clear()
        return step

    def count_calls(self, ids: set[str]) -> int:
        self.flush()
        return sum(1 for (sid,) in self._db.execute("SELECT session_id FROM tool_calls") if sid in ids)
