"""The Python half of the Lua ``fs`` module: file operations on paths the FileSandbox allows.

Every operation asks :class:`._paths.PathGate` first and works on the canonical path it returns, opening the last
component with ``O_NOFOLLOW``. Answers follow the host convention of :mod:`._host`: ``(True, value...)``,
``(False, "fail", message)`` for what a script may handle (``nil, message`` in Lua: a missing file, a patch that
does not apply) and ``(False, "sandbox", message)`` for a refusal (a Lua error of kind ``sandbox``).
"""

from __future__ import annotations

import errno
import json
import os
import stat
from typing import TYPE_CHECKING, Any

from .._unified_diff import PatchError, apply_patch

if TYPE_CHECKING:
    from ._paths import PathGate

__all__ = ["FileOps"]

Answer = tuple[Any, ...]


def _refused(op: str, message: str) -> Answer:
    return (False, "sandbox", f"sandbox: fs.{op}: {message}")


def _failed(op: str, path: str, exc: OSError) -> Answer:
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    if exc.errno == errno.EACCES:
        reason += " (the kernel sandbox refused it)"
    return (False, "fail", f"fs.{op}: {path}: {reason}")


class FileOps:
    """The ``fs`` operations of one call. ``max_read_bytes`` caps a read (the state could not hold more)."""

    def __init__(self, gate: PathGate, max_read_bytes: int) -> None:
        self.gate = gate
        self.max_read_bytes = max_read_bytes

    def _read_bytes(self, op: str, path: str, canonical: str) -> bytes | Answer:
        try:
            fd = os.open(canonical, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            return _failed(op, path, exc)
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if stat.S_ISDIR(st.st_mode):
                return (False, "fail", f"fs.{op}: {path}: is a directory (use fs.list)")
            if st.st_size > self.max_read_bytes:
                return (False, "fail", f"fs.{op}: {path}: {st.st_size} bytes do not fit in the script's memory limit")
            return f.read(self.max_read_bytes + 1)

    def read(self, path: str) -> Answer:
        verdict = self.gate.check(path, for_write=False)
        if not verdict.allowed:
            return _refused("read", verdict.message)
        data = self._read_bytes("read", path, verdict.path)
        if isinstance(data, tuple):
            return data
        return (True, data)

    def write(self, path: str, content: bytes) -> Answer:
        verdict = self.gate.check(path, for_write=True, size=len(content))
        if not verdict.allowed:
            return _refused("write", verdict.message)
        try:
            fd = os.open(verdict.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return (False, "fail", f"fs.write: {path}: its directory does not exist (create it with fs.mkdir)")
            return _failed("write", path, exc)
        with os.fdopen(fd, "wb") as f:
            f.write(content)
        return (True, True)

    def _stat(self, op: str, path: str) -> os.stat_result | Answer | None:
        """The stat of an allowed path (``None`` if missing) or the refusal; note ``stat_result`` is a tuple."""
        verdict = self.gate.check(path, for_write=False, limit_size=False)
        if not verdict.allowed:
            return _refused(op, verdict.message)
        try:
            return os.stat(verdict.path)
        except OSError:
            return None

    def exists(self, path: str) -> Answer:
        st = self._stat("exists", path)
        return (True, st is not None) if st is None or isinstance(st, os.stat_result) else st

    def isdir(self, path: str) -> Answer:
        st = self._stat("isdir", path)
        if st is None or isinstance(st, os.stat_result):
            return (True, st is not None and stat.S_ISDIR(st.st_mode))
        return st

    def isfile(self, path: str) -> Answer:
        st = self._stat("isfile", path)
        if st is None or isinstance(st, os.stat_result):
            return (True, st is not None and stat.S_ISREG(st.st_mode))
        return st

    def list(self, path: str) -> Answer:
        """The names in directory ``path`` that the sandbox lets the script read (every name of a directory a
        ``DirectoryExactly`` names: ``PathGate.lists_all``), sorted, as a JSON array."""
        verdict = self.gate.check(path, for_write=False, limit_size=False)
        if not verdict.allowed:
            return _refused("list", verdict.message)
        try:
            names = sorted(os.listdir(verdict.path))
        except OSError as exc:
            return _failed("list", path, exc)
        whole = self.gate.lists_all(verdict.path)
        visible = [
            n
            for n in names
            if whole or self.gate.check(os.path.join(verdict.path, n), for_write=False, limit_size=False).allowed
        ]
        return (True, json.dumps(visible, ensure_ascii=False))

    def mkdir(self, path: str) -> Answer:
        """Create ``path`` and any missing parents; each directory created must be allowed for writing."""
        verdict = self.gate.check(path, for_write=True, size=0)
        if not verdict.allowed:
            return _refused("mkdir", verdict.message)
        missing: list[str] = []
        at = verdict.path
        while not os.path.lexists(at) and at != "/":
            missing.append(at)
            at = os.path.dirname(at)
        for d in missing[1:]:
            parent = self.gate.check(d, for_write=True, size=0)
            if not parent.allowed:
                return _refused(
                    "mkdir",
                    f"creating {path!r} needs the parent {d!r}, which " + parent.message.removeprefix("refused: "),
                )
        try:
            for d in reversed(missing):
                os.mkdir(d, 0o755)
        except OSError as exc:
            return _failed("mkdir", path, exc)
        if not os.path.isdir(verdict.path):
            return (False, "fail", f"fs.mkdir: {path}: exists and is not a directory")
        return (True, True)

    def patch(self, path: str, diff: bytes) -> Answer:
        """Apply a unified diff to a text file; answers a JSON object {hunks_applied, lines_changed}."""
        verdict = self.gate.check(path, for_write=False)
        if not verdict.allowed:
            return _refused("patch", verdict.message)
        data = self._read_bytes("patch", path, verdict.path)
        if isinstance(data, tuple):
            return data
        try:
            outcome = apply_patch(data.decode("utf-8"), diff.decode("utf-8"), fuzzy=True)
        except UnicodeDecodeError:
            return (False, "fail", f"fs.patch: {path}: the file or the patch is not UTF-8 text")
        except PatchError as exc:
            return (False, "fail", f"fs.patch: {path}: {exc}")
        new = outcome.text.encode("utf-8")
        written = self.write(path, new)
        if written[0] is not True:
            return written
        return (True, json.dumps({"hunks_applied": outcome.hunks_applied, "lines_changed": outcome.lines_changed}))
