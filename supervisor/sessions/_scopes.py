"""Which sessions an introspection scope reaches from a session, given every session's parent (pure)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["SCOPES", "scope_members"]

SCOPES = ("parents-only", "children-only", "subtree", "all")


def scope_members(scope: str, current: str, parents: Mapping[str, str | None]) -> set[str]:
    """The session ids ``scope`` lets the session ``current`` see, given every session's parent (pure).

    Raises ``ValueError`` for an unknown scope. A parent cycle (impossible through the store) is walked once.
    """
    if scope == "all":
        return set(parents)
    if scope == "parents-only":
        out: set[str] = set()
        node = parents.get(current)
        while node is not None and node not in out and node != current:
            out.add(node)
            node = parents.get(node)
        return out
    if scope not in ("subtree", "children-only"):
        raise ValueError(f"unknown session scope {scope!r}; expected one of {', '.join(SCOPES)}")
    children: dict[str, list[str]] = {}
    for sid, parent in parents.items():
        if parent is not None:
            children.setdefault(parent, []).append(sid)
    seen = {current}
    stack = [current]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in seen:
                seen.add(child)
                stack.append(child)
    if scope == "children-only":
        seen.discard(current)
    return seen
