"""Why a tool name is not served when the toolbox (or script) that would serve it did not load.

A tool of a toolbox that failed to load is not in the registry, so a call of it is "not found"; that alone leaves
an agent guessing. :func:`unloaded_note` says which of the caller's agent's toolboxes did not load and why, so the
agent (or its operator) can act. Pure: it reads what the runners hold (``spec.toolbox``, ``spec.kind``,
``spec.agent``, ``failed_reason``, ``load_errors``) and the load errors of toolboxes that got no runner, and
reports only the toolboxes of the agent the caller may see.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable

    from supervisor.config import LoadError

__all__ = ["could_serve", "unloaded_note"]

#: kinds whose tool names do not carry the toolbox's Name (``bash_<slug>``, ``skill_...``, ``skills_list``)
_NAMELESS_PREFIX = {"bash": ("bash_",), "skills": ("skill_", "skills_")}
_MAX_NOTE = 2000


def _prefixes(kind: str, toolbox: str) -> tuple[str, ...]:
    """The starts a tool name of a toolbox of ``kind`` named ``toolbox`` may have (SPEC section 2)."""
    return _NAMELESS_PREFIX.get(kind) or (f"{kind}_{toolbox.replace('-', '_')}_",)


def could_serve(kind: str, toolbox: str, name: str) -> bool:
    """Whether a toolbox of ``kind`` named ``toolbox`` may serve the tool ``name``, by the naming rule alone (pure):
    its kind and Name start the name, or, for the kinds whose names do not carry it (bash, skills), the kind does.
    A name shortened past 64 characters may keep too little of its start to tell: the caller decides then."""
    return name.startswith(_prefixes(kind, toolbox))


def _script_match(name: str, kind: str, error: dict[str, Any]) -> bool:
    """Whether a per-script load error is about the script that would serve ``name`` (``bash_<file stem>``)."""
    source = str(error.get("source") or "")
    if kind != "bash" or not source:
        return False
    stem = os.path.splitext(os.path.basename(source))[0].replace("-", "_")
    return name == f"bash_{stem}"


def unloaded_note(name: str, runners: Iterable[Any], scope: str | None, unloaded: Iterable[LoadError] = ()) -> str:
    """A sentence about the toolboxes of agent ``scope`` (every agent when ``None``) that did not load and may be
    the reason ``name`` is not served; ``""`` when none did.

    ``unloaded``: load errors of toolboxes that got no runner at all (``{"toolbox", "agent", "kind", "message"}``,
    the plan's: an unset ``${VAR}``, a compile error, folders that cannot be made).

    A toolbox whose tool names start as ``name`` does is named alone when there is one; otherwise every toolbox of
    the agent that did not load is listed (its tool names are unknown: it never said them).
    """
    failed: list[tuple[str, str, str]] = []  # (kind, toolbox, why)
    scripts: list[str] = []
    for error in unloaded:
        if error.get("toolbox") and error.get("kind") and scope in (None, error.get("agent")):
            failed.append((error["kind"], error["toolbox"], str(error.get("message"))))
    for runner in runners:
        spec = getattr(runner, "spec", None)  # sub-agent runners have none: they always load
        if spec is None or (scope is not None and spec.agent != scope):
            continue
        errors = list(getattr(runner, "load_errors", None) or ())
        if not runner.tools and (runner.failed_reason or errors):
            why = runner.failed_reason or "; ".join(str(e.get("message")) for e in errors)
            failed.append((spec.kind, spec.toolbox, why))
        for error in errors:
            if _script_match(name, spec.kind, error):
                scripts.append(
                    f"the script {error.get('source')} of toolbox {spec.toolbox} did not load: {error.get('message')}"
                )
    if scripts:
        note = " ".join(scripts)[:_MAX_NOTE]
        return note if note.endswith(".") else note + "."
    if not failed:
        return ""
    matching = [(kind, tb, why) for kind, tb, why in failed if could_serve(kind, tb, name)]
    if len(matching) == 1:
        _, toolbox, why = matching[0]
        note = f"Its toolbox {toolbox} did not load: {why}"
    else:
        listed = "; ".join(f"{tb}: {why}" for _, tb, why in (matching or failed))
        note = f"Toolboxes of this agent that did not load (their tools are not served): {listed}"
    note = note[:_MAX_NOTE]
    return note if note.endswith(".") else note + "."
