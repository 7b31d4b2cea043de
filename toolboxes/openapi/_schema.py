"""OpenAPI's schema dialects (Swagger 2.0, OpenAPI 3.0, 3.1) to plain JSON Schema 2020-12 for tool arguments.

The supervisor validates arguments against each tool's schema (Draft 2020-12), so the schema must be valid there and
self-contained. :func:`normalize_schema` keeps the validation keywords and annotations JSON Schema knows, converts
what differs (3.0 ``nullable``, boolean ``exclusiveMinimum``/``exclusiveMaximum``, Swagger's ``type: file``, tuple
``items``), and drops what cannot be checked or would break the validator (a ``required`` that is not a list, an
unknown ``type``, a ``pattern`` Python cannot compile, ``discriminator``, ``xml``, ``x-*``). ``$ref`` is handed to the
caller's ``expand`` (the resolver inlines it). In request schemas (``SchemaBudget.request``) ``readOnly`` properties
are not required: the server sets them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["SchemaBudget", "normalize_schema"]

_TYPES = {"string", "number", "integer", "boolean", "array", "object", "null"}
_SCHEMA_MAPS = ("properties", "patternProperties", "dependentSchemas")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SCHEMA_ONE = ("not", "contains", "propertyNames", "if", "then", "else", "unevaluatedProperties")
_COUNTS = ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties")
_NUMBERS = ("minimum", "maximum")
_TEXTS = ("title", "description", "format", "contentMediaType", "contentEncoding")
_FLAGS = ("uniqueItems", "readOnly", "writeOnly", "deprecated")
_ANY = ("default", "const")

Expand = Callable[[dict[str, Any], tuple[str, ...]], Any]


@dataclass
class SchemaBudget:
    """Bounds the size of one inlined schema (a ref-heavy spec can expand a lot). Past ``max_nodes`` schema nodes, or
    ``max_ref_depth`` refs deep, remaining refs are left out with a note. ``request``: the schema describes what
    the client sends."""

    max_nodes: int = 1000
    max_ref_depth: int = 3
    request: bool = True
    nodes: int = 0

    def exhausted(self, depth: int = 0) -> bool:
        """Whether a ref ``depth`` refs deep may still be inlined."""
        return self.nodes >= self.max_nodes or depth >= self.max_ref_depth


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _type(value: Any, nullable: bool) -> Any:
    types = value if isinstance(value, list) else [value]
    out = []
    for t in types:
        t = "string" if t == "file" else t  # Swagger 2.0: file content, sent as form data
        if t in _TYPES and t not in out:
            out.append(t)
    if nullable and out and "null" not in out:
        out.append("null")
    if not out:
        return None
    return out[0] if len(out) == 1 else out


def normalize_schema(node: Any, expand: Expand, budget: SchemaBudget, stack: tuple[str, ...]) -> Any:
    """Return ``node`` as JSON Schema 2020-12 (see the module docstring). ``stack`` is the chain of refs being
    expanded (for the caller's cycle check); ``expand(node, stack)`` returns the schema a ``$ref`` node stands for."""
    budget.nodes += 1
    if isinstance(node, bool):
        return node
    if not isinstance(node, dict):
        return {}
    if "$ref" in node:
        return expand(node, stack)

    def sub(value: Any) -> Any:
        return normalize_schema(value, expand, budget, stack)

    out: dict[str, Any] = {}
    nullable = node.get("nullable") is True or node.get("x-nullable") is True
    if "type" in node:
        t = _type(node["type"], nullable)
        if t is not None:
            out["type"] = t
    for key in _TEXTS:
        if isinstance(node.get(key), str):
            out[key] = node[key]
    for key in _FLAGS:
        if isinstance(node.get(key), bool):
            out[key] = node[key]
    for key in _ANY:
        if key in node:
            out[key] = node[key]
    for key in _COUNTS:
        if isinstance(node.get(key), int) and not isinstance(node[key], bool) and node[key] >= 0:
            out[key] = node[key]
    for key in _NUMBERS:
        if _is_number(node.get(key)):
            out[key] = node[key]
    if _is_number(node.get("multipleOf")) and node["multipleOf"] > 0:
        out["multipleOf"] = node["multipleOf"]
    for key, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        value = node.get(key)
        if _is_number(value):
            out[key] = value
        elif value is True and bound in out:  # OpenAPI 3.0 / Swagger 2.0 boolean form
            out[key] = out.pop(bound)
    if isinstance(node.get("enum"), list) and node["enum"]:
        enum = list(node["enum"])
        if nullable and None not in enum:
            enum.append(None)
        out["enum"] = enum
    if isinstance(node.get("pattern"), str):
        try:
            re.compile(node["pattern"])
        except re.error:
            pass  # an ECMA pattern Python cannot read: left unchecked
        else:
            out["pattern"] = node["pattern"]
    if isinstance(node.get("examples"), list):
        out["examples"] = node["examples"]
    elif "example" in node:
        out["examples"] = [node["example"]]

    for key in _SCHEMA_MAPS:
        value = node.get(key)
        if isinstance(value, dict):
            out[key] = {str(k): sub(v) for k, v in value.items()}
    for key in _SCHEMA_LISTS:
        value = node.get(key)
        if isinstance(value, list) and value:
            out[key] = [sub(v) for v in value]
    for key in _SCHEMA_ONE:
        if key in node and isinstance(node[key], dict | bool):
            out[key] = sub(node[key])
    items = node.get("items")
    if isinstance(items, list):
        out["prefixItems"] = [sub(v) for v in items] if items else []
    elif isinstance(items, dict | bool):
        out["items"] = sub(items)
    additional = node.get("additionalProperties")
    if isinstance(additional, dict | bool):
        out["additionalProperties"] = sub(additional)

    required = node.get("required")
    if isinstance(required, list) and all(isinstance(r, str) for r in required):
        props = out.get("properties", {})
        names = [
            r
            for r in dict.fromkeys(required)
            if not (budget.request and isinstance(props.get(r), dict) and props[r].get("readOnly") is True)
        ]
        if names:
            out["required"] = names
    return out
