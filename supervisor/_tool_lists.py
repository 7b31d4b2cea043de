"""Checks of the tool list a worker announces (``hello``, ``tools_changed``), without I/O.

A worker is untrusted: its tool list is bounded in count, name length, description length, and in the depth and
total number of values of every schema (compiling a schema costs the supervisor about 30 µs per value on its own
thread). A list that breaks a bound is a :class:`~toolboxes._protocol.ProtocolError`: the worker is killed, the
supervisor and every other toolbox keep serving.
"""

from __future__ import annotations

from typing import Any

from toolboxes._protocol import ProtocolError, json_problem

__all__ = ["HINT_KEYS", "MAX_SCHEMA_VALUES", "MAX_TOOLS", "checked_tool_list", "hints_problem"]

#: Bounds on a worker's tool list (hello, tools_changed). Compiling a schema costs the supervisor about 30 µs per
#: value on its own thread, so the list is bounded in values, not only in bytes; the largest real list we know
#: (Xero's OpenAPI spec: 235 tools, 32,000 schema values) fits many times over.
MAX_TOOLS = 2048
MAX_TOOL_NAME_CHARS = 1024
MAX_DESCRIPTION_CHARS = 100_000
MAX_SCHEMA_DEPTH = 64
MAX_SCHEMA_VALUES = 250_000
MAX_LOAD_ERRORS = 1024
#: The MCP tool annotations a worker may declare (``hints``): the four booleans, and a title.
HINT_KEYS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")
MAX_TITLE_CHARS = 200


def hints_problem(hints: Any) -> str | None:
    """What is wrong with a tool's ``hints`` (``None``: nothing): a map of :data:`HINT_KEYS` to booleans and
    ``title`` to a string of at most :data:`MAX_TITLE_CHARS` characters, nothing else."""
    if hints is None:
        return None
    if not isinstance(hints, dict):
        return "must be a map"
    for key, value in hints.items():
        if key in HINT_KEYS:
            if not isinstance(value, bool):
                return f"{key} must be true or false"
        elif key == "title":
            if not (isinstance(value, str) and len(value) <= MAX_TITLE_CHARS):
                return f"title must be a string of at most {MAX_TITLE_CHARS} characters"
        else:
            return f"hold {str(key)[:64]!r}, which is not one of {', '.join(HINT_KEYS)}, title"
    return None


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
        problem = hints_problem(t.get("hints"))
        if problem:
            raise ProtocolError(f"tool {name[:64]!r}: its hints {problem}")
        output_schema = t.get("output_schema")
        if not (output_schema is None or (isinstance(output_schema, dict)
                                          and output_schema.get("type") == "object")):
            raise ProtocolError(f"tool {name[:64]!r}: output_schema must be an object schema (type: object)")
        for key in ("input_schema", "annotations", "output_schema"):
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

