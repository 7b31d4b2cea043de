"""The one way to take an exception group apart (``sandbox/_errors.py``), used by the egress proxy and the
supervisor."""

from __future__ import annotations

from sandbox import exception_leaves, first_leaf


def test_leaves_walk_nested_groups_depth_first() -> None:
    a, b, c = ValueError("a"), KeyError("b"), OSError("c")
    group = BaseExceptionGroup("outer", [ExceptionGroup("inner", [a, b]), c])
    assert exception_leaves(group) == [a, b, c]
    assert first_leaf(group) is a


def test_a_plain_exception_is_its_own_leaf() -> None:
    exc = RuntimeError("x")
    assert exception_leaves(exc) == [exc]
    assert first_leaf(exc) is exc
