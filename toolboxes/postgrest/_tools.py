"""From PostgREST's OpenAPI 2 description to tools (pure): one per table, view or RPC path and method it lists.

Names: ``postgrest_<toolbox>_<method>_<table>`` (an RPC ``/rpc/<fn>`` is the table ``rpc_<fn>``). The methods are
those the description lists for the path (PostgREST's default ``openapi-mode`` lists what the request role may do),
narrowed by the agent file's ``AllowedMethods``. Arguments, the seed's four groups:

- ``filters`` (GET, PATCH, DELETE on tables and views): column -> ``op.value`` in PostgREST's grammar
  (``eq.active``, ``gte.18``, ``in.(1,2)``, ``not.is.null``, ``like(any).{a*,b*}``, ``fts(english).cat``), or a list of
  them (each becomes one condition); the columns are the ``rowFilter.<table>.<column>`` parameters, resolved through
  ``$ref``; ``or`` and ``and`` take a parenthesised list (``(age.lt.18,age.gt.65)``). PATCH and DELETE need at least
  one filter (a hardened backend does not update or delete a whole table by omission).
- ``subset``: ``limit``, ``offset`` (GET, PATCH, DELETE: PostgREST limits an update or delete too, given an
  ``order``), ``columns`` (every method: sent as ``select``, the columns of the rows answered). ``ranking``
  (GET, PATCH, DELETE): ``order``.
- ``body``: POST (an object, or an array of objects for a bulk insert) and PATCH (an object); its schema is the
  table's definition (``body.<table>``). RPC: POST ``body`` holds the function's arguments; GET takes them under
  ``args``.

So the seed's example ``{"filters": ..., "subset": {"limit", "offset", "columns"}, "ranking": {"order"}, "body":
...}`` is a PATCH: set ``body`` on the first ``limit`` rows the filters select, in that order, and answer their
``columns``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._names import tool_name
from ..openapi import RefError, Resolver, SchemaBudget, SpecError

__all__ = ["FILTER_FORM", "FILTER_PATTERN", "METHODS", "TableTool", "build_tools"]

_OPS = "eq|neq|gt|gte|lt|lte|like|ilike|match|imatch|in|is|isdistinct|fts|plfts|phfts|wfts|cs|cd|ov|sl|sr|nxr|nxl|adj"
#: What a filter value must look like: an operator (``not.`` and a modifier such as ``(any)`` or ``(english)``
#: allowed), a dot, then the operand.
FILTER_PATTERN = rf"^(not\.)?({_OPS})(\([A-Za-z0-9_ ]+\))?\..*$"
_LOGIC_PATTERN = r"^(not\.)?\(.*\)$"
#: The methods a PostgREST tool may have, in the order tools are listed.
METHODS = ("GET", "POST", "PATCH", "DELETE")


@dataclass(frozen=True)
class TableTool:
    """One tool: method and path, the filterable columns, and the argument schema."""

    tool: str
    method: str
    path: str
    rpc: bool
    columns: tuple[str, ...]
    description: str
    input_schema: dict[str, Any]


#: What a filter value is, in words (the validation report quotes it when a value is not of that form).
FILTER_FORM = (
    "operator.value: an operator (eq, neq, gt, gte, lt, lte, like, ilike, match, imatch, in, is, isdistinct, fts, "
    "plfts, phfts, wfts, cs, cd, ov, sl, sr, nxr, nxl, adj; not. before it negates), a dot, then the operand, "
    "e.g. eq.42, in.(1,2), not.is.null; for equality write eq.<value>"
)


def _filter_value() -> dict[str, Any]:
    one = {"type": "string", "pattern": FILTER_PATTERN, "description": FILTER_FORM}
    return {
        "anyOf": [one, {"type": "array", "items": one, "minItems": 1}],
        "description": "operator.value, e.g. eq.42, gte.18, in.(1,2), is.null, not.like.*x*, ilike.*Ann*",
    }


def _columns(op: dict[str, Any], r: Resolver, table: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for raw in op.get("parameters") or []:
        key = raw.get("$ref", "") if isinstance(raw, dict) else ""
        p, _ = r.follow(raw, r.location)
        if not isinstance(p, dict) or p.get("in") != "query" or not isinstance(p.get("name"), str):
            continue
        if key.startswith("#/parameters/rowFilter.") or (
            not key and p["name"] not in {"select", "order", "offset", "limit", "on_conflict"}
        ):
            out[p["name"]] = p
    return out


def _column_doc(name: str, p: dict[str, Any], definition: dict[str, Any]) -> str:
    prop = (definition.get("properties") or {}).get(name) or {}
    kind = prop.get("format") or p.get("format") or prop.get("type") or "text"
    parts = [f"column {name} ({kind})"]
    for text in (p.get("description"), prop.get("description")):
        if isinstance(text, str) and text.strip() and text.strip() not in parts:
            parts.append(text.strip())
    return "; ".join(parts)


def _table_schema(
    method: str,
    columns: dict[str, dict[str, Any]],
    body: Any,
    definition: dict[str, Any],
) -> dict[str, Any]:
    props: dict[str, Any] = {}
    required: list[str] = []
    if method in ("GET", "PATCH", "DELETE") and columns:
        filters = {
            c: {
                **_filter_value(),
                "description": _column_doc(c, p, definition) + ". Value: operator.value, "
                "e.g. eq.42, gte.18, in.(1,2), is.null, not.like.*x*",
            }
            for c, p in columns.items()
        }
        for logic in ("or", "and"):
            if logic not in filters:
                filters[logic] = {
                    "type": "string",
                    "pattern": _LOGIC_PATTERN,
                    "description": f"conditions joined by {logic.upper()}, e.g. (age.lt.18,age.gt.65)",
                }
        props["filters"] = {
            "type": "object",
            "properties": filters,
            "additionalProperties": False,
            "description": "column -> operator.value (PostgREST's filter grammar)",
        }
        if method != "GET":
            props["filters"]["minProperties"] = 1
            required.append("filters")
    reads = method != "POST"  # which rows: GET reads them, PATCH and DELETE change them
    props["subset"] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            **(
                {
                    "limit": {"type": "integer", "minimum": 0, "description": "at most this many rows"},
                    "offset": {"type": "integer", "minimum": 0, "description": "skip this many rows"},
                }
                if reads
                else {}
            ),
            "columns": {
                "type": "string",
                "minLength": 1,
                "description": "the columns of the rows answered, comma-separated (PostgREST's select)",
            },
        },
    }
    if reads:
        props["ranking"] = {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "order": {
                    "type": "string",
                    "minLength": 1,
                    "description": "e.g. created_at.desc,name.asc.nullslast (PostgREST's order)",
                }
            },
        }
    if method == "POST":
        props["body"] = {
            "anyOf": [body, {"type": "array", "items": body, "minItems": 1}],
            "description": "a row to insert, or an array of rows (bulk insert)",
        }
        required.append("body")
    elif method == "PATCH":
        props["body"] = {**body, "description": "the columns to set on every row the filters select"}
        props["body"].pop("required", None)  # a PATCH sets some columns
        required.append("body")
    schema: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema


def _rpc_schema(method: str, op: dict[str, Any], r: Resolver) -> dict[str, Any]:
    props: dict[str, Any] = {}
    required: list[str] = []
    if method == "GET":
        args: dict[str, Any] = {}
        needed: list[str] = []
        for raw in op.get("parameters") or []:
            p, pbase = r.follow(raw, r.location)
            if isinstance(p, dict) and p.get("in") == "query" and isinstance(p.get("name"), str):
                meta = {"name", "in", "required", "description", "collectionFormat"}
                args[p["name"]] = r.schema({k: v for k, v in p.items() if k not in meta}, pbase, SchemaBudget())
                if p.get("required") is True:
                    needed.append(p["name"])
        props["args"] = {
            "type": "object",
            "properties": args,
            "additionalProperties": False,
            "description": "the function's arguments",
        }
        if needed:
            props["args"]["required"] = needed
            required.append("args")
        props["subset"] = {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "limit": {"type": "integer", "minimum": 0},
                "offset": {"type": "integer", "minimum": 0},
                "columns": {"type": "string", "minLength": 1},
            },
        }
        props["ranking"] = {
            "type": "object",
            "additionalProperties": False,
            "properties": {"order": {"type": "string", "minLength": 1}},
        }
    else:
        body: Any = {"type": "object"}
        for raw in op.get("parameters") or []:
            p, pbase = r.follow(raw, r.location)
            if isinstance(p, dict) and p.get("in") == "body":
                body = r.schema(p.get("schema", {}), pbase, SchemaBudget())
        props["body"] = body
        required.append("body")
    schema: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema


def _describe(method: str, path: str, op: dict[str, Any]) -> str:
    parts = [f"{method} {path} (PostgREST)"]
    for key in ("summary", "description"):
        text = op.get(key)
        if isinstance(text, str) and text.strip() and text.strip() not in parts:
            parts.append(text.strip())
    return "\n\n".join(parts)[:2000]


def build_tools(
    r: Resolver, toolbox: str, allowed_methods: list[str] | None = None
) -> tuple[list[TableTool], list[dict[str, str]]]:
    """The tools of a PostgREST description for the methods it lists (``allowed_methods``, when given, narrows
    them), and load errors (paths left out)."""
    doc = r.root
    if not str(doc.get("swagger", "")).startswith("2."):
        raise SpecError("not PostgREST's description (PostgREST serves Swagger 2.0 at its root: 'swagger: \"2.0\"')")
    paths = doc.get("paths")
    if not isinstance(paths, dict):
        raise SpecError("the description has no 'paths' object")
    definitions = doc.get("definitions") if isinstance(doc.get("definitions"), dict) else {}
    allowed = [m for m in METHODS if allowed_methods is None or m in {a.upper() for a in allowed_methods}]
    tools: list[TableTool] = []
    errors: list[dict[str, str]] = []
    for path, item in paths.items():
        if not isinstance(path, str) or not isinstance(item, dict) or path == "/" or not path.startswith("/"):
            continue
        rpc = path.startswith("/rpc/")
        table = path[len("/rpc/") :] if rpc else path[1:]
        for method in allowed:
            op = item.get(method.lower())
            if not isinstance(op, dict):
                continue
            try:
                if rpc:
                    columns: dict[str, dict[str, Any]] = {}
                    schema = _rpc_schema(method, op, r)
                else:
                    columns = _columns(op, r, table)
                    body: Any = {"type": "object"}
                    for raw in op.get("parameters") or []:
                        p, pbase = r.follow(raw, r.location)
                        if isinstance(p, dict) and p.get("in") == "body":
                            body = r.schema(p.get("schema", {}), pbase, SchemaBudget())
                    definition = found if isinstance(found := definitions.get(table), dict) else {}
                    schema = _table_schema(method, columns, body, definition)
            except RefError as exc:
                errors.append({"source": f"paths.{path}.{method.lower()}", "message": f"left out: {exc}"})
                continue
            name = tool_name("postgrest", toolbox, method.lower(), ("rpc_" if rpc else "") + table)
            tools.append(TableTool(name, method, path, rpc, tuple(columns), _describe(method, path, op), schema))
    return tools, errors
