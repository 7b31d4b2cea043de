"""Regions of paths and the lower/upper-bound abstraction of a ``PathPredicate``, for the Landlock compiler.

A region is a set of paths Landlock can talk about: one exact path, a tree (a path and everything beneath),
everything strictly beneath a path, the direct entries of a directory, or everything. Regions are sets of path
*strings*: whether the paths exist does not matter here. :func:`bounds` abstracts a predicate by two unions of
regions: ``lower`` (paths it certainly allows) and ``upper`` (paths it may allow), each upper region carrying the
predicate parts (patterns, sizes, ``Not`` ...) that narrow it. Intersections of these regions are regions again,
so ``And`` of trees stays exact; complements are not, so ``Not`` only subtracts what it provably does or does not
touch. Pure; ``sandbox._fs_compile`` turns the upper bound into rules.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandbox._predicate_eval import describe_predicate
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
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = ["TOP", "Bounds", "Region", "beneath", "bounds", "contains", "covered", "describe_region", "intersect"]

#: Beyond this many regions the predicate is refused as too complex (a person writes a few dozen at most).
_MAX_REGIONS = 4096


@dataclass(frozen=True, order=True)
class Region:
    """A set of paths: ``kind`` is ``exact``, ``tree``, ``beneath`` (strictly), ``shallow`` or ``top``."""

    kind: str  # "exact" | "tree" | "beneath" | "shallow" | "top"
    path: str


TOP = Region("top", "/")


def beneath(path: str, top: str) -> bool:
    """``path`` is strictly beneath ``top`` (both canonical)."""
    return path != "/" if top == "/" else path.startswith(top + "/")


def _at_or_beneath(path: str, top: str) -> bool:
    return path == top or beneath(path, top)


def _is_child(path: str, parent: str) -> bool:
    return path != parent and os.path.dirname(path) == parent


def contains(a: Region, b: Region) -> bool:
    """``b`` is a subset of ``a``."""
    if a.kind == "top":
        return True
    if b.kind == "top":
        return False
    x, y = a.path, b.path
    if a.kind == "exact":
        return b.kind == "exact" and y == x
    if a.kind == "tree":
        return _at_or_beneath(y, x)
    if a.kind == "beneath":
        return beneath(y, x) if b.kind in ("exact", "tree") else _at_or_beneath(y, x)
    # a is shallow: its members are the direct children of x
    return _is_child(y, x) if b.kind == "exact" else b.kind == "shallow" and y == x


def intersect(a: Region, b: Region) -> Region | None:
    """The intersection of two regions (always a region or empty, for these kinds)."""
    if contains(a, b):
        return b
    if contains(b, a):
        return a
    for tree, shallow in ((a, b), (b, a)):
        if tree.kind == "tree" and shallow.kind == "shallow" and _is_child(tree.path, shallow.path):
            return Region("exact", tree.path)
    return None


def covered(r: Region, regions: Iterable[Region]) -> bool:
    """``r`` lies inside the union of ``regions`` (sound; complete for the cases the compiler produces)."""
    regions = tuple(regions)
    if any(contains(s, r) for s in regions):
        return True
    if r.kind == "tree":
        return covered(Region("exact", r.path), regions) and covered(Region("beneath", r.path), regions)
    return False


def describe_region(r: Region) -> str:
    return {
        "top": "the whole filesystem",
        "exact": f"{r.path}",
        "tree": f"{r.path} and everything beneath",
        "beneath": f"everything beneath {r.path}",
        "shallow": f"the direct entries of {r.path}",
    }[r.kind]


# --- the abstraction: lower and upper bounds of a predicate


@dataclass(frozen=True)
class Bounds:
    """``lower``: regions the predicate surely allows; ``upper``: regions covering all it may allow, each with
    the predicate parts that narrow it (empty when the region is allowed whole)."""

    lower: frozenset[Region]
    upper: Mapping[Region, frozenset[str]]  # region -> the predicate parts that narrow it


_NOTHING = Bounds(frozenset(), {})
_EVERYTHING = Bounds(frozenset({TOP}), {TOP: frozenset()})


def _prune(upper: dict[Region, frozenset[str]]) -> dict[Region, frozenset[str]]:
    """Drop regions inside another one, except inside regions rooted at ``/``: those compile to ``/`` read-only
    in write mode, so what lies inside them keeps its own (write) rule."""
    if len(upper) > _MAX_REGIONS:
        raise ValueError(f"predicate too complex to compile (more than {_MAX_REGIONS} regions)")
    keys = sorted(upper)
    return {r: upper[r] for r in keys if not any(s != r and s.path != "/" and contains(s, r) for s in keys)}


def bounds(p: PathPredicate) -> Bounds:
    """Abstract ``p`` by lower and upper unions of regions (see the module docstring).

    Raises:
        ValueError: the predicate expands to more than a few thousand regions.
    """
    match p:
        case FileExactly(x) | DirectoryExactly(x):
            region = Region("exact", x)
        case DirectoryRecursive(x):
            region = TOP if x == "/" else Region("tree", x)
        case ChildOf(x):
            region = Region("beneath", x)
        case DirectoryShallow(x):  # the directory itself (listing it) and its direct entries
            both = frozenset({Region("exact", x), Region("shallow", x)})
            return Bounds(both, dict.fromkeys(both, frozenset()))
        case FilePattern() | FileExtension() | FileSizeLessThan():
            return Bounds(frozenset(), {TOP: frozenset({describe_predicate(p)})})
        case AlwaysAllow():
            return _EVERYTHING
        case AlwaysDeny():
            return _NOTHING
        case Or(a, b):
            return _union((a, b))
        case Any_(items):
            return _union(items)
        case And(a, b):
            return _meet((a, b))
        case All(items):
            return _meet(items)
        case Not():
            return _meet((p,))
        case _:
            raise TypeError(f"not a predicate: {p!r}")
    return Bounds(frozenset({region}), {region: frozenset()})


def _union(items: Iterable[PathPredicate]) -> Bounds:
    lower: set[Region] = set()
    upper: dict[Region, frozenset[str]] = {}
    for item in items:
        b = bounds(item)
        lower |= b.lower
        for r, notes in b.upper.items():
            upper[r] = upper.get(r, frozenset()) | notes
    return Bounds(frozenset(lower), _prune(upper))


def _meet(items: Iterable[PathPredicate]) -> Bounds:
    """Intersect ``items``; each ``Not`` operand subtracts from the intersection of the others."""
    items = tuple(items)
    acc = _EVERYTHING
    for item in items:
        if not isinstance(item, Not):
            acc = _intersect_bounds(acc, bounds(item))
    for item in items:
        if isinstance(item, Not):
            acc = _subtract(acc, bounds(item.inner), describe_predicate(item))
    return acc


def _intersect_bounds(a: Bounds, b: Bounds) -> Bounds:
    lower = {r for x in a.lower for y in b.lower if (r := intersect(x, y)) is not None}
    upper: dict[Region, frozenset[str]] = {}
    for x, nx in a.upper.items():
        for y, ny in b.upper.items():
            r = intersect(x, y)
            if r is not None:
                upper[r] = upper.get(r, frozenset()) | nx | ny
    return Bounds(frozenset(lower), _prune(upper))


def _subtract(a: Bounds, b: Bounds, note: str) -> Bounds:
    """``a`` minus ``b``: regions that ``b`` may touch leave the lower bound; regions ``b`` surely covers leave
    the upper bound; the others keep ``note`` (the in-worker check applies it)."""
    lower = {r for r in a.lower if all(intersect(r, u) is None for u in b.upper)}
    upper: dict[Region, frozenset[str]] = {}
    for r, notes in a.upper.items():
        if covered(r, b.lower):
            continue
        touched = any(intersect(r, u) is not None for u in b.upper)
        upper[r] = notes | {note} if touched else notes
    return Bounds(frozenset(lower), _prune(upper))
