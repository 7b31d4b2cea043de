"""``tools/list``'s answer, made and encoded once per listing: the entries of the tools a session lists, their JSON
text (spliced into each reply: ``_mcp_wire.spliced``) and the names listed, cached by the identity of the tools
listed and what the session's revision shows. Pure: no supervisor, no I/O."""

from __future__ import annotations

from typing import Any

from ._mcp_wire import encode_json

__all__ = ["tool_list"]

#: ``tools/list``'s answers, by what the revision shows (annotations, output schemas) and the identity of the tools
#: listed (a listing's entries are the same objects until the registry is rebuilt: ``ServedTools.listing``); each
#: value keeps its tools, so no other object can have their ids while it is here. The same list, in any session, is
#: made and encoded once.
_LISTS: dict[tuple[Any, ...], tuple[list[Any], list[dict[str, Any]], bytes | None, frozenset[str]]] = {}
_LISTS_KEPT = 16


def tool_list(
    tools: list[Any], hints: bool, outputs: bool
) -> tuple[list[dict[str, Any]], bytes | None, frozenset[str]]:
    """The ``tools`` of a ``tools/list`` answer listing ``tools`` (with their ``annotations`` when ``hints``, their
    ``outputSchema`` when ``outputs``), its JSON text (``None``: it holds a value only the fallbacks of
    ``_mcp_wire.encode_message`` can write) and the names listed; cached in :data:`_LISTS`."""
    key = (hints, outputs, *map(id, tools))
    hit = _LISTS.get(key)
    if hit is not None:
        return hit[1], hit[2], hit[3]
    entries = []
    for t in tools:
        entry: dict[str, Any] = {"name": t.name, "description": t.description, "inputSchema": t.input_schema}
        if t.hints and hints:
            entry["annotations"] = t.hints
        if t.output_schema is not None and outputs:
            entry["outputSchema"] = t.output_schema
        entries.append(entry)
    try:
        text: bytes | None = encode_json(entries)
    except (ValueError, TypeError, UnicodeEncodeError, RecursionError):
        text = None
    if len(_LISTS) >= _LISTS_KEPT:
        del _LISTS[next(iter(_LISTS))]
    _LISTS[key] = (list(tools), entries, text, frozenset(e["name"] for e in entries))
    return entries, text, _LISTS[key][3]
