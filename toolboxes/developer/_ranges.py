"""Line ranges for read-file-range and write-file-range, and applying range edits to lines. Pure.

Read ranges: ``N``, ``N-M``, comma lists, ``whole`` or empty (the whole file); 1-based, inclusive.
Write ranges: ``N`` / ``N-M`` (replace those lines), ``head`` (insert before line 1), ``tail`` (append
after the
last line), ``N+`` (insert after line N; ``0+`` is ``head``). Every range is judged against the file's
*original*
numbering; an empty content block deletes its lines.

An edit is kept as a half-open interval ``[start, end)`` of original line indexes plus its new lines: a
replacement of lines N..M is ``[N-1, M)``, an insertion after line N is the point ``[N, N)``. Two edits
overlap
when their intervals intersect, when a point lies strictly inside a replaced range, or when two insertions
share
one point (their order would be a guess).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

__all__ = [
    "Edit",
    "RangeError",
    "apply_edits",
    "check_overlaps",
    "parse_read_ranges",
    "parse_write_ranges",
    "split_block",
]

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
_INSERT = re.compile(r"^(\d+)\+$")


class RangeError(ValueError):
    """A range the agent sent is malformed, out of bounds or overlaps another; the message says what to
    fix."""


@dataclass(frozen=True)
class Edit:
    """Replace original lines ``[start, end)`` by ``lines``; ``label`` is the range as the agent wrote it."""

    start: int
    end: int
    lines: tuple[str, ...]
    label: str


def _items(spec: str) -> list[str]:
    items = [p.strip() for p in spec.split(",")]
    if any(not p for p in items):
        raise RangeError(f"empty item in ranges {spec!r}: write ranges like '3', '5-9', '1-2,7'")
    return items


def parse_read_ranges(spec: str | None, total: int) -> list[tuple[int, int]]:
    """Parse read ranges against a file of ``total`` lines; returns inclusive ``(first, last)`` pairs.

    Raises:
        RangeError: ``0``, ``5-2``, ``a-b``, or a range past the last line.
    """
    if spec is None or spec.strip() in ("", "whole"):
        return [(1, total)] if total else []
    out = []
    for item in _items(spec):
        m = _RANGE.match(item)
        if not m:
            raise RangeError(f"range {item!r} is not N or N-M (1-based line numbers, such as '3' or '10-20')")
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) else first
        if first < 1:
            raise RangeError(f"range {item!r}: lines are numbered from 1")
        if last < first:
            raise RangeError(f"range {item!r}: the end is before the start; write {last}-{first}")
        if last > total:
            raise RangeError(f"range {item!r} is past the end of the file, which has {total} lines")
        out.append((first, last))
    return out


def split_block(block: str, newline: str = "\n") -> tuple[str, ...]:
    """The lines of a content block, each ending in ``newline``; the empty block has none (it deletes)."""
    if block == "":
        return ()
    body = block[:-1] if block.endswith("\n") else block
    return tuple(line.rstrip("\r") + newline for line in body.split("\n"))


def parse_write_ranges(spec: str, blocks: list[str], total: int, newline: str = "\n") -> list[Edit]:
    """Pair write ranges with content blocks, judged against ``total`` original lines.

    Raises:
        RangeError: malformed or out-of-bounds ranges, or a block count that differs from the range count.
    """
    items = _items(spec) if spec.strip() else []
    if len(items) != len(blocks):
        raise RangeError(
            f"{len(items)} range(s) but {len(blocks)} content block(s): send one block per range "
            "(an empty block deletes its lines)"
        )
    edits = []
    for item, block in zip(items, blocks, strict=True):
        lines = split_block(block, newline)
        word = item.lower()
        if word == "head":
            edits.append(Edit(0, 0, lines, item))
            continue
        if word == "tail":
            edits.append(Edit(total, total, lines, item))
            continue
        m = _INSERT.match(item)
        if m:
            after = int(m.group(1))
            if after > total:
                raise RangeError(f"range {item!r}: cannot insert after line {after}, the file has {total} lines")
            edits.append(Edit(after, after, lines, item))
            continue
        if not _RANGE.match(item):
            raise RangeError(f"range {item!r} is not N, N-M, N+ (insert after N), head or tail")
        ((first, last),) = parse_read_ranges(item, total)
        edits.append(Edit(first - 1, last, lines, item))
    return edits


def check_overlaps(edits: list[Edit]) -> None:
    """Refuse edits that overlap (see the module docstring). Raises :class:`RangeError` naming both."""
    ordered = sorted(edits, key=lambda e: (e.start, e.end))
    for a, b in itertools.pairwise(ordered):
        point_clash = a.start == a.end == b.start == b.end
        inside = b.start < a.end or (b.start == b.end and a.start < b.start < a.end)
        if point_clash or inside:
            raise RangeError(
                f"ranges {a.label!r} and {b.label!r} overlap: each line may be changed by one "
                "range only (merge them into one)"
            )


def apply_edits(lines: list[str], edits: list[Edit]) -> list[str]:
    """Apply non-overlapping ``edits`` (original numbering) to ``lines``; call :func:`check_overlaps`
    first."""
    out: list[str] = []
    pos = 0
    if lines and not lines[-1].endswith("\n") and any(e.start == len(lines) and e.lines for e in edits):
        lines = [*lines[:-1], lines[-1] + "\n"]  # something is appended after a last line without newline
    for e in sorted(edits, key=lambda e: (e.start, e.end)):
        out.extend(lines[pos : e.start])
        out.extend(e.lines)
        pos = max(pos, e.end)
    out.extend(lines[pos:])
    return out
