"""show-spec agent: the agent file's JSON Schema (:mod:`._agent_check`'s shipped copy) written out as text.

Nothing here knows a key of the agent file: every key, type, default and description comes from the schema, which is
made from the supervisor's models, so the text cannot say what the loader does not do. Pure string building.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["agent_spec"]

_REF = "#/$defs/"


def agent_spec(schema: Mapping[str, Any]) -> str:
    """The text of ``show-spec agent``: the file's description, then one section per object the schema defines,
    in the order they are first used (the contents first), each key with its type, default and description
    (``*``: required)."""
    defs: Mapping[str, Any] = schema.get("$defs") or {}
    lines = ["# Agent files", "", str(schema.get("description", "")), ""]
    lines.append("`agents-supervise schema --agent-file` prints this as JSON Schema; validate-agent checks against it.")
    for name in _reachable(defs, "AgentDescription"):
        lines += ["", *_section(name, defs[name])]
    return "\n".join(lines) + "\n"


def _reachable(defs: Mapping[str, Any], root: str) -> list[str]:
    order: list[str] = []
    pending = [root]
    while pending:
        name = pending.pop(0)
        if name in order or name not in defs:
            continue
        order.append(name)
        pending += _refs(defs[name])
    return order


def _refs(value: Any) -> list[str]:
    if isinstance(value, dict):
        ref = value.get("$ref")
        own = [ref.removeprefix(_REF)] if isinstance(ref, str) and ref.startswith(_REF) else []
        return own + [r for key, v in value.items() if key != "discriminator" for r in _refs(v)]
    if isinstance(value, list):
        return [r for v in value for r in _refs(v)]
    return []


def _section(name: str, schema: Mapping[str, Any]) -> list[str]:
    props: Mapping[str, Any] = schema.get("properties") or {}
    tag = (props.get("tag") or {}).get("const")
    if tag is not None and set(props) == {"tag", "contents"}:
        return [f'{name}: {{"tag": {json.dumps(tag)}, "contents": {_type(props["contents"])}}}']
    heading = f"{name}:" if tag is None else f"{name}: tag {json.dumps(tag)}, beside it:"
    if schema.get("description"):
        heading += f" {_plain(schema['description'])}"
    required = set(schema.get("required") or ())
    out = [heading]
    for key, prop in props.items():
        if key == "tag" and tag is not None:
            continue
        line = f"- {key}{'*' if key in required else ''}: {_type(prop)}"
        if "default" in prop and prop["default"] not in (None, [], {}):
            line += f" (default {json.dumps(prop['default'])})"
        if prop.get("description"):
            line += f"; {_plain(prop['description'])}"
        out.append(line)
    return out


def _type(schema: Any) -> str:
    """A short type expression of a (sub)schema."""
    if not isinstance(schema, Mapping) or not schema:
        return "any"
    if "$ref" in schema:
        return str(schema["$ref"]).removeprefix(_REF)
    if "const" in schema:
        return json.dumps(schema["const"])
    if "enum" in schema:
        return " | ".join(json.dumps(v) for v in schema["enum"])
    for union in ("oneOf", "anyOf"):
        if union in schema:
            parts = [_type(s) for s in schema[union]]
            return " | ".join(sorted(dict.fromkeys(parts), key=lambda p: p == "null"))
    kind = schema.get("type")
    if kind == "array":
        unique = ", unique" if schema.get("uniqueItems") else ""
        return f"[{_type(schema.get('items'))}{unique}]"
    if kind == "object" and isinstance(schema.get("additionalProperties"), Mapping):
        return f"{{name: {_type(schema['additionalProperties'])}}}"
    if kind == "object" and "properties" in schema:
        return "{" + ", ".join(schema["properties"]) + "}"
    bounds = [
        f"{sign} {schema[key]:g}"
        for key, sign in (("exclusiveMinimum", ">"), ("minimum", ">="), ("exclusiveMaximum", "<"), ("maximum", "<="))
        if isinstance(schema.get(key), int | float) and not isinstance(schema.get(key), bool)
    ]
    if "pattern" in schema:
        bounds.append(f"matching {schema['pattern']}")
    text = " or ".join(kind) if isinstance(kind, list) else str(kind or "any")
    return f"{text} {' '.join(bounds)}" if bounds else text


def _plain(text: Any) -> str:
    """A description as one line of text (docstrings' double backquotes dropped)."""
    return " ".join(str(text).replace("``", "").split())
