"""Checks and compilation of the tool list a worker announces (``hello``, ``tools_changed``), without I/O.

A worker is untrusted: its tool list is bounded in count, name length, description length, and in the depth and
total number of values of every schema. A list that breaks a bound is a :class:`~toolboxes._protocol.ProtocolError`:
the worker is killed, the supervisor and every other toolbox keep serving.

Compiling a schema (jsonschema's check against its metaschema) costs about 80-120 µs per schema value, so a list
at the bounds costs tens of seconds of CPU. :func:`prepare_tool_list` does the checks and the compilation in one
pass meant for a worker thread (the connection runs it with ``trio.to_thread`` under a small limiter, never on the
trio loop); it reuses the compiled schemas of the worker's previous list (by fingerprint), yields the GIL between
schemas, and stops compiling after :data:`COMPILE_BUDGET_S`: the tools left are load errors naming them, the rest
of the list serves. A schema that does not compile is a load error of its tool (:class:`CompiledSchema.error`).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from toolboxes import CATALOG_KINDS, ProtocolError, catalog_problem, json_problem

from ._validation import ArgumentValidator, SchemaError

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "COMPILE_BUDGET_S",
    "HINT_KEYS",
    "MAX_SCHEMA_VALUES",
    "MAX_TOOLS",
    "CompiledSchema",
    "ToolList",
    "checked_tool_list",
    "compile_schema",
    "hints_problem",
    "prepare_tool_list",
]

#: Bounds on a worker's tool list (hello, tools_changed). The list is bounded in values, not only in bytes; the
#: largest real list we know (Xero's OpenAPI spec: 235 tools, 32,000 schema values, about 3 s to compile) fits.
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
            raise ProtocolError(f"a tool name must have 1 to {MAX_TOOL_NAME_CHARS} characters, not {len(name)}")
        description = t.get("description")
        if not (description is None or (isinstance(description, str) and len(description) <= MAX_DESCRIPTION_CHARS)):
            raise ProtocolError(
                f"tool {name[:64]!r}: the description must be a string of at most {MAX_DESCRIPTION_CHARS} characters"
            )
        annotations = t.get("annotations")
        if not (annotations is None or isinstance(annotations, dict)):
            raise ProtocolError(f"tool {name[:64]!r}: annotations must be a map")
        problem = hints_problem(t.get("hints"))
        if problem:
            raise ProtocolError(f"tool {name[:64]!r}: its hints {problem}")
        output_schema = t.get("output_schema")
        if not (output_schema is None or (isinstance(output_schema, dict) and output_schema.get("type") == "object")):
            raise ProtocolError(f"tool {name[:64]!r}: output_schema must be an object schema (type: object)")
        for key in ("input_schema", "annotations", "output_schema"):
            problem, used = json_problem(t.get(key), max_depth=MAX_SCHEMA_DEPTH, max_nodes=budget)
            if problem:
                raise ProtocolError(
                    f"tool {name[:64]!r}: its {key} {problem}"
                    + (" (the limit is for the whole tool list)" if budget < MAX_SCHEMA_VALUES else "")
                )
            budget -= used
    errors = message.get("load_errors") or []
    if not (
        isinstance(errors, list)
        and len(errors) <= MAX_LOAD_ERRORS
        and all(isinstance(e, dict) and json_problem(e, max_depth=2, max_nodes=64)[0] is None for e in errors)
    ):
        raise ProtocolError(f"load_errors must be a list of at most {MAX_LOAD_ERRORS} flat maps")
    return tools, errors


#: Thread time one tool list may spend compiling schemas it did not have compiled before; the tools past it are
#: left out with a load error (a re-list of the same schemas is nearly free: they are reused by fingerprint).
COMPILE_BUDGET_S = 10.0


@dataclass(frozen=True)
class CompiledSchema:
    """One tool's input schema, compiled: a validator, or the reason it was left out."""

    fingerprint: str
    validator: ArgumentValidator | None
    error: str | None = None
    #: left out for want of time, not for a fault: compiled again when the tool is listed again
    retry: bool = False


@dataclass(frozen=True)
class ToolList:
    """A checked tool list: the tools, their compiled schemas (same order) and the worker's own load errors."""

    tools: list[dict[str, Any]]
    schemas: list[CompiledSchema]
    load_errors: list[dict[str, Any]]
    #: the compiled ``output_schema`` of each tool (same order), ``None`` for a tool without one
    output_schemas: list[CompiledSchema | None] = field(default_factory=list)
    #: the frame's resources, resource_templates and prompts (toolboxes/_catalog.py), checked
    catalog: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def fingerprint(schema: Any) -> str:
    """A stable digest of a JSON value (key order does not matter)."""
    text = json.dumps(schema, sort_keys=True, separators=(",", ":"), allow_nan=True, default=repr)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def compile_schema(schema: Any, digest: str | None = None) -> CompiledSchema:
    """Compile one input schema; never raises (a schema that fails is a :class:`CompiledSchema` with ``error``)."""
    digest = digest or fingerprint(schema)
    try:
        return CompiledSchema(digest, ArgumentValidator(schema))
    except SchemaError as exc:
        return CompiledSchema(digest, None, str(exc))
    except Exception as exc:  # ArgumentValidator promises SchemaError only; a slip costs this tool only
        return CompiledSchema(digest, None, f"its input schema could not be compiled ({type(exc).__name__})")


def prepare_tool_list(
    message: dict[str, Any], reuse: Mapping[str, CompiledSchema], *, budget_s: float = COMPILE_BUDGET_S
) -> ToolList:
    """Check ``message``'s tool list and compile its schemas (for a worker thread). Raises :class:`ProtocolError`.

    ``reuse`` maps fingerprints to schemas compiled before (the previous list); they are not compiled again.
    """
    tools, load_errors = checked_tool_list(message)
    catalog: dict[str, list[dict[str, Any]]] = {}
    for kind in CATALOG_KINDS:
        problem = catalog_problem(kind, message.get(kind))
        if problem:
            raise ProtocolError(problem)
        catalog[kind] = list(message.get(kind) or [])
    deadline = time.monotonic() + budget_s

    def compiled_for(schema: Any) -> CompiledSchema:
        digest = fingerprint(schema)
        compiled = reuse.get(digest)
        if compiled is None:
            if time.monotonic() > deadline:
                compiled = CompiledSchema(
                    digest,
                    None,
                    f"left out: compiling the tool list's schemas took more "
                    f"than {budget_s:g} s; this tool and the rest were not checked",
                    retry=True,
                )
            else:
                compiled = compile_schema(schema, digest)
            time.sleep(0)  # let the trio thread take the GIL between schemas
        return compiled

    schemas = [compiled_for(t["input_schema"]) for t in tools]
    # An output schema that does not compile (or was left for want of time) is left out: the tool serves without.
    outputs = [compiled_for(t["output_schema"]) if isinstance(t.get("output_schema"), dict) else None for t in tools]
    return ToolList(tools, schemas, load_errors, outputs, catalog)
