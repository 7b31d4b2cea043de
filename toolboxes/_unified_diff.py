"""Unified diffs, the one applier: parse, locate every hunk, then apply all at once. Pure.

Two readings, chosen by ``fuzzy``. Strict (the default; the Developer toolbox's ``patch-file``) is described
below. Fuzzy (Lua's ``fs.patch``, for diffs an agent wrote by hand) trusts no counts: a hunk's body runs to the next
``@@`` header, a blank body line is an empty context line, ``\\ No newline at end of file`` is ignored, text
before the first hunk may only be ``---``/``+++``/``diff``/``index`` lines; each hunk's old lines are searched for
after the end of the previous hunk, nearest to the stated line (moved by what earlier hunks added or removed)
first, and a hunk with no old lines inserts before the stated line. The file keeps whether it ended with a newline.
:func:`apply_patch` does the whole job in either reading.

Strict:

Accepted: the output of ``diff -u`` and ``git diff`` for one file (``diff --git``/``index``/mode lines are
skipped), hunks ``@@ -a,b +c,d @@``, body lines `` ``/``-``/``+`` and ``\\ No newline at end of file``.
A patch whose text does not end in a newline is read as if it did (the counts in the hunk headers decide).
Refused with a message that says what to fix: CRLF line endings, a patch for several files, a patch that
deletes
the file, headers that do not parse, bodies whose line counts differ from the header.

Locating follows ``patch(1)`` without fuzz: a hunk's old lines must match exactly, at the line its header
names
or, failing that, at the nearest offset (searched outward). Every hunk is located before any is applied; hunks
that overlap once located are refused, and a hunk that matches nowhere is reported with the line, the expected
lines and the actual lines at that place.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field

__all__ = ["Hunk", "PatchError", "PatchOutcome", "apply_hunks", "apply_patch", "locate_hunks", "parse_patch"]

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_SKIP_PREFIXES = (
    "diff ",
    "index ",
    "old mode",
    "new mode",
    "similarity",
    "rename ",
    "new file mode",
    "deleted file mode",
    "Binary files",
    "GIT binary patch",
)


@dataclass
class PatchError(Exception):
    """A patch that cannot be applied. ``kind`` is ``parse``, ``mismatch``, ``overlap`` or ``bounds``;
    mismatches carry ``line`` (1-based, in the file), ``expected`` and ``actual``."""

    kind: str
    message: str
    line: int | None = None
    expected: list[str] = field(default_factory=list)
    actual: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return self.message

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"error": self.message}
        if self.kind == "mismatch":
            out.update({"expected": self.expected, "actual": self.actual, "message": "Context doesn't match"})
        return out


@dataclass
class Hunk:
    """One hunk: ``old_start`` (1-based; 0 for an empty old side), the old and new lines (with newlines as
    they
    will be in the file), and the header as written."""

    old_start: int
    old: list[str]
    new: list[str]
    header: str
    number: int
    changed: int = 0


def _strip_nl(lines: list[str]) -> list[str]:
    return [ln[:-1] if ln.endswith("\n") else ln for ln in lines]


@dataclass(frozen=True)
class PatchOutcome:
    """What :func:`apply_patch` made: the new text, and how many hunks and changed lines it applied."""

    text: str
    hunks_applied: int
    lines_changed: int


def parse_patch(text: str, *, fuzzy: bool = False) -> tuple[list[Hunk], bool]:
    """Parse a one-file unified diff. Returns ``(hunks, creates)``; ``creates`` when the old side is
    /dev/null (strict only; fuzzy: always ``False``).

    Raises:
        PatchError: kind ``parse``.
    """
    if fuzzy:
        return _parse_fuzzy(text), False
    if "\r" in text:
        raise PatchError("parse", "the patch has CRLF (\\r\\n) line endings; send it with LF (\\n) line endings")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    hunks: list[Hunk] = []
    creates = False
    files = 0
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- "):
            files += 1
            if files > 1:
                raise PatchError("parse", "the patch touches more than one file; send one patch per file")
            creates = line[4:].split("\t")[0].strip() == "/dev/null"
            if i + 1 >= len(lines) or not lines[i + 1].startswith("+++ "):
                raise PatchError("parse", f"line {i + 1}: a '--- old' header must be followed by '+++ new'")
            if lines[i + 1][4:].split("\t")[0].strip() == "/dev/null":
                raise PatchError("parse", "the patch deletes the file; patch-file only changes or creates files")
            i += 2
            continue
        if line.startswith("@@"):
            m = _HUNK.match(line)
            if not m:
                raise PatchError("parse", f"line {i + 1}: bad hunk header {line!r}; expected '@@ -a,b +c,d @@'")
            old_start = int(m.group(1))
            old_count = int(m.group(2)) if m.group(2) is not None else 1
            new_count = int(m.group(4)) if m.group(4) is not None else 1
            i += 1
            old: list[str] = []
            new: list[str] = []
            changed = 0
            last: list[list[str]] = []
            while i < len(lines) and (len(old) < old_count or len(new) < new_count or lines[i].startswith("\\")):
                body = lines[i]
                if body.startswith("\\"):
                    for side in last:  # "\ No newline at end of file" applies to the line just before
                        side[-1] = side[-1][:-1]
                    i += 1
                    continue
                tag, content = (body[:1], body[1:]) if body else (" ", "")
                if tag == " ":
                    old.append(content + "\n")
                    new.append(content + "\n")
                    last = [old, new]
                elif tag == "-":
                    old.append(content + "\n")
                    last = [old]
                    changed += 1
                elif tag == "+":
                    new.append(content + "\n")
                    last = [new]
                    changed += 1
                else:
                    break
                i += 1
            if len(old) != old_count or len(new) != new_count:
                raise PatchError(
                    "parse",
                    (
                        f"hunk {len(hunks) + 1} ({line.split(' @@')[0]} @@): the header counts {old_count} old and "
                        f"{new_count} new lines but the body has {len(old)} old and {len(new)} new; fix the counts"
                    ),
                )
            hunks.append(Hunk(old_start, old, new, line, len(hunks) + 1, changed))
            continue
        if line.startswith(_SKIP_PREFIXES) or (not hunks and (not files or not line.strip())):
            i += 1
            continue
        raise PatchError("parse", f"line {i + 1}: unexpected text {line[:60]!r} outside a hunk")
    if not hunks:
        raise PatchError("parse", "the patch has no hunks ('@@ -a,b +c,d @@' sections)")
    return hunks, creates


_FUZZY_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@")


def _parse_fuzzy(diff: str) -> list[Hunk]:
    hunks: list[Hunk] = []
    for raw in diff.splitlines():
        if raw.startswith("@@"):
            m = _FUZZY_HUNK.match(raw)
            if not m:
                raise PatchError("parse", f"bad hunk header {raw!r}; expected '@@ -LINE,COUNT +LINE,COUNT @@'")
            hunks.append(Hunk(int(m.group(1)), [], [], raw, len(hunks) + 1))
        elif not hunks:
            if raw.startswith(("---", "+++", "diff ", "index ")) or not raw.strip():
                continue
            raise PatchError("parse", f"unexpected line before the first hunk: {raw!r}")
        elif raw.startswith("\\"):
            continue
        elif raw == "" or raw[0] == " ":
            hunks[-1].old.append(raw[1:] + "\n")
            hunks[-1].new.append(raw[1:] + "\n")
        elif raw[0] == "-":
            hunks[-1].old.append(raw[1:] + "\n")
            hunks[-1].changed += 1
        elif raw[0] == "+":
            hunks[-1].new.append(raw[1:] + "\n")
            hunks[-1].changed += 1
        else:
            raise PatchError("parse", f"hunk {len(hunks)}: a line must start with ' ', '-' or '+': {raw!r}")
    if not hunks:
        raise PatchError(
            "parse", "no hunks found; expected a unified diff with '@@ -LINE,COUNT +LINE,COUNT @@' headers"
        )
    return hunks


def _locate_fuzzy(lines: list[str], hunks: list[Hunk]) -> list[int]:
    """Each hunk after the previous one, nearest to its stated line; positions in ``lines`` (the original)."""
    positions: list[int] = []
    offset = 0  # what the hunks before added minus what they removed
    lowest = 0  # in the text as the hunks before left it
    size = len(lines)
    for h in hunks:
        want = max(h.old_start - 1, 0) + offset
        n = len(h.old)
        if not h.old:
            at = min(max(want, lowest), size)
        else:
            # For i >= lowest, line i of the text as the hunks before left it is line i - offset of the original.
            found = next(
                (
                    i
                    for i in sorted(range(lowest, size - n + 1), key=lambda i: abs(i - want))
                    if lines[i - offset : i - offset + n] == h.old
                ),
                None,
            )
            if found is None:
                start = max(want, lowest) - offset
                actual = lines[start : start + n]
                raise PatchError(
                    "mismatch",
                    f"hunk {h.number} does not apply: its lines were not found at or after line {lowest + 1}. "
                    f"Expected {_strip_nl(h.old)[:5]!r}, found at line {want + 1}: {_strip_nl(actual)[:5]!r}",
                    line=want + 1,
                    expected=_strip_nl(h.old),
                    actual=_strip_nl(actual),
                )
            at = found
        positions.append(at - offset)
        offset += len(h.new) - n
        lowest = at + len(h.new)
        size += len(h.new) - n
    return positions


def _matches(lines: list[str], at: int, old: list[str]) -> bool:
    return at >= 0 and at + len(old) <= len(lines) and lines[at : at + len(old)] == old


def locate_hunks(lines: list[str], hunks: list[Hunk], *, fuzzy: bool = False) -> list[int]:
    """Where each hunk's old lines start (0-based), checked for overlap. Raises :class:`PatchError`."""
    if fuzzy:
        return _locate_fuzzy(lines, hunks)
    positions: list[int] = []
    for h in hunks:
        want = h.old_start - 1 if h.old else h.old_start  # an empty old side inserts after line old_start
        if not h.old:
            if not 0 <= want <= len(lines):
                raise PatchError("bounds", f"hunk {h.number}: line {h.old_start} is past the end ({len(lines)} lines)")
            positions.append(want)
            continue
        found = None
        for delta in range(0, len(lines) + 1):
            for at in (want - delta, want + delta) if delta else (want,):
                if _matches(lines, at, h.old):
                    found = at
                    break
            if found is not None:
                break
        if found is None:
            start = min(max(want, 0), len(lines))
            raise PatchError(
                "mismatch",
                f"Context mismatch at line {h.old_start}: hunk {h.number} ({h.header}) does not match "
                "the file anywhere; read the file again and rebuild the patch",
                line=h.old_start,
                expected=_strip_nl(h.old),
                actual=_strip_nl(lines[start : start + len(h.old)]),
            )
        positions.append(found)
    spans = sorted(zip(positions, hunks, strict=True), key=lambda p: p[0])
    for (pa, ha), (pb, hb) in itertools.pairwise(spans):
        if pb < pa + len(ha.old) or (pa == pb and not ha.old and not hb.old):
            raise PatchError(
                "overlap",
                f"hunks {ha.number} and {hb.number} overlap (lines {pa + 1}-"
                f"{pa + len(ha.old)} and {pb + 1}-{pb + len(hb.old)}); merge them",
            )
    return positions


def apply_hunks(lines: list[str], hunks: list[Hunk], positions: list[int]) -> list[str]:
    """Apply located hunks (from :func:`locate_hunks`) in one pass."""
    out: list[str] = []
    pos = 0
    for at, h in sorted(zip(positions, hunks, strict=True), key=lambda p: p[0]):
        out.extend(lines[pos:at])
        out.extend(h.new)
        pos = at + len(h.old)
    out.extend(lines[pos:])
    return out


def apply_patch(text: str, diff: str, *, fuzzy: bool = False) -> PatchOutcome:
    """Apply ``diff`` to ``text``. Raises :class:`PatchError` when it does not parse or a hunk does not match.

    The text keeps whether it ended with a newline (a last line without one is matched as if it had one).
    """
    hunks, _ = parse_patch(diff, fuzzy=fuzzy)
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]] + ([parts[-1] + "\n"] if parts[-1] else [])
    out = "".join(apply_hunks(lines, hunks, locate_hunks(lines, hunks, fuzzy=fuzzy)))
    if parts[-1] and out.endswith("\n"):
        out = out[:-1]
    return PatchOutcome(out, len(hunks), sum(h.changed for h in hunks))
