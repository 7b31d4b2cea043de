"""The seed's ``PathPredicate``: the data model and its JSON form.

JSON form (as in the seed): ``{"tag": NAME, "contents": ...}``. ``And``/``Or`` take an array of two or more predicates
(the seed's own example gives ``And`` three; more than two parse as ``All``/``Any``, which they then are in every
respect, the Landlock compiler and the in-worker check included), ``Not`` one predicate, ``Any``/``All`` an array,
``FileExtension`` an array of extensions without the dot, ``FileSizeLessThan`` an integer, ``FilePattern`` a glob on
the file name, ``AlwaysAllow``/``AlwaysDeny`` no contents (``contents`` may be absent or ``[]``); the others a path.

Paths are resolved once, when parsed: a relative path joins ``base_dir`` (the directory of the file that holds it)
and the result is canonicalised (symlinks resolved, ``..`` removed). Evaluation and compilation to Landlock live in
their own modules; this one only says what a predicate is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "PREDICATE_TAGS",
    "All",
    "AlwaysAllow",
    "AlwaysDeny",
    "And",
    "Any_",
    "ChildOf",
    "DirectoryExactly",
    "DirectoryRecursive",
    "DirectoryShallow",
    "FileExactly",
    "FileExtension",
    "FilePattern",
    "FileSizeLessThan",
    "Not",
    "Or",
    "PathPredicate",
    "PredicateError",
    "parse_predicate",
    "predicate_to_json",
]


class PredicateError(ValueError):
    """A predicate in a config file is malformed. ``path`` is the JSON path inside the predicate ("" = its root)."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.message = message
        self.path = path


@dataclass(frozen=True)
class FileExactly:
    path: str


@dataclass(frozen=True)
class DirectoryExactly:
    path: str


@dataclass(frozen=True)
class DirectoryRecursive:
    path: str


@dataclass(frozen=True)
class DirectoryShallow:
    path: str


@dataclass(frozen=True)
class ChildOf:
    path: str


@dataclass(frozen=True)
class FilePattern:
    pattern: str


@dataclass(frozen=True)
class FileExtension:
    extensions: tuple[str, ...]


@dataclass(frozen=True)
class FileSizeLessThan:
    size: int


@dataclass(frozen=True)
class And:
    left: PathPredicate
    right: PathPredicate


@dataclass(frozen=True)
class Or:
    left: PathPredicate
    right: PathPredicate


@dataclass(frozen=True)
class Not:
    inner: PathPredicate


@dataclass(frozen=True)
class Any_:
    items: tuple[PathPredicate, ...]


@dataclass(frozen=True)
class All:
    items: tuple[PathPredicate, ...]


@dataclass(frozen=True)
class AlwaysAllow:
    pass


@dataclass(frozen=True)
class AlwaysDeny:
    pass


PathPredicate = (
    FileExactly
    | DirectoryExactly
    | DirectoryRecursive
    | DirectoryShallow
    | ChildOf
    | FilePattern
    | FileExtension
    | FileSizeLessThan
    | And
    | Or
    | Not
    | Any_
    | All
    | AlwaysAllow
    | AlwaysDeny
)

_PATH_TAGS: dict[str, type[FileExactly | DirectoryExactly | DirectoryRecursive | DirectoryShallow | ChildOf]] = {
    "FileExactly": FileExactly,
    "DirectoryExactly": DirectoryExactly,
    "DirectoryRecursive": DirectoryRecursive,
    "DirectoryShallow": DirectoryShallow,
    "ChildOf": ChildOf,
}
PREDICATE_TAGS = (
    *_PATH_TAGS,
    "FilePattern",
    "FileExtension",
    "FileSizeLessThan",
    "And",
    "Or",
    "Not",
    "Any",
    "All",
    "AlwaysAllow",
    "AlwaysDeny",
)


def resolve_config_path(raw: Any, base_dir: str, where: str, resolve: Callable[[str], str] = os.path.realpath) -> str:
    """Resolve a path from a config file against ``base_dir`` and canonicalise it with ``resolve`` (the supervisor
    passes a walk that follows no link a worker could have planted; a worker's own copy is already canonical).

    Raises :class:`PredicateError` for a non-string, an empty string or one with a NUL byte.
    """
    if not isinstance(raw, str) or not raw:
        raise PredicateError("expected a non-empty path string", where)
    if "\x00" in raw:
        raise PredicateError("a path must not contain NUL bytes", where)
    joined = raw if os.path.isabs(raw) else os.path.join(base_dir, raw)
    return resolve(joined)


def parse_predicate(
    data: Any, base_dir: str, where: str = "", *, resolve: Callable[[str], str] = os.path.realpath
) -> PathPredicate:
    """Parse the seed's JSON form of a predicate, resolving its paths against ``base_dir`` and canonicalising them
    with ``resolve`` (:func:`resolve_config_path`)."""
    if not isinstance(data, dict) or not isinstance(data.get("tag"), str):
        raise PredicateError('expected a predicate object {"tag": ..., "contents": ...}', where)
    unknown = set(data) - {"tag", "contents"}
    if unknown:
        raise PredicateError(f"unknown keys {sorted(unknown)}; a predicate has only tag and contents", where)
    tag = data["tag"]
    contents = data.get("contents")
    here = f"{where}.contents" if where else "contents"
    if tag in _PATH_TAGS:
        return _PATH_TAGS[tag](resolve_config_path(contents, base_dir, here, resolve))
    if tag == "FilePattern":
        if not isinstance(contents, str) or not contents or "/" in contents or "\x00" in contents:
            raise PredicateError("FilePattern takes a glob on the file name (no '/'), such as \"*.md\"", here)
        return FilePattern(contents)
    if tag == "FileExtension":
        if not isinstance(contents, list) or not all(isinstance(e, str) and e for e in contents):
            raise PredicateError('FileExtension takes a list of extensions without the dot, such as ["md"]', here)
        bad = [e for e in contents if e.startswith(".") or "/" in e or "\x00" in e]
        if bad:
            raise PredicateError(f"extensions are written without a leading dot or '/': {bad}", here)
        return FileExtension(tuple(contents))
    if tag == "FileSizeLessThan":
        if not isinstance(contents, int) or isinstance(contents, bool) or contents < 0:
            raise PredicateError("FileSizeLessThan takes a non-negative integer number of bytes", here)
        return FileSizeLessThan(contents)
    if tag in ("And", "Or"):
        if not isinstance(contents, list) or len(contents) < 2:
            raise PredicateError(f"{tag} takes an array of two or more predicates", here)
        operands = tuple(parse_predicate(c, base_dir, f"{here}[{i}]", resolve=resolve) for i, c in enumerate(contents))
        if len(operands) > 2:
            return All(operands) if tag == "And" else Any_(operands)
        return And(*operands) if tag == "And" else Or(*operands)
    if tag == "Not":
        return Not(parse_predicate(contents, base_dir, here, resolve=resolve))
    if tag in ("Any", "All"):
        if not isinstance(contents, list):
            raise PredicateError(f"{tag} takes an array of predicates", here)
        items = tuple(parse_predicate(c, base_dir, f"{here}[{i}]", resolve=resolve) for i, c in enumerate(contents))
        return Any_(items) if tag == "Any" else All(items)
    if tag in ("AlwaysAllow", "AlwaysDeny"):
        if contents not in (None, []):
            raise PredicateError(f"{tag} takes no contents", here)
        return AlwaysAllow() if tag == "AlwaysAllow" else AlwaysDeny()
    raise PredicateError(f"unknown predicate tag {tag!r}; expected one of {', '.join(PREDICATE_TAGS)}", where)


def predicate_to_json(p: PathPredicate) -> dict[str, Any]:
    """The seed's JSON form of ``p`` (paths as resolved)."""
    for tag, cls in _PATH_TAGS.items():
        if type(p) is cls:
            return {"tag": tag, "contents": p.path}
    match p:
        case FilePattern(pattern):
            return {"tag": "FilePattern", "contents": pattern}
        case FileExtension(exts):
            return {"tag": "FileExtension", "contents": list(exts)}
        case FileSizeLessThan(size):
            return {"tag": "FileSizeLessThan", "contents": size}
        case And(a, b):
            return {"tag": "And", "contents": [predicate_to_json(a), predicate_to_json(b)]}
        case Or(a, b):
            return {"tag": "Or", "contents": [predicate_to_json(a), predicate_to_json(b)]}
        case Not(inner):
            return {"tag": "Not", "contents": predicate_to_json(inner)}
        case Any_(items):
            return {"tag": "Any", "contents": [predicate_to_json(i) for i in items]}
        case All(items):
            return {"tag": "All", "contents": [predicate_to_json(i) for i in items]}
        case AlwaysAllow():
            return {"tag": "AlwaysAllow"}
        case AlwaysDeny():
            return {"tag": "AlwaysDeny"}
    raise TypeError(f"not a predicate: {p!r}")
