"""Portal details that need no worker."""

from __future__ import annotations


def test_large_arguments_are_not_copied_into_the_trace() -> None:
    from supervisor.calls._portal import MAX_TRACED_ARGS_CHARS, _traced_args

    small = {"path": "/tmp/x", "n": 1}
    assert _traced_args(small) == small
    big = {"content": "x" * (MAX_TRACED_ARGS_CHARS + 1)}
    assert "_omitted" in _traced_args(big) and "more than" in _traced_args(big)["_omitted"]
