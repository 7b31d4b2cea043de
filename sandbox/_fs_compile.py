"""Compile a ``PathPredicate`` and an access mode into Landlock path rules, and say how exact they are.

Landlock grants rights *beneath* an inode: a rule on a directory covers the directory and its whole tree, a
rule on a file covers that file. So the kernel can say exactly a union of trees and files, and nothing else.

How each part of a predicate compiles (``mode`` is ``read`` or ``write``; the table is in docs/FILES.md):

- ``DirectoryRecursive p`` -> rule ``(p, mode)``: exact.
- ``FileExactly p`` on an existing file -> a file rule ``(p, mode)``: exact.
- ``FileExactly p`` / ``DirectoryExactly p`` on an existing directory -> ``(p, read)`` whatever the mode (the
  predicate allows listing ``p``, never writing inside it): inexact, the kernel also lets the worker read
  beneath ``p``.
- ``FileExactly p`` that does not exist: a file rule needs an existing inode. In ``write`` mode the rule goes
  on its parent directory (so the worker can create it): inexact. In ``read`` mode there is nothing to read:
  no rule, and ``p`` is listed in ``missing``.
- ``ChildOf p`` -> ``(p, mode)``: inexact, the kernel also lets the worker list ``p`` itself.
  ``ChildOf p`` together with ``DirectoryExactly p`` is ``DirectoryRecursive p``: exact.
- ``DirectoryShallow p`` -> ``(p, mode)``: inexact, the kernel grants the whole tree.
- ``FilePattern``, ``FileExtension``, ``FileSizeLessThan``, ``Not``: nothing a path rule can say; they
  narrow the trees they are intersected with (inexact), and alone they are unbounded.
- ``And``/``All`` intersect (a tree and a sub-tree give the sub-tree, exact; a tree minus a disjoint tree is
  the tree, exact), ``Or``/``Any`` unite, ``AlwaysDeny`` gives no rule.
- ``AlwaysAllow``, and anything else that reaches ``/``, is *unbounded*: it compiles to ``("/", read)`` and
  never to ``/`` read-write; :attr:`FsCompilation.unbounded` says so and :meth:`FsCompilation.require_bounded`
  raises :class:`UnboundedPredicateError`, so the supervisor refuses it under a strict policy.

Internally a predicate is abstracted by two unions of regions (exact path, tree, strictly-beneath, direct
children, everything): a lower bound (paths it certainly allows) and an upper bound (paths it may allow). The
rules come from the upper bound; a rule is exact when what it grants lies inside the lower bound.

Paths that do not exist at compile time (or are now symlinks: predicate paths were canonical at load) get no
rule and are listed in ``missing``; the kernel denies them until the worker is started again. The launcher
also skips a rule whose path vanished between compilation and application. Exactness is judged on the tree
as it is when compiling: a rule on a file follows its inode, so a file replaced later is denied, never
widened. Pure: the only input from the filesystem is ``probe``, which the tests replace.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from sandbox._errors import SandboxError
from sandbox._fs_regions import Region, beneath, bounds, covered, describe_region
from sandbox._plan import FS_MODES, READ, WRITE, FsRule

if TYPE_CHECKING:
    from collections.abc import Callable

    from sandbox._predicates import PathPredicate

__all__ = [
    "FsCompilation",
    "PathKind",
    "RuleReport",
    "UnboundedPredicateError",
    "compile_predicate",
    "probe_path",
]

PathKind = Literal["dir", "file", "missing"]


class UnboundedPredicateError(SandboxError):
    """A predicate reaches the whole filesystem (``AlwaysAllow``, a bare ``FilePattern``, a ``Not`` ...).

    Raised by :meth:`FsCompilation.require_bounded` (a strict policy), never by the compiler itself: a permissive
    policy may accept the ``("/", read)`` rule it compiles to and rely on the in-worker check. The fix is to
    intersect the predicate with the trees the toolbox needs (``And [DirectoryRecursive ./src, ...]``).
    """


def probe_path(path: str) -> PathKind:
    """What ``path`` is now: ``dir``, ``file`` (anything else that exists) or ``missing``.

    A path that is a symlink, or is no longer canonical (a component became a symlink since load), counts as
    ``missing``: a rule on it would follow the link somewhere the predicate never named.
    """
    try:
        st = os.lstat(path)
    except OSError:
        return "missing"
    if stat.S_ISLNK(st.st_mode) or os.path.realpath(path) != path:
        return "missing"
    return "dir" if stat.S_ISDIR(st.st_mode) else "file"


# --- from regions to rules


@dataclass(frozen=True)
class RuleReport:
    """One rule as ``agents-supervise check`` shows it.

    Attributes:
        rule: the Landlock rule.
        exact: the rule grants nothing the predicate does not allow.
        sources: the parts of the predicate (as regions) the rule comes from.
        notes: when inexact, what the kernel grants beyond the predicate, which the in-worker check closes.
    """

    rule: FsRule
    exact: bool
    sources: tuple[str, ...]
    notes: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line: mode, path, and ``exact`` or ``inexact: <notes>``."""
        state = "exact" if self.exact else "inexact: " + "; ".join(self.notes)
        return f"{self.rule.mode:<5} {self.rule.path}  ({state})"


@dataclass(frozen=True)
class FsCompilation:
    """The Landlock side of a predicate in one access mode.

    Attributes:
        mode: ``read`` or ``write``.
        rules: the rules for ``ConfinementPlan.fs_rules`` (sorted, merged, none beneath another that grants
            at least as much).
        exact: the kernel grants nothing the predicate does not allow (on the tree as it is now); when false
            the in-worker check (:func:`sandbox._predicate_eval.check_path`) is what gives the predicate.
        residual: "" when exact; otherwise what is left to the in-worker check, in words.
        unbounded: the predicate reaches ``/`` (``AlwaysAllow``, a bare pattern, a ``Not`` alone ...); the rules
            then hold ``("/", read)``, never ``/`` read-write.
        missing: predicate paths that do not exist (or are now symlinks) and got no rule: the kernel denies
            them until the worker is started again.
        reports: per rule, its exactness and sources, for ``agents-supervise check``.
    """

    mode: str
    rules: tuple[FsRule, ...]
    exact: bool
    residual: str
    unbounded: bool
    missing: tuple[str, ...]
    reports: tuple[RuleReport, ...]

    def require_bounded(self) -> None:
        """Raise :class:`UnboundedPredicateError` if the predicate reaches the whole filesystem (strict policy)."""
        if self.unbounded:
            raise UnboundedPredicateError(
                "the file sandbox reaches the whole filesystem (AlwaysAllow, or a pattern, extension, size or "
                "Not without a directory around it); a strict policy needs it inside named directories: "
                "intersect it with DirectoryRecursive of the trees the toolbox needs"
            )

    def describe(self) -> list[str]:
        """Lines for ``agents-supervise check``: one per rule, then missing paths."""
        lines = [r.describe() for r in self.reports] or ["(no rules: nothing is granted)"]
        lines += [f"missing {p}  (does not exist: no rule, denied until restart)" for p in self.missing]
        return lines


@dataclass(frozen=True)
class _Piece:
    rule: FsRule | None
    exact: bool
    source: str
    note: str = ""


def _translate(region: Region, mode: str, lower: frozenset[Region], kind: Callable[[str], PathKind]) -> _Piece:
    """The rule for one region of the upper bound, and whether it stays inside the lower bound."""
    source = describe_region(region)
    if covered(region, lower):
        exact, note = True, ""
    else:
        exact, note = False, f"{source} is wider than the predicate"
    if region.kind == "top":
        return _Piece(FsRule("/", mode), exact, source, note)  # "/" read-write is downgraded by the caller
    x = region.path
    what = kind(x)
    if what == "missing":
        return _Piece(None, True, source)
    extra: Region | None = None
    extra_note = ""
    rule = FsRule(x, mode)
    if region.kind in ("beneath", "shallow") and what == "file":
        return _Piece(None, True, source)  # nothing can be beneath a file
    if region.kind == "beneath":
        extra, extra_note = Region("exact", x), f"the kernel also lets the worker list {x} itself"
    elif region.kind == "shallow":
        extra, extra_note = Region("tree", x), f"the kernel grants all of {x}, not only its direct entries"
    elif region.kind == "exact" and what == "dir":
        rule = FsRule(x, READ)
        extra, extra_note = Region("beneath", x), f"the kernel also lets the worker read beneath {x}"
    if extra is not None and not covered(extra, lower):
        exact, note = False, "; ".join(n for n in (note, extra_note) if n)
    return _Piece(rule, exact, source, note)


def _translate_missing_file(
    region: Region, mode: str, lower: frozenset[Region], kind: Callable[[str], PathKind]
) -> _Piece | None:
    """A file the predicate names that does not exist yet: in write mode, its parent lets the worker create it."""
    if mode != WRITE or region.kind != "exact" or kind(region.path) != "missing":
        return None
    parent = os.path.dirname(region.path)
    if parent == region.path or kind(parent) != "dir":
        return None
    note = f"{region.path} does not exist yet: the kernel lets the worker create and write anything in {parent}"
    exact = covered(Region("tree", parent), lower)
    return _Piece(FsRule(parent, WRITE), exact, describe_region(region), "" if exact else note)


def compile_predicate(
    predicate: PathPredicate, mode: str, *, probe: Callable[[str], PathKind] = probe_path
) -> FsCompilation:
    """Compile ``predicate`` in access ``mode`` into Landlock rules (the module docstring has the table).

    Args:
        predicate: a parsed predicate (canonical paths).
        mode: ``"read"`` or ``"write"``.
        probe: what a path is now (``dir``/``file``/``missing``); the default looks at the filesystem.

    Returns:
        The rules, their exactness, the residual left to the in-worker check, ``unbounded`` and ``missing``.

    Raises:
        ValueError: an unknown mode, or a predicate too large to compile.
    """
    if mode not in FS_MODES:
        raise ValueError(f"unknown access mode {mode!r}; expected one of {FS_MODES}")
    approx = bounds(predicate)
    pieces: list[_Piece] = []
    missing: list[str] = []
    for region in sorted(approx.upper):
        piece = _translate_missing_file(region, mode, approx.lower, probe) or _translate(
            region, mode, approx.lower, probe
        )
        if piece.rule is None:
            if region.kind != "top" and probe(region.path) == "missing":
                missing.append(region.path)
            continue
        if not piece.exact and approx.upper[region]:
            narrowing = ", ".join(sorted(approx.upper[region]))
            piece = _Piece(piece.rule, False, piece.source, f"{piece.note} (narrowed by {narrowing})")
        if piece.rule is not None and piece.rule.path == "/" and piece.rule.mode == WRITE:
            downgrade = (
                "an unbounded predicate never gets / read-write: the kernel refuses writes outside the other rules"
            )
            piece = _Piece(FsRule("/", READ), False, piece.source, "; ".join(filter(None, (downgrade, piece.note))))
        pieces.append(piece)
    return _assemble(mode, pieces, tuple(missing))


_MODE_RANK = {READ: 0, WRITE: 1}


def _assemble(mode: str, pieces: list[_Piece], missing: tuple[str, ...]) -> FsCompilation:
    """Merge pieces into rules: one per path at the highest mode, none beneath a rule granting as much."""
    by_path: dict[str, list[_Piece]] = {}
    for piece in pieces:
        assert piece.rule is not None
        by_path.setdefault(piece.rule.path, []).append(piece)
    modes = {
        path: max((pc.rule.mode for pc in group if pc.rule is not None), key=_MODE_RANK.__getitem__)
        for path, group in by_path.items()
    }
    keep: dict[str, list[_Piece]] = {}
    for path in sorted(by_path):
        owner = next((a for a in keep if beneath(path, a) and _MODE_RANK[modes[a]] >= _MODE_RANK[modes[path]]), path)
        keep.setdefault(owner, []).extend(by_path[path])
    reports = tuple(
        RuleReport(
            FsRule(path, modes[path]),
            all(pc.exact for pc in group),
            tuple(dict.fromkeys(pc.source for pc in group)),
            tuple(dict.fromkeys(pc.note for pc in group if not pc.exact and pc.note)),
        )
        for path, group in keep.items()
    )
    exact = all(r.exact for r in reports)
    residual = "" if exact else "; ".join(n for r in reports for n in r.notes)
    return FsCompilation(
        mode=mode,
        rules=tuple(r.rule for r in reports),
        exact=exact,
        residual=residual,
        unbounded=any(r.rule.path == "/" for r in reports),
        missing=missing,
        reports=reports,
    )
