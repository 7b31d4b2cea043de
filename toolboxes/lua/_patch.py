"""Apply a unified diff to one file's text (``fs.patch``). Pure: text in, text out.

Accepted form: optional ``---``/``+++`` header lines, then hunks that start with ``@@ -OLD[,N] +NEW[,M] @@`` and
hold lines starting with `` `` (context), ``-`` (removed) or ``+`` (added); ``\\ No newline at end of file`` is
ignored. Counts in the hunk header are not trusted (agents get them wrong, as in the seed's own example): a hunk's
old lines (context and removed) are searched for in the file, nearest to the stated line first, after the end of
the previous hunk. A hunk with no old lines inserts before the stated line. Any hunk that does not apply rejects
the whole patch, which names the hunk and shows the expected and actual lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["PatchError", "PatchOutcome", "apply_patch"]

_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@")


class PatchError(ValueError):
    """The patch does not parse or does not apply; the message says which hunk and why."""


@dataclass(frozen=True)
class PatchOutcome:
    text: str
    hunks_applied: int
    lines_changed: int


@dataclass
class _Hunk:
    start: int
    lines: list[tuple[str, str]]


def _parse(diff: str) -> list[_Hunk]:
    hunks: list[_Hunk] = []
    for raw in diff.splitlines():
        if raw.startswith("@@"):
            m = _HUNK.match(raw)
            if not m:
                raise PatchError(f"bad hunk header {raw!r}; expected '@@ -LINE,COUNT +LINE,COUNT @@'")
            hunks.append(_Hunk(int(m.group(1)), []))
        elif not hunks:
            if raw.startswith(("---", "+++", "diff ", "index ")) or not raw.strip():
                continue
            raise PatchError(f"unexpected line before the first hunk: {raw!r}")
        elif raw.startswith("\\"):
            continue
        elif raw[:1] in (" ", "-", "+"):
            hunks[-1].lines.append((raw[0], raw[1:]))
        elif raw == "":
            hunks[-1].lines.append((" ", ""))
        else:
            raise PatchError(f"hunk {len(hunks)}: a line must start with ' ', '-' or '+': {raw!r}")
    if not hunks:
        raise PatchError("no hunks found; expected a unified diff with '@@ -LINE,COUNT +LINE,COUNT @@' headers")
    return hunks


def _find(lines: list[str], old: list[str], want: int, lowest: int) -> int | None:
    n = len(old)
    candidates = range(lowest, len(lines) - n + 1)
    for at in sorted(candidates, key=lambda i: abs(i - want)):
        if lines[at:at + n] == old:
            return at
    return None


def apply_patch(text: str, diff: str) -> PatchOutcome:
    """Apply ``diff`` to ``text``; raises :class:`PatchError` when it does not parse or a hunk does not match."""
    hunks = _parse(diff)
    ends_with_newline = text.endswith("\n") or text == ""
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()
    out = list(lines)
    offset = 0
    lowest = 0
    changed = 0
    for number, hunk in enumerate(hunks, 1):
        old = [t for k, t in hunk.lines if k in (" ", "-")]
        new = [t for k, t in hunk.lines if k in (" ", "+")]
        want = max(hunk.start - 1, 0) + offset
        if not old:
            at = min(max(want, lowest), len(out))
        else:
            found = _find(out, old, want, lowest)
            if found is None:
                actual = out[want:want + len(old)]
                raise PatchError(
                    f"hunk {number} does not apply: its lines were not found at or after line {lowest + 1}. "
                    f"Expected {old[:5]!r}, found at line {want + 1}: {actual[:5]!r}"
                )
            at = found
        out[at:at + len(old)] = new
        changed += sum(1 for k, _ in hunk.lines if k != " ")
        offset += len(new) - len(old)
        lowest = at + len(new)
    result = "\n".join(out)
    if out and ends_with_newline:
        result += "\n"
    return PatchOutcome(result, len(hunks), changed)
