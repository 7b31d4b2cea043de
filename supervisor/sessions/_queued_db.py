"""The session store's database as a queue of writes: each write queued on the trio thread, made durable before a
frontend's answer by one append to the store's journal (:meth:`QueuedDatabase.commit`), applied to SQLite in one
transaction per flush (:meth:`QueuedDatabase.flush`: any read, on the trio thread; the supervisor's flusher,
:meth:`QueuedDatabase.flush_off_thread`, on a worker thread, so that the SQLite work of a batch does not hold the trio
thread while calls go on), the WAL checkpointed off that thread (:meth:`QueuedDatabase.checkpoint`). A write that
fails (disk full, database locked by another program) is counted in :attr:`QueuedDatabase.write_errors` with the
last message, never raised.

One batch is applied at a time, in the order the batches were taken. The flusher hands its batch over
(:attr:`QueuedDatabase._handed`) and its thread claims it; a flush on the trio thread (every read) first finishes the
handed batch: it applies it itself when no thread has claimed it yet (the thread may not even have started: the
trio thread must never wait for something that needs the trio loop), else waits for the thread's apply, which needs
nothing of the trio loop. Only then does it apply what was queued since, and read. Lock order: ``_claim`` before
``_applying``; the trio thread never holds ``_applying`` while it asks for ``_claim``.

What the writes mean (sessions, turns, calls, skills) is :class:`~supervisor.sessions._store.SessionStore`'s, which
builds on this; the statements and the schema are ``_store_schema``, the journal's file ``_journal``.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import trio

from ._errors import SessionStoreUnavailable
from ._journal import ROLL_BYTES, Journal
from ._store_schema import STATEMENTS, apply_dead_journals, open_database

__all__ = ["CHECKPOINT_COMMITS", "QueuedDatabase"]

#: Commits after which :meth:`QueuedDatabase.checkpoint_due` (a commit of one call wrote about four pages, so about
#: SQLite's own 1,000-page default); a commit of many writes counts one more for every four of them.
CHECKPOINT_COMMITS = 256


@dataclass
class _Batch:
    """The queued writes one flush applies in one transaction, taken on the trio thread; what applying them
    came to is filled in by whichever thread applied them."""

    pending: list[tuple[str, tuple[Any, ...]]]
    #: sessions whose ``modified`` the transaction sets (empty: a commit's apply, which does not touch)
    touched: dict[str, None]
    #: how far the journal was written when the batch was taken (``None``: none of its writes is journaled)
    journal_offset: int | None
    #: the writes that failed, each as ``Type: message``
    errors: list[str] = field(default_factory=list)
    #: the transaction ran to its end (``commit_error``: its COMMIT failed)
    done: bool = False
    commit_error: str | None = None


class QueuedDatabase:
    """The store's SQLite file (``path`` ``":memory:"`` in tests, without a journal) and its queue of writes."""

    def __init__(self, path: str) -> None:
        """Open (or create) the database at ``path`` and apply what the journals of dead processes hold. Raises
        :class:`SessionStoreUnavailable` (naming the file and the cause) when it cannot: the file is not a database
        or is damaged, or its folder cannot be made."""
        self.path = path
        try:
            self._db = open_database(path)
        except (sqlite3.Error, OSError) as exc:
            raise SessionStoreUnavailable(path, exc) from exc
        self.write_errors = 0
        self.last_write_error: str | None = None
        self._pending: list[tuple[str, tuple[Any, ...]]] = []
        self._journaled = 0  # how many of the pending writes are in the journal already
        self._journal: Journal | None = None
        self._journal_whole = True  # every line of the journal was applied when it is closed: it may go
        #: sessions a queued write touched: their ``modified`` is set once per :meth:`flush`, not once per write
        self._touched: dict[str, None] = {}
        self._commits = 0  # transactions committed since the last checkpoint was due
        self._checkpoint_error: str | None = None  # the last checkpoint's failure, counted by checkpoint_due
        self._checkpointer: sqlite3.Connection | None = None  # the checkpointing thread's own connection
        #: held by whoever applies a batch (the trio thread or the flusher's), for the apply only
        self._applying = threading.Lock()
        #: guards :attr:`_handed`: the flusher's batch not yet claimed by its thread (module docstring)
        self._claim = threading.Lock()
        self._handed: _Batch | None = None
        if path != ":memory:":
            try:
                for error in apply_dead_journals(self._db, path):
                    self._count_error(error)
                self._journal = Journal(path)
            except (sqlite3.Error, OSError) as exc:  # no journal: commits go to the database, as without one
                self._count_error(f"journal: {type(exc).__name__}: {exc}")

    def _count_error(self, error: BaseException | str) -> None:
        """Count a write that failed, keeping its message (an exception as ``Type: message``)."""
        self.write_errors += 1
        self.last_write_error = error if isinstance(error, str) else f"{type(error).__name__}: {error}"

    def _touch(self, session_id: str) -> None:
        """Have the next flush that touches set ``session_id``'s ``modified`` time."""
        self._touched[session_id] = None

    def _write(self, statement: str, params: tuple[Any, ...]) -> None:
        """Queue a write (a statement of :data:`STATEMENTS` and its parameters); :meth:`flush` applies queued writes
        in one transaction (the supervisor flushes every 0.2 s; every read flushes first, so readers always see
        every write made before them), :meth:`commit` makes them durable before a frontend's answer."""
        self._pending.append((statement, params))
        if len(self._pending) >= 512:
            self.flush()

    def commit(self) -> None:
        """Make every queued write durable (a frontend's call is answered after this): appended to this store's
        journal with one ``write`` (``supervisor/sessions/_journal.py``), applied to the database by the next
        :meth:`flush` (a read flushes first), or by the next open of the store after a crash. Without a journal
        (``":memory:"``, or one that failed) the writes are committed to the database at once, without setting
        the sessions' ``modified`` times (left to the next flush). Never raises."""
        if self._journal is not None and self._journaled < len(self._pending):
            try:
                self._journal.append(self._pending[self._journaled :])
                self._journaled = len(self._pending)
                return
            except OSError as exc:  # a full disk: into SQLite now, and without a journal from now on
                self._count_error(f"journal: {type(exc).__name__}: {exc}")
                self._journal.close(remove=False)  # what it holds is applied by the flush below or the next open
                self._journal = None
        if self._journal is None:
            self._apply(touch=False)

    def flush(self, *, touch: bool = True) -> None:
        """Apply the queued writes to the database in one transaction, and set the ``modified`` time of the
        sessions whose calls were recorded. A failing write is counted and skipped, never raised.

        ``touch=False``: a frontend call's commit before its answer, which is :meth:`commit`."""
        if touch:
            self._apply(touch=True)
        else:
            self.commit()

    def _apply(self, *, touch: bool) -> None:
        self._finish_handed()
        batch = self._take(touch=touch)
        if batch is not None:
            with self._applying:
                self._apply_batch(batch)
            self._settle(batch, whole=True)

    async def flush_off_thread(self) -> None:
        """:meth:`flush`, the batch's SQLite work done on a worker thread (the supervisor's flusher): the trio
        thread goes on queueing and committing meanwhile; a read meanwhile finishes the batch first (module
        docstring). A journal due to start again (:data:`~supervisor.sessions._journal.ROLL_BYTES`) is applied on
        this thread, where nothing can be appended to it between the apply and its new start."""
        if self._journal is not None and self._journal.offset > ROLL_BYTES:
            self.flush()
            return
        self._finish_handed()
        batch = self._take(touch=True)
        if batch is None:
            return
        with self._claim:
            self._handed = batch
        try:
            await trio.to_thread.run_sync(self._apply_handed)
        finally:
            self._finish_handed()  # cancelled before its thread claimed it: applied here; else waited for
            self._settle(batch, whole=False)

    def _finish_handed(self) -> None:
        """On the trio thread: apply the flusher's batch when no thread has claimed it yet, else wait until the
        thread that claimed it has applied it."""
        with self._claim:
            handed, self._handed = self._handed, None
        with self._applying:  # (a thread that claimed the batch holds this until it is applied)
            if handed is not None:
                self._apply_batch(handed)

    def _apply_handed(self) -> None:
        """On the flusher's thread: claim the handed batch (unless a read on the trio thread took it) and apply it."""
        with self._claim:
            batch, self._handed = self._handed, None
            if batch is None:
                return
            self._applying.acquire()  # under _claim: whoever finds nothing handed now waits for this apply
        try:
            self._apply_batch(batch)
        finally:
            self._applying.release()

    def _take(self, *, touch: bool) -> _Batch | None:
        """The queued writes (and, with ``touch``, the sessions to touch) as a batch; ``None`` when there is
        nothing to apply. On the trio thread."""
        if not self._pending and not (touch and self._touched):
            return None
        pending, self._pending = self._pending, []
        journaled, self._journaled = self._journaled, 0
        touched: dict[str, None] = {}
        if touch:
            touched, self._touched = self._touched, {}
        journal = self._journal
        return _Batch(pending, touched, journal.offset if journal is not None and journaled else None)

    def _apply_batch(self, batch: _Batch) -> None:
        """Apply ``batch`` in one transaction (the caller holds :attr:`_applying`); a failing write is kept in the
        batch, not raised (only a ``BEGIN`` the connection refuses, a closed store, raises). On the trio thread or
        the flusher's."""
        self._db.execute("BEGIN")
        for statement, params in batch.pending:
            try:
                self._db.execute(STATEMENTS[statement], params)
            except (sqlite3.Error, UnicodeEncodeError) as exc:  # a lone surrogate SQLite cannot store, too
                batch.errors.append(f"{type(exc).__name__}: {exc}")
        if batch.touched:
            now = time.time()
            try:
                self._db.executemany(STATEMENTS["modified"], [(now, session_id) for session_id in batch.touched])
            except sqlite3.Error as exc:
                batch.errors.append(f"{type(exc).__name__}: {exc}")
        journal = self._journal
        if journal is not None and batch.journal_offset is not None:
            try:
                self._db.execute(
                    "INSERT OR REPLACE INTO journal_applied (name, generation, applied, ts) VALUES (?, ?, ?, ?)",
                    (journal.name, journal.generation, batch.journal_offset, time.time()),
                )
            except sqlite3.Error as exc:
                batch.errors.append(f"{type(exc).__name__}: {exc}")
        try:
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            batch.commit_error = f"{type(exc).__name__}: {exc}"
        batch.done = True

    def _settle(self, batch: _Batch, *, whole: bool) -> None:
        """Count what applying ``batch`` came to (on the trio thread); ``whole``: nothing was appended to the
        journal since the batch was taken, so every line written is applied now and the journal may start again."""
        if not batch.done:
            return
        for error in batch.errors:
            self._count_error(error)
        if batch.commit_error is not None:
            self.write_errors += len(batch.pending)
            self.last_write_error = batch.commit_error
            self._journal_whole = False  # its lines were not applied: the journal stays for the next open
            return
        self._commits += 1 + len(batch.pending) // 4
        journal = self._journal
        if (
            journal is not None
            and batch.journal_offset is not None
            and (whole or journal.offset == batch.journal_offset)
        ):
            journal.applied()

    def checkpoint_due(self) -> bool:
        """Whether enough was committed since the last checkpoint for another (never for ``":memory:"``); a
        ``True`` answer starts the count again, so the caller is expected to run :meth:`checkpoint` then. On the
        thread that writes (an error of the last checkpoint is counted here)."""
        if self._checkpoint_error is not None:
            self._count_error(self._checkpoint_error)
            self._checkpoint_error = None
        if self._commits < CHECKPOINT_COMMITS or self.path == ":memory:":
            return False
        self._commits = 0
        return True

    def checkpoint(self) -> None:
        """Copy what the WAL holds into the database file (a passive checkpoint: it never waits for, nor stops, the
        writer) on a connection of its own. Meant for a thread of its own, one call at a time (the supervisor runs
        it with ``trio.to_thread`` when :meth:`checkpoint_due`), so that a checkpoint's fsyncs never stall the
        commits of the thread that writes. Never raises for a database error (the next :meth:`checkpoint_due`
        counts it as a write error)."""
        if self.path == ":memory:":
            return
        try:
            if self._checkpointer is None:
                self._checkpointer = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            self._checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error as exc:
            self._checkpoint_error = f"checkpoint: {type(exc).__name__}: {exc}"

    def close(self) -> None:
        """Flush and close the database; safe to call twice."""
        try:
            self.flush()
        except sqlite3.ProgrammingError:
            pass  # already closed
        if self._journal is not None:
            self._journal.close(remove=self._journal_whole and not self._pending)
            self._journal = None
        if self._checkpointer is not None:
            self._checkpointer.close()
            self._checkpointer = None
        self._db.close()
