"""The one gate every Developer path goes through: the toolbox's ``FileSandbox`` (default ``AlwaysDeny``).

:func:`check` uses ``sandbox._predicate_eval.check_path`` (the project's evaluator: canonical paths, sizes,
``fsbMaxFileSize``, refusals that do not leak symlink targets) when it is present. Until it lands, a minimal
evaluator of the same predicates stands in; it canonicalises with ``realpath`` (a new file is judged as its
canonical parent plus its name) and refuses with the same kind of message. The kernel (Landlock) is the fence
that holds either way.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from typing import Any

from sandbox._predicates import (
    All,
    AlwaysAllow,
    AlwaysDeny,
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
    parse_predicate,
)

try:  # the shared evaluator, once it is in the tree
    from sandbox._predicate_eval import check_path as _shared_check_path
except ImportError:  # pragma: no cover - depends on what has landed
    _shared_check_path = None

__all__ = ["Access", "check"]

DEFAULT_MAX_FILE_SIZE = 50 * 1024 * 1024


@dataclass(frozen=True)
class Access:
    """``allowed`` with the canonical ``path`` to use, or a ``message`` to return to the agent."""

    allowed: bool
    path: str
    message: str = ""


def _beneath(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _eval(p: PathPredicate, path: str, size: int) -> bool:
    match p:
        case FileExactly(q) | DirectoryExactly(q):
            return path == q
        case DirectoryRecursive(q):
            return _beneath(path, q)
        case ChildOf(q):
            return path != q and _beneath(path, q)
        case DirectoryShallow(q):
            return os.path.dirname(path) == q
        case FilePattern(g):
            return fnmatch.fnmatchcase(os.path.basename(path), g)
        case FileExtension(exts):
            name = os.path.basename(path)
            return any(name.endswith("." + e) and len(name) > len(e) + 1 for e in exts)
        case FileSizeLessThan(n):
            return size < n
        case And(a, b):
            return _eval(a, path, size) and _eval(b, path, size)
        case Or(a, b):
            return _eval(a, path, size) or _eval(b, path, size)
        case Not(a):
            return not _eval(a, path, size)
        case Any_(items):
            return any(_eval(i, path, size) for i in items)
        case All(items):
            return all(_eval(i, path, size) for i in items)
        case AlwaysAllow():
            return True
        case AlwaysDeny():
            return False
    return False


def _fallback(sandbox: dict[str, Any], path: str, for_write: bool, size: int | None) -> Access:
    action = "writing" if for_write else "reading"
    if not path or "\0" in path:
        return Access(False, "", f"refused: {path!r} is not a valid path (empty or contains a NUL byte)")
    predicate = parse_predicate(sandbox.get("fsbPredicate") or {"tag": "AlwaysDeny"}, "/")
    canonical = os.path.realpath(path)
    try:
        actual = size if size is not None else (0 if os.path.isdir(canonical) else os.path.getsize(canonical))
    except OSError:
        actual = 0
    name = sandbox.get("fsbName")
    label = f"the file sandbox {name!r}" if name else "the file sandbox"
    if not _eval(predicate, canonical, actual):
        return Access(
            False, canonical, f"refused: {action} {path!r} is not allowed by {label}. Use a path the sandbox allows."
        )
    limit = sandbox.get("fsbMaxFileSize", DEFAULT_MAX_FILE_SIZE)
    if limit is not None and actual > limit:
        return Access(
            False, canonical, f"refused: {action} {path!r}: larger than {label} allows (fsbMaxFileSize {limit} bytes)."
        )
    return Access(True, canonical)


def check(sandbox: dict[str, Any] | None, path: Any, *, for_write: bool, size: int | None = None) -> Access:
    """May the toolbox read (or write, leaving ``size`` bytes) ``path``? ``sandbox`` is the ``FileSandbox``
    config
    (JSON form, paths absolute); ``None`` means the seed's default, ``AlwaysDeny``. Relative paths are
    refused:
    the worker's current directory means nothing to an agent."""
    if not isinstance(path, str) or not os.path.isabs(path):
        return Access(False, "", f"refused: {path!r} is not an absolute path; give the full path")
    config = sandbox or {"fsbPredicate": {"tag": "AlwaysDeny"}}
    if _shared_check_path is not None:
        res = _shared_check_path(config, path, for_write=for_write, size=size)
        return Access(res.allowed, res.path, res.message)
    return _fallback(config, path, for_write, size)
