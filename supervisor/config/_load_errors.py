"""Load errors: what did not load and why, the one way they are made and written.

A load error is never an exception that ends a start or a reload: it is one toolbox (or sub-agent) that serves
nothing, with the reason, while every other one serves (DESIGN.md). They come from the agent tree (a sub-agent left
out), the plan (a toolbox that could not be planned or prepared), the start (git sources, a worker's start, its tool
list) and the toolboxes themselves (scripts left out), and are shown by ``agents-supervise tools``, ``serve``'s
stderr, ``check`` and the trace's ``load_error`` records, each as :func:`load_error_line` writes it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["LoadError", "load_error_line", "load_error_owner", "load_error_reason", "toolbox_not_loaded"]


class LoadError(TypedDict, total=False):
    """One load error. ``toolbox``: the toolbox that did not load or left something out (absent: a sub-agent of
    ``agent`` left out); ``kind``: its kind (the plan's); ``source``: what was being done, or where; ``tool``: a tool
    the toolbox left out; ``message``: the words for the operator."""

    toolbox: str
    agent: str
    kind: str
    source: str
    tool: str
    message: str


def toolbox_not_loaded(toolbox: str, agent: str, source: str, why: str, *, kind: str | None = None) -> LoadError:
    """The load error of ``agent``'s ``toolbox``, which did not load while ``source`` (its compile, its folders,
    its worker's start, its tool list) because of ``why``: it serves nothing."""
    error = LoadError(
        toolbox=toolbox,
        agent=agent,
        source=source,
        message=f"toolbox {toolbox} (agent {agent}) did not load ({source}): {why}"[:2000]
        + ". It serves nothing; fix the cause and restart the supervisor.",
    )
    if kind is not None:
        error["kind"] = kind
    return error


def load_error_owner(error: Mapping[str, Any]) -> str:
    """Whose load error it is: an agent's toolbox (``agent/toolbox``), or an agent (a sub-agent file it names is
    missing)."""
    if not error.get("toolbox"):
        return f"agent {error.get('agent')}"
    return f"{error['agent']}/{error['toolbox']}" if error.get("agent") else str(error["toolbox"])


def load_error_reason(error: Mapping[str, Any]) -> str:
    """Where (or which tool) and why: ``error`` but whose."""
    return f"{error.get('source', error.get('tool', ''))}: {error.get('message')}"


def load_error_line(error: Mapping[str, Any]) -> str:
    """``error`` in one line: whose, where (or which tool), why (every printer of load errors writes this)."""
    return f"{load_error_owner(error)}: {load_error_reason(error)}"
