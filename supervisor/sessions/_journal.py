"""The session store's journal: writes made durable before a frontend's answer with one ``write``, applied to SQLite
later in batches (issue 29: records off the call path where durability allows it).

A frontend's call is answered only once its record is in the kernel's hands (issue 19: a supervisor killed with
SIGKILL right after an answer has lost no record of it). Committing the record to SQLite before every answer cost a
transaction per call (``BEGIN``, ``INSERT``, ``COMMIT``: 7 ``pwrite`` and 6 ``fcntl`` calls, 25-35 us of CPU on this
machine). Instead :meth:`Journal.append` writes the store's queued writes to this file, one line each, all of them
with one ``write``; the store applies them to SQLite with the supervisor's flusher (every 0.2 s) and before every
read, so readers in the process see every write, as before.

One journal per store, so per process: ``<database>.pending-<token>``, made 0600 in the database's folder and
locked (``flock``) for the process's life, so that supervisors sharing a state folder never touch each other's.
Its first line names its *generation*; the database keeps per journal the generation and the offset up to which its
lines are applied (the ``journal_applied`` table), set in the transaction that applies them. Opening a store applies
every journal whose lock is free (its process is gone) from its applied offset on (:func:`dead_journals`,
:func:`parse`), in one transaction with its new offset, then removes it: whatever instant a crash came at, each line
is applied exactly once. A journal applied past :data:`ROLL_BYTES` starts again empty with a new generation (the
offset row then names the old one, so a crash before the next apply replays the new lines from the start, which is
right: none of them was applied). A last line cut short (a machine crash in the middle of a write: the ``write``
of a live process is never split by a SIGKILL) is ignored; a line that does not parse is counted and skipped.

Lines are JSON ``[statement, [params...]]`` (the store's statement names), encoded with ``surrogatepass`` so that
any Python string the store was given comes back as it was.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import stat
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

__all__ = [
    "ROLL_BYTES",
    "Journal",
    "JournalTail",
    "dead_journals",
    "encode_lines",
    "journal_prefix",
    "parse",
    "read_all",
]

#: A journal applied past this size starts again empty.
ROLL_BYTES = 4 * 1024 * 1024
_SUFFIX = ".pending-"
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def encode_lines(entries: Sequence[tuple[str, Sequence[Any]]]) -> bytes:
    """The journal lines of ``entries`` (``(statement, params)`` each), as bytes to write at once."""
    if len(entries) == 1:  # a sequential caller's commit: one record
        name, params = entries[0]
        return (_ENCODER.encode([name, list(params)]) + "\n").encode("utf-8", "surrogatepass")
    return "".join([_ENCODER.encode([name, list(params)]) + "\n" for name, params in entries]).encode(
        "utf-8", "surrogatepass"
    )


def _header(generation: str) -> bytes:
    return (_ENCODER.encode({"journal": generation}) + "\n").encode()


@dataclass
class JournalTail:
    """What :func:`parse` found after the applied offset: the journal's generation (``None``: no complete header),
    the entries not yet applied, the offset of the end of the last complete line, and how many lines were bad."""

    generation: str | None
    entries: list[tuple[str, list[Any]]] = field(default_factory=list)
    end: int = 0
    bad_lines: int = 0


def parse(data: bytes, applied_generation: str | None, applied_offset: int) -> JournalTail:
    """The entries of the journal ``data`` not yet applied, given what the database says was (the generation and
    offset of its ``journal_applied`` row; ``None``: nothing of this journal was applied). Pure.

    Lines of another generation than the applied one are all unapplied (the journal rolled after the last apply). A
    last line without its newline is left out (cut short); a line that is not ``[name, [params]]`` is counted in
    ``bad_lines`` and skipped."""
    first = data.find(b"\n")
    if first < 0:
        return JournalTail(None)
    try:
        generation = json.loads(data[:first])["journal"]
    except (ValueError, TypeError, KeyError):
        return JournalTail(None, bad_lines=1)
    start = first + 1
    if generation == applied_generation:
        start = max(start, applied_offset)
    tail = JournalTail(str(generation), end=start)
    while (end := data.find(b"\n", start)) >= 0:
        try:
            name, params = json.loads(data[start:end].decode("utf-8", "surrogatepass"))
            if not isinstance(name, str) or not isinstance(params, list):
                raise TypeError(name)
            tail.entries.append((name, params))
        except (ValueError, TypeError):
            tail.bad_lines += 1
        start = tail.end = end + 1
    return tail


def journal_prefix(database: str) -> str:
    """The file name every journal of the database at ``database`` starts with."""
    return os.path.basename(database) + _SUFFIX


class Journal:
    """This process's journal of the database at ``database`` (see the module docstring). Raises ``OSError`` when
    it cannot be made (the store then commits to SQLite before each answer, as it did without one)."""

    def __init__(self, database: str) -> None:
        folder = os.path.dirname(os.path.abspath(database))
        self.name = journal_prefix(database) + secrets.token_hex(8)
        self.path = os.path.join(folder, self.name)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise
        self._fd: int | None = fd
        self.generation = ""
        #: bytes written so far (the header included): the offset the next apply records
        self.offset = 0
        self._start()

    def _start(self) -> None:
        assert self._fd is not None
        self.generation = secrets.token_hex(8)
        header = _header(self.generation)
        os.ftruncate(self._fd, 0)
        self._write(header)
        self.offset = len(header)

    def _write(self, data: bytes) -> None:
        assert self._fd is not None
        written = os.write(self._fd, data)  # a regular file takes it whole, but for a full disk or a signal
        view = memoryview(data)[written:]
        while view:
            view = view[os.write(self._fd, view) :]

    def append(self, entries: Sequence[tuple[str, Sequence[Any]]]) -> None:
        """Write ``entries`` at the end, with one ``write`` (more only if the kernel takes part of it). Raises
        ``OSError`` (a full disk): the caller then commits them to SQLite instead."""
        data = encode_lines(entries)
        self._write(data)
        self.offset += len(data)

    def applied(self) -> None:
        """Every line written is now applied to the database (the caller committed the offset): start again
        empty once the file passed :data:`ROLL_BYTES`."""
        if self._fd is not None and self.offset > ROLL_BYTES:
            self._start()

    def close(self, *, remove: bool) -> None:
        """Close; ``remove``: every line is applied, the file goes (else it stays for the next open to apply).
        Safe to call twice."""
        if self._fd is None:
            return
        if remove:
            try:
                os.unlink(self.path)
            except OSError:
                pass
        os.close(self._fd)
        self._fd = None


def dead_journals(database: str) -> Iterator[tuple[str, int]]:
    """The journals of the database at ``database`` whose process is gone (their lock is free), each as ``(name,
    fd)``, the fd open and locked by this process until the caller closes it (after removing the file). Files that
    are not regular (a link, a folder) are passed over."""
    folder = os.path.dirname(os.path.abspath(database))
    prefix = journal_prefix(database)
    try:
        names = sorted(n for n in os.listdir(folder) if n.startswith(prefix))
    except OSError:
        return
    for name in names:
        try:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError("not a regular file")
            if not os.path.samestat(os.fstat(fd), os.stat(os.path.join(folder, name), follow_symlinks=False)):
                raise OSError("replaced")  # removed (and maybe made again) since it was listed: not this file
        except OSError:
            os.close(fd)
            continue
        yield name, fd


def read_all(fd: int) -> bytes:
    """Everything in the file ``fd`` (from its start)."""
    chunks = []
    offset = 0
    while chunk := os.pread(fd, 1 << 20, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)
