"""The one unified-diff applier: strict (Developer's patch-file) and fuzzy (Lua's fs.patch) readings."""

from __future__ import annotations

import pytest

from toolboxes._unified_diff import PatchError, apply_patch

TEXT = "one\ntwo\nthree\nfour\nfive\n"
#: Counts that do not match the body (agents get them wrong): the header says 1 old line, the body has 2.
WRONG_COUNTS = "@@ -2,1 +2,1 @@\n two\n-three\n+THREE\n"


def test_wrong_counts_are_refused_strict_and_applied_fuzzy() -> None:
    with pytest.raises(PatchError, match="outside a hunk"):  # strict: the body ends where the counts say
        apply_patch(TEXT, WRONG_COUNTS)
    assert apply_patch(TEXT, WRONG_COUNTS, fuzzy=True).text == "one\ntwo\nTHREE\nfour\nfive\n"


def test_fuzzy_hunks_follow_each_other_and_move_with_what_earlier_hunks_added() -> None:
    diff = "@@ -1,1 +1,3 @@\n-one\n+ONE\n+one-and-a-half\n+one-and-three-quarters\n@@ -9 +9 @@\n-four\n+FOUR\n"
    out = apply_patch(TEXT, diff, fuzzy=True)
    assert out.text == "ONE\none-and-a-half\none-and-three-quarters\ntwo\nthree\nFOUR\nfive\n"
    assert (out.hunks_applied, out.lines_changed) == (2, 6)
    # The same old lines twice: the second hunk is searched for after the first, never before it.
    twice = "a\nx\nb\nx\n"
    assert apply_patch(twice, "@@ -2 +2 @@\n-x\n+1\n@@ -2 +2 @@\n-x\n+2\n", fuzzy=True).text == "a\n1\nb\n2\n"


def test_both_readings_agree_on_a_well_formed_diff_and_keep_a_missing_final_newline() -> None:
    diff = "--- a/f\n+++ b/f\n@@ -4,2 +4,2 @@\n four\n-five\n+FIVE\n"
    assert apply_patch(TEXT, diff).text == apply_patch(TEXT, diff, fuzzy=True).text == TEXT.replace("five", "FIVE")
    assert apply_patch("a\nb", "@@ -2 +2 @@\n-b\n+c\n", fuzzy=True).text == "a\nc"
    with pytest.raises(PatchError, match="hunk 1 does not apply"):
        apply_patch(TEXT, "@@ -1 +1 @@\n-zero\n+0\n", fuzzy=True)
