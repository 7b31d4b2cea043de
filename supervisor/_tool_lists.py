"""Checks of the tool list a worker announces (``hello``, ``tools_changed``), without I/O.

A worker is untrusted: its tool list is bounded in count, name length, description length, and in the depth and
total number of values of every schema (compiling a schema costs the supervisor about 30 µs per value on its own
thread). A list that breaks a bound is a :class:`~toolboxes._protocol.ProtocolError`: the worker is killed, the
supervisor and every other toolbox keep serving.
"""

from __future__ import annotations

from typing import Any

from toolboxes._protocol import ProtocolError, json_problem

__all__ = ["MAX_SCHEMA_VALUES", "MAX_TOOLS", "checked_tool_list"]

#: Bounds on a worker's tool list (hello, tools_changed). Compiling a schema costs the supervisor about 30 µs per
#: value on its own thread, so the list is bounded in values, not only in bytes; the largest real list we know
#: (Xero's OpenAPI spec: 235 tools, 32,000 schema values) fits many times over.
MAX_TOOLS = 2048
MAX_TOOL_NAME_CHARS = 1024
MAX_DESCRIPTION_CHARS = 100_000
MAX_SCHEMA_DEPTH = 64
MAX_SCHEMA_VALUES = 250_000
MAX_LOAD_ERRORS = 1024


def checked_tool_list(message: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Return ``(tools, load_errors)`` of a ``hello``/``tools_changed`` message, or raise :class:`ProtocolError`."""
    tools = message.get("tools")
    if not isinstance(tools, list):
        raise ProtocolError("tools must be a list of {name, description, input_schema}")
    if len(tools) > MAX_TOOLS:
        raise ProtocolError(f"the tool list has {len(tools)} tools, more than the limit of {MAX_TOOLS}")
    budget = MAX_SCHEMA_VALUES
    for t in tools:
        if not (isinstance(t, dict) and isinstance(t.get("name"), str) and isinstance(t.get("input_schema"), dict)):
            raise ProtocolError("tools must be a list of {name, description, input_schema}")
        name = t["name"]
        if not 0 < len(name) <= MAX_TOOL_NAME_CHARS:
            raise ProtocolError(f"a tool name must have 1 to {MAX_TOOL_NAME_CHARS} characters, "
                                f"not {len(name)}")
        description = t.get("description")
        if not (description is None or (isinstance(description, str) and len(description)
                <= MAX_DESCRIPTION_CHARS)):
            raise ProtocolError(f"tool {name[:64]!r}: the description must be a string of at most "
                                f"{MAX_DESCRIPTION_CHARS} characters")
        annotations = t.get("annotations")
        if not (annotations is None or isinstance(annotations, dict)):
            raise ProtocolError(f"tool {name[:64]!r}: annotations must be a map")
        for key in ("input_schema", "annotations"):
            problem, used = json_problem(t.get(key), max_depth=MAX_SCHEMA_DEPTH, max_nodes=budget)
            if problem:
                raise ProtocolError(f"tool {name[:64]!r}: its {key} {problem}"
                                    + (" (the limit is for the whole tool list)" if budget < MAX_SCHEMA_VALUES
                                       else ""))
            budget -= used
    errors = message.get("load_errors") or []
    if not (isinstance(errors, list) and len(errors) <= MAX_LOAD_ERRORS and all(
            isinstance(e, dict) and json_problem(e, max_depth=2, max_nodes=64)[0] is None for e in errors)):
        raise ProtocolError(f"load_errors must be a list of at most {MAX_LOAD_ERRORS} flat maps")
    return tools, errors

