"""The one place the Lua toolbox asks whether a path is inside its FileSandbox.

The check itself is ``sandbox._predicate_eval.check_path`` (canonicalise, evaluate the predicate, enforce
``fsbMaxFileSize``); this module only binds it to the toolbox's sandbox and base folder. Until that module is in
every checkout, a minimal evaluation of the same semantics (exact paths, trees, children, patterns, extensions,
sizes, the boolean operations) stands in behind the same function, so the rest of the toolbox does not change when
it goes away.

This is the second fence: Landlock, applied by the launcher before any toolbox code runs, is the first.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass

from sandbox._predicates import (
    All,
    AlwaysAllow,
    And,
    Any_,
    ChildOf,
    DirectoryExactly,
    DirectoryRecursive,
    DirectoryShallow,
    FileExactly,
    FileExtension,
    FilePattern,
    FileSizeLessThan,
    Not,
    Or,
    PathPredicate,
)

__all__ = ["PathGate", "Verdict"]


@dataclass(frozen=True)
class Verdict:
    """``allowed``: go ahead on ``path`` (canonical). Otherwise ``message`` is the refusal an agent can act on."""

    allowed: bool
    path: str
    message: str = ""


def _fallback_allows(p: PathPredicate, path: str, size: int) -> bool:
    match p:
        case FileExactly(x) | DirectoryExactly(x):
            return path == x
        case DirectoryRecursive(x):
            return path == x or path.startswith(x.rstrip("/") + "/")
        case ChildOf(x):
            return path.startswith(x.rstrip("/") + "/")
        case DirectoryShallow(x):
            return path != x and os.path.dirname(path) == x
        case FilePattern(pattern):
            return path != "/" and fnmatch.fnmatchcase(os.path.basename(path), pattern)
        case FileExtension(exts):
            name = os.path.basename(path)
            return any(len(name) > len(e) + 1 and name.endswith("." + e) for e in exts)
        case FileSizeLessThan(limit):
            return size < limit
        case And(a, b):
            return _fallback_allows(a, path, size) and _fallback_allows(b, path, size)
        case Or(a, b):
            return _fallback_allows(a, path, size) or _fallback_allows(b, path, size)
        case Not(inner):
            return not _fallback_allows(inner, path, size)
        case Any_(items):
            return any(_fallback_allows(i, path, size) for i in items)
        case All(items):
            return all(_fallback_allows(i, path, size) for i in items)
        case AlwaysAllow():
            return True
    return False


class PathGate:
    """A toolbox's FileSandbox, bound to the folder relative paths start from."""

    def __init__(self, predicate: PathPredicate, max_file_size: int | None, base_dir: str) -> None:
        self.predicate = predicate
        self.max_file_size = max_file_size
        self.base_dir = base_dir

    def check(self, path: str, *, for_write: bool, size: int | None = None, limit_size: bool = True) -> Verdict:
        """May the script read (or write) ``path``? ``size`` is, for a write, the size the file will have;
        ``limit_size=False`` skips ``fsbMaxFileSize`` (for metadata: exists, isdir, list)."""
        try:
            from sandbox._predicate_eval import check_path
        except ImportError:
            return self._fallback(path, for_write=for_write, size=size, limit_size=limit_size)
        checked = check_path(
            self.predicate,
            path,
            for_write=for_write,
            size=size,
            base_dir=self.base_dir,
            max_file_size=self.max_file_size if limit_size else None,
        )
        return Verdict(checked.allowed, checked.path, checked.message)

    def _fallback(self, path: str, *, for_write: bool, size: int | None, limit_size: bool) -> Verdict:
        if not path or "\x00" in path:
            return Verdict(False, "", f"refused: {path!r} is not a valid path (empty or contains a NUL byte)")
        canonical = os.path.realpath(os.path.join(self.base_dir, path))
        try:
            current = 0 if os.path.isdir(canonical) else os.path.getsize(canonical)
        except OSError:
            current = 0
        actual = size if size is not None else current
        action = "writing" if for_write else "reading"
        if not _fallback_allows(self.predicate, canonical, actual):
            return Verdict(False, canonical, f"refused: {action} {path!r} is not allowed by the file sandbox. "
                           "Use a path the sandbox allows.")
        if limit_size and self.max_file_size is not None and actual > self.max_file_size:
            return Verdict(False, canonical, f"refused: {action} {path!r}: the file is larger than the file "
                           f"sandbox allows (fsbMaxFileSize {self.max_file_size} bytes).")
        return Verdict(True, canonical)
