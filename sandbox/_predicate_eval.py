"""What a ``PathPredicate`` allows: evaluation of one path, and the in-worker check toolboxes call.

This is the second fence. The kernel (Landlock, compiled by ``sandbox._fs_compile``) enforces what it can
say; everything a toolbox does on a path an agent named goes through :func:`check_path` first, which gives
exactly the predicate, including what Landlock cannot express (patterns, extensions, sizes, ``Not``, shallow).

Semantics (the reference for docs/FILES.md; the tests pin each line):

- Predicate paths are canonical: ``parse_predicate`` resolved them once, at load.
- A tested path is canonicalised the way the kernel will walk it (``os.path.realpath``: symlinks resolved
  component by component, ``..`` applied after the symlink before it). A symlink inside an allowed tree that
  points outside is judged by its target. A path that does not exist yet (a new file) is judged as the file it
  will be: its canonical parent plus its name, so ``FileExactly`` and ``FileExtension`` can allow creating it.
  A dangling symlink is judged by where it points, since ``open(O_CREAT)`` would create its target.
- ``FileExactly p`` and ``DirectoryExactly p`` match the one path ``p`` (a directory: listing it, its entries'
  names, not their contents: :func:`lists_entries`). ``DirectoryRecursive p``: ``p`` and everything beneath.
  ``ChildOf p``: strictly beneath ``p``. ``DirectoryShallow p``: ``p`` (listing it) and its direct children (not
  grandchildren: "directory contents only, not subdirectories").
- ``FilePattern g``: ``fnmatch.fnmatchcase`` of the last component (``*``, ``?``, ``[...]``; case-sensitive;
  ``*`` also matches a leading dot). ``FileExtension``: the name ends in ``.ext`` after a non-empty stem
  (``.bashrc`` has no extension; ``a.tar.gz`` has ``gz`` and ``tar.gz``), case-sensitive. ``/`` has no name.
- ``FileSizeLessThan n``: size strictly less than ``n``. The size is the one the caller passes (the size a
  write will leave), else the current size; a new file has size 0, a directory counts as 0, a size that cannot
  be read (permission) fails the test. The size is looked at only when the path alone does not decide, so a
  path the path rules already refuse is never ``stat``-ed.
- ``And``/``All`` (``All []`` allows everything), ``Or``/``Any`` (``Any []`` allows nothing), ``Not``,
  ``AlwaysAllow``, ``AlwaysDeny`` are the boolean operations.
- A path with a NUL byte, or an empty path, is refused before anything else.

A refusal names the rule that refused (the first failing operand of an ``And``, the whole ``Or`` when none of
its alternatives matched, the ``Not`` whose operand matched) and shows the path as the caller wrote it, never
its canonical form: resolving symlinks outside the sandbox must not leak where they point, and the message is
the same whether the file exists or not. Only once the predicate allows a path is its size compared to
``fsbMaxFileSize``.

What this module does not do: open files. Between the check and the open, a concurrent process in the same
worker could swap a directory for a symlink; for predicates Landlock enforces exactly, the kernel closes that
race; for the others it is why a strict policy refuses inexact predicates on toolboxes running arbitrary code.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sandbox._file_sandbox import DEFAULT_MAX_FILE_SIZE, FileSandbox, parse_file_sandbox
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
    PredicateError,
)

__all__ = [
    "PathCheck",
    "Verdict",
    "canonicalise",
    "check_path",
    "describe_predicate",
    "evaluate",
    "lists_entries",
]

_DESCRIBE_LIMIT = 400


@dataclass(frozen=True)
class Verdict:
    """The outcome of :func:`evaluate`.

    Attributes:
        allowed: whether the predicate allows the path.
        path: the canonical path that was judged ("" when the path was refused for its syntax).
        rule: when refused, the rule that refused (as :func:`describe_predicate` writes it); else ``None``.
    """

    allowed: bool
    path: str
    rule: str | None = None


@dataclass(frozen=True)
class PathCheck:
    """The outcome of :func:`check_path`: use ``path`` (canonical) for the operation, or return ``message``.

    Attributes:
        allowed: the operation may go ahead on ``path``.
        path: the canonical path to open (the one that was judged); "" when refused, so that no caller can
            echo where a refused path leads.
        message: "" when allowed; otherwise a refusal an agent can act on, naming the sandbox and the rule,
            the same whether the file exists or not.
        rule: the rule that refused (``"fsbMaxFileSize"`` for the size limit), or ``None``.
    """

    allowed: bool
    path: str
    message: str = ""
    rule: str | None = None


# --- canonical paths


def canonicalise(path: str, base_dir: str | None = None) -> str:
    """Return the canonical absolute form of ``path``, the one the kernel will reach.

    Relative paths join ``base_dir`` (default: the current directory). Symlinks are resolved component by
    component and ``..`` is applied after them; the part that does not exist yet is appended, normalised.

    Raises:
        PredicateError: ``path`` is not a non-empty string, or contains a NUL byte.
    """
    if not isinstance(path, str) or not path:
        raise PredicateError("a path must be a non-empty string")
    if "\x00" in path:
        raise PredicateError("a path must not contain NUL bytes")
    if not os.path.isabs(path):
        path = os.path.join(base_dir if base_dir is not None else os.getcwd(), path)
    return os.path.realpath(path)


# --- evaluation


def _beneath(path: str, top: str) -> bool:
    """``path`` is strictly beneath ``top`` (both canonical)."""
    if top == "/":
        return path != "/"
    return path.startswith(top + "/")


def _name(path: str) -> str:
    return "" if path == "/" else os.path.basename(path)


def _has_extension(name: str, extensions: tuple[str, ...]) -> bool:
    return any(len(name) > len(ext) + 1 and name.endswith("." + ext) for ext in extensions)


def _current_size(path: str) -> int | None:
    """The size :class:`FileSizeLessThan` sees: 0 for a new file or a directory, ``None`` if unreadable."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return 0
    except OSError:
        return None
    return 0 if stat.S_ISDIR(st.st_mode) else st.st_size


_NOT_LOOKED_UP = object()
_Result = tuple[bool | None, PathPredicate | None]


def _eval(p: PathPredicate, path: str, size: object) -> _Result:
    """Three-valued evaluation: ``(value, culprit)``; ``None`` = "depends on the size, not looked up yet"."""
    match p:
        case FileExactly(x) | DirectoryExactly(x):
            ok = path == x
        case DirectoryRecursive(x):
            ok = path == x or _beneath(path, x)
        case ChildOf(x):
            ok = _beneath(path, x)
        case DirectoryShallow(x):
            ok = path == x or os.path.dirname(path) == x
        case FilePattern(pattern):
            ok = path != "/" and fnmatch.fnmatchcase(_name(path), pattern)
        case FileExtension(extensions):
            ok = _has_extension(_name(path), extensions)
        case FileSizeLessThan(limit):
            if size is _NOT_LOOKED_UP:
                return None, None
            ok = isinstance(size, int) and size < limit
        case AlwaysAllow():
            ok = True
        case AlwaysDeny():
            ok = False
        case Not(inner):
            value, _ = _eval(inner, path, size)
            return (None, None) if value is None else (not value, None if not value else p)
        case And(a, b):
            return _all((a, b), path, size)
        case All(items):
            return _all(items, path, size)
        case Or(a, b):
            return _any(p, (a, b), path, size)
        case Any_(items):
            return _any(p, items, path, size)
        case _:
            raise TypeError(f"not a predicate: {p!r}")
    return ok, None if ok else p


def _all(items: tuple[PathPredicate, ...], path: str, size: object) -> _Result:
    unknown = False
    for item in items:
        value, culprit = _eval(item, path, size)
        if value is False:
            return False, culprit
        unknown = unknown or value is None
    return (None, None) if unknown else (True, None)


def _any(whole: PathPredicate, items: tuple[PathPredicate, ...], path: str, size: object) -> _Result:
    unknown = False
    last: PathPredicate | None = whole
    for item in items:
        value, culprit = _eval(item, path, size)
        if value is True:
            return True, None
        unknown = unknown or value is None
        last = culprit
    if unknown:
        return None, None
    return False, (last if len(items) == 1 else whole)


def evaluate(
    predicate: PathPredicate,
    path: str,
    *,
    for_write: bool = False,
    size: int | None = None,
    base_dir: str | None = None,
) -> Verdict:
    """Judge ``path`` against ``predicate`` (the module docstring gives the semantics).

    Args:
        predicate: a parsed predicate (its paths canonical).
        path: the path as the caller wrote it; relative paths join ``base_dir`` (default: the current
            directory).
        for_write: the operation writes (creates, truncates, appends). Which paths match does not depend on
            it: a path that does not exist is judged as the file it will be either way. Callers state their
            intent; for a write they should pass ``size``.
        size: the size ``FileSizeLessThan`` sees, for a write the size the file will have; default: the
            current size (0 for a new file).

    Returns:
        A :class:`Verdict`; a malformed path (empty, NUL byte) is refused with rule ``"path syntax"``. Never
        raises for a bad path.
    """
    del for_write  # accepted for symmetry with check_path; see the docstring
    try:
        canonical = canonicalise(path, base_dir)
    except PredicateError:
        return Verdict(False, "", "path syntax")
    value, culprit = _eval(predicate, canonical, _NOT_LOOKED_UP)
    if value is None:
        actual = size if size is not None else _current_size(canonical)
        value, culprit = _eval(predicate, canonical, actual)
    if value:
        return Verdict(True, canonical)
    return Verdict(False, canonical, describe_predicate(culprit if culprit is not None else predicate))


def lists_entries(p: PathPredicate, directory: str) -> bool:
    """Whether ``p`` grants ``directory`` (canonical) as a listing of all its entries, beyond the entries it allows
    one by one: a ``DirectoryExactly`` of it stands in ``p`` outside every ``Not`` (the seed's "exact directory
    match (contents not included)": the entries' names are what it grants, their contents are not). The caller
    also checks that ``p`` allows ``directory`` itself (an ``And`` may refuse it)."""
    match p:
        case DirectoryExactly(x):
            return x == directory
        case And(a, b) | Or(a, b):
            return lists_entries(a, directory) or lists_entries(b, directory)
        case All(items) | Any_(items):
            return any(lists_entries(i, directory) for i in items)
        case _:
            return False


def describe_predicate(p: PathPredicate) -> str:
    """A short form of ``p`` for messages: ``DirectoryRecursive(/p/src)``, ``Any[a, b]``, ``Not(a)``."""
    text = _describe(p)
    return text if len(text) <= _DESCRIBE_LIMIT else text[: _DESCRIBE_LIMIT - 3] + "..."


def _describe(p: PathPredicate) -> str:
    match p:
        case FileExactly(x) | DirectoryExactly(x) | DirectoryRecursive(x) | DirectoryShallow(x) | ChildOf(x):
            return f"{type(p).__name__}({x})"
        case FilePattern(pattern):
            return f"FilePattern({pattern})"
        case FileExtension(extensions):
            return f"FileExtension({', '.join(extensions)})"
        case FileSizeLessThan(limit):
            return f"FileSizeLessThan({limit})"
        case And(a, b):
            return f"And({_describe(a)}, {_describe(b)})"
        case Or(a, b):
            return f"Or({_describe(a)}, {_describe(b)})"
        case Not(inner):
            return f"Not({_describe(inner)})"
        case Any_(items):
            return f"Any[{', '.join(_describe(i) for i in items)}]"
        case All(items):
            return f"All[{', '.join(_describe(i) for i in items)}]"
        case AlwaysAllow():
            return "AlwaysAllow"
        case AlwaysDeny():
            return "AlwaysDeny"
    raise TypeError(f"not a predicate: {p!r}")


# --- the in-worker check


def check_path(
    sandbox: FileSandbox | Mapping[str, Any] | PathPredicate,
    path: str,
    *,
    for_write: bool,
    size: int | None = None,
    base_dir: str | None = None,
    max_file_size: int | None = DEFAULT_MAX_FILE_SIZE,
) -> PathCheck:
    """The in-worker check: may a toolbox read (or write) ``path`` under ``sandbox``?

    Canonicalises ``path``, evaluates the predicate, then enforces ``fsbMaxFileSize`` on ``size`` (for a
    write, the size the file will have) or else on the current size. The refusal message shows ``path`` as
    given, names the sandbox and the rule, and never says whether the file exists.

    Args:
        sandbox: a :class:`FileSandbox`, the ``FileSandboxConfig`` JSON dict with paths already absolute (as
            the worker's config carries it), or a bare predicate (then ``max_file_size`` applies).
        path: the path the agent named; relative paths join ``base_dir`` (default: the current directory).
        for_write: the operation writes.
        size: for a write, the size the file will have after it.
        max_file_size: the limit for a bare predicate (ignored otherwise).

    Raises:
        PredicateError: ``sandbox`` is a malformed config dict (a caller's bug: configs are checked at load).
    """
    if isinstance(sandbox, Mapping):
        sandbox = parse_file_sandbox(dict(sandbox), "/")
    elif not isinstance(sandbox, FileSandbox):
        sandbox = FileSandbox(sandbox, max_file_size, None)
    label = f"the file sandbox {sandbox.name!r}" if sandbox.name else "the file sandbox"
    action = "writing" if for_write else "reading"
    verdict = evaluate(sandbox.predicate, path, for_write=for_write, size=size, base_dir=base_dir)
    if verdict.rule == "path syntax":
        return PathCheck(
            False, "", f"refused: {path!r} is not a valid path (a non-empty string without NUL bytes)", verdict.rule
        )
    if not verdict.allowed:
        return PathCheck(
            False,
            "",
            f"refused: {action} {path!r} is not allowed by {label} (rule {verdict.rule}). "
            "Use a path the sandbox allows.",
            verdict.rule,
        )
    limit = sandbox.max_file_size
    if limit is not None:
        actual = size if size is not None else _current_size(verdict.path)
        if actual is None:
            return PathCheck(
                False,
                "",
                f"refused: {action} {path!r}: its size cannot be checked against fsbMaxFileSize "
                "(permission denied on the way to it).",
                "fsbMaxFileSize",
            )
        if actual > limit:
            what = "the file would be" if for_write else "the file is"
            return PathCheck(
                False,
                "",
                f"refused: {action} {path!r}: {what} larger than {label} allows (fsbMaxFileSize {limit} bytes).",
                "fsbMaxFileSize",
            )
    return PathCheck(True, verdict.path)
