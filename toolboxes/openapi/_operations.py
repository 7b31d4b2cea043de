"""From an OpenAPI document to tools: one :class:`Operation` per path and method (pure: no I/O but ref files).

Names (SPEC.md section 4): ``openapi_<toolbox>_<operation>``, the operation as the seed normalises it: its
``operationId``, else its path, every character outside ``[A-Za-z0-9_]`` replaced by ``_`` without collapsing
(``pets.getById`` -> ``pets_getById``; ``/users/{id}/posts`` -> ``_users__id__posts``). Where path-derived names would
collide (``GET`` and ``POST`` of one path without ``operationId``, or a path that normalises to another operation's
name), those operations keep the method in front (``get__users__id__posts``, ``post__users__id__posts``); a second
operation with the same name after that gets ``_2``. Arguments: one property per parameter (path, query, header,
cookie), named by the parameter, prefixed with its location (``path_id``, ``query_id``) only when two locations
share a name (or a name is ``body``); the request body under ``body``. Header parameters ``Accept``,
``Content-Type`` and ``Authorization`` are ignored (OpenAPI 3's rule; the toolbox's ``Headers`` and ``Token`` set them).

An operation that cannot be built (a parameter ref that dangles, a path placeholder no parameter describes) is left
out with a load error; a dangling ref inside a schema only opens that part of the schema (and is a load error too).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from .._names import tool_name
from ._refs import RefError, Resolver, SpecError
from ._schema import SchemaBudget

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["METHODS", "Body", "Operation", "Param", "build_operations", "operation_name", "spec_version"]

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
_IGNORED_HEADERS = {"accept", "content-type", "authorization"}
_SWAGGER_PARAM_META = {"name", "in", "required", "description", "collectionFormat", "allowEmptyValue"}
_PLACEHOLDER = re.compile(r"\{([^{}]+)\}")
_MAX_DESCRIPTION = 2000


@dataclass(frozen=True)
class Param:
    """One parameter: its argument property, wire name, location and serialisation."""

    prop: str
    name: str
    location: str  # path | query | header | cookie
    style: str  # form | simple | spaceDelimited | pipeDelimited | deepObject | csv | ssv | tsv | pipes | multi
    explode: bool
    json_content: bool = False  # OpenAPI 3 ``content``: the value is sent as JSON text


@dataclass(frozen=True)
class Body:
    """The request body: the media type sent and whether the argument ``body`` is required."""

    media_type: str
    required: bool


@dataclass(frozen=True)
class Operation:
    """One tool: where it sends, what it takes."""

    tool: str
    method: str
    path: str
    description: str
    params: tuple[Param, ...]
    body: Body | None
    input_schema: dict[str, Any]


def spec_version(doc: Any) -> str:
    """``"2.0"``, ``"3.0"`` or ``"3.1"``; raises :class:`SpecError` for anything else."""
    if not isinstance(doc, dict):
        raise SpecError("the spec is not a JSON/YAML object")
    if str(doc.get("swagger", "")).startswith("2."):
        return "2.0"
    version = str(doc.get("openapi", ""))
    if version.startswith("3.0"):
        return "3.0"
    if version.startswith("3.1"):
        return "3.1"
    raise SpecError("not a Swagger 2.0 or OpenAPI 3.0/3.1 document (no 'swagger: 2.0' or 'openapi: 3.x' key)")


def operation_name(method: str, path: str, operation_id: Any, *, with_method: bool = False) -> str:
    """The operation part of a tool name (see the module docstring): the seed's normalised ``operationId`` or path;
    ``with_method``: the path with the method in front, for path-derived names that would collide."""
    if isinstance(operation_id, str) and operation_id:
        raw = operation_id
    else:
        raw = f"{method}_{path}" if with_method else path
    return re.sub(r"[^A-Za-z0-9_]", "_", raw)


def _named(ops: list[tuple[Operation, Any]], toolbox: str) -> list[Operation]:
    """The operations with their tool names: the seed's, the method in front of path-derived names that collide,
    then ``_2``, ``_3`` for what still collides (in the spec's order)."""
    plain = [operation_name(o.method.lower(), o.path, oid) for o, oid in ops]
    counts: dict[str, int] = {}
    for name in plain:
        counts[name] = counts.get(name, 0) + 1
    out: list[Operation] = []
    seen: set[str] = set()
    for (o, oid), name in zip(ops, plain, strict=True):
        derived = not (isinstance(oid, str) and oid)
        if derived and counts[name] > 1:
            name = operation_name(o.method.lower(), o.path, oid, with_method=True)
        tool = tool_name("openapi", toolbox, name)
        unique, n = tool, 1
        while unique in seen:
            n += 1
            unique = f"{tool}_{n}"
        seen.add(unique)
        out.append(replace(o, tool=unique))
    return out


def _describe(method: str, path: str, op: dict[str, Any], item: dict[str, Any]) -> str:
    parts = [f"{method.upper()} {path}"]
    for key in ("summary", "description"):
        text = op.get(key) or item.get(key)
        if isinstance(text, str) and text.strip() and text.strip() not in parts:
            parts.append(text.strip())
    if op.get("deprecated") is True:
        parts.append("(deprecated)")
    text = "\n\n".join(parts)
    return text if len(text) <= _MAX_DESCRIPTION else text[: _MAX_DESCRIPTION - 1] + "…"


def _pick_media(content: dict[str, Any]) -> str | None:
    types = [t for t in content if isinstance(t, str)]
    preds: tuple[Callable[[str], bool], ...] = (
        lambda t: t.split(";")[0].strip() == "application/json",
        lambda t: t.split(";")[0].strip().endswith("+json"),
        lambda t: t.startswith("application/x-www-form-urlencoded"),
        lambda t: t.startswith("multipart/form-data"),
    )
    for pred in preds:
        for t in types:
            if pred(t):
                return t
    return types[0] if types else None


def _is_jsonish(media: str) -> bool:
    base = media.split(";")[0].strip()
    return base == "application/json" or base.endswith("+json")


def _is_form(media: str) -> bool:
    return media.startswith(("application/x-www-form-urlencoded", "multipart/form-data"))


class _Builder:
    def __init__(self, resolver: Resolver, toolbox: str, version: str) -> None:
        self.r = resolver
        self.toolbox = toolbox
        self.version = version
        self.errors: list[dict[str, str]] = []

    def schema(self, node: Any, base: str) -> Any:
        return self.r.schema(node, base, SchemaBudget())

    def param(self, raw: dict[str, Any], base: str) -> tuple[dict[str, Any], str] | None:
        p, pbase = self.r.follow(raw, base)
        if not isinstance(p, dict) or not isinstance(p.get("name"), str) or not isinstance(p.get("in"), str):
            raise RefError("a parameter without a string 'name' and 'in'")
        return p, pbase

    def build(
        self,
        method: str,
        path: str,
        op: dict[str, Any],
        item: dict[str, Any],
        base: str,
        item_params: list[Any],
        consumes: list[str],
    ) -> Operation:
        merged: dict[tuple[str, str], tuple[dict[str, Any], str]] = {}
        for raw in [*item_params, *(op.get("parameters") or [])]:
            resolved = self.param(raw, base)
            if resolved is not None:
                merged[(resolved[0]["name"], resolved[0]["in"])] = resolved
        params = [
            (p, b)
            for (name, loc), (p, b) in merged.items()
            if loc in ("path", "query", "header", "cookie")
            and not (loc == "header" and name.lower() in _IGNORED_HEADERS)
        ]
        body_schema, body = self.body(op, merged, base, consumes)
        placeholders = set(_PLACEHOLDER.findall(path))
        described = {p["name"] for p, _ in params if p["in"] == "path"}
        if placeholders - described:
            missing = ", ".join(sorted(placeholders - described))
            raise RefError(f"the path has placeholders no path parameter describes: {missing}")
        counts: dict[str, int] = {}
        for p, _ in params:
            counts[p["name"]] = counts.get(p["name"], 0) + 1
        properties: dict[str, Any] = {}
        required: list[str] = []
        out_params: list[Param] = []
        for p, pbase in params:
            name, loc = p["name"], p["in"]
            prop = name if counts[name] == 1 and not (name == "body" and body is not None) else f"{loc}_{name}"
            while prop in properties:
                prop += "_"
            param_schema, json_content = self.param_schema(p, pbase)
            if isinstance(p.get("description"), str) and isinstance(param_schema, dict):
                param_schema = {**param_schema, "description": p["description"]}
            properties[prop] = param_schema
            if p.get("required") is True or loc == "path":
                required.append(prop)
            out_params.append(Param(prop, name, loc, *self.style(p), json_content=json_content))
        if body is not None:
            properties["body"] = body_schema
            if body.required:
                required.append("body")
        schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
        if required:
            schema["required"] = required
        return Operation("", method.upper(), path, _describe(method, path, op, item), tuple(out_params), body, schema)

    def style(self, p: dict[str, Any]) -> tuple[str, bool]:
        if self.version == "2.0":
            fmt = p.get("collectionFormat") or "csv"
            return (fmt if fmt in ("csv", "ssv", "tsv", "pipes", "multi") else "csv"), fmt == "multi"
        default = "form" if p["in"] in ("query", "cookie") else "simple"
        style = p.get("style")
        style = style if isinstance(style, str) else default
        explode = p.get("explode")
        return style, explode if isinstance(explode, bool) else style == "form"

    def param_schema(self, p: dict[str, Any], base: str) -> tuple[Any, bool]:
        if self.version == "2.0":
            return self.schema({k: v for k, v in p.items() if k not in _SWAGGER_PARAM_META}, base), False
        if "schema" in p:
            return self.schema(p["schema"], base), False
        content = p.get("content")
        if isinstance(content, dict) and content:
            media = _pick_media(content) or ""
            entry = content.get(media)
            return self.schema(entry.get("schema", {}) if isinstance(entry, dict) else {}, base), True
        return {}, False

    def body(
        self,
        op: dict[str, Any],
        params: dict[tuple[str, str], tuple[dict[str, Any], str]],
        base: str,
        consumes: list[str],
    ) -> tuple[Any, Body | None]:
        if self.version == "2.0":
            for (_name, loc), (p, pbase) in params.items():
                if loc == "body":
                    media = next(
                        (m for m in consumes if _is_jsonish(m)), consumes[0] if consumes else "application/json"
                    )
                    schema = self.schema(p.get("schema", {}), pbase)
                    if isinstance(p.get("description"), str) and isinstance(schema, dict):
                        schema = {"description": p["description"], **schema}
                    return schema, Body(media, p.get("required") is True)
            fields = [(p, pbase) for (_n, loc), (p, pbase) in params.items() if loc == "formData"]
            if not fields:
                return None, None
            multipart = any(p.get("type") == "file" for p, _ in fields) or (
                consumes and consumes[0].startswith("multipart/form-data")
            )
            props = {}
            for p, pbase in fields:
                s = self.schema({k: v for k, v in p.items() if k not in _SWAGGER_PARAM_META}, pbase)
                if isinstance(p.get("description"), str) and isinstance(s, dict):
                    s = {**s, "description": p["description"]}
                props[p["name"]] = s
            required = [p["name"] for p, _ in fields if p.get("required") is True]
            schema = {"type": "object", "properties": props, "additionalProperties": False}
            if required:
                schema["required"] = required
            media = "multipart/form-data" if multipart else "application/x-www-form-urlencoded"
            return schema, Body(media, bool(required))
        raw = op.get("requestBody")
        if raw is None:
            return None, None
        rb, rbase = self.r.follow(raw, base)
        content = rb.get("content") if isinstance(rb, dict) else None
        if not isinstance(content, dict) or not content:
            return None, None
        media = _pick_media(content) or "application/json"
        entry = content.get(media)
        schema_node = entry.get("schema", {}) if isinstance(entry, dict) else {}
        schema = self.schema(schema_node, rbase)
        if not (_is_jsonish(media) or _is_form(media)):
            schema = {"type": "string", "description": f"the request body, sent as {media}"}
        if isinstance(rb.get("description"), str) and isinstance(schema, dict):
            schema = {"description": rb["description"], **schema}
        return schema, Body(media, rb.get("required") is True)


def build_operations(resolver: Resolver, toolbox: str) -> tuple[list[Operation], list[dict[str, str]]]:
    """Every operation of the spec as a tool, and the load errors (operations left out, dangling schema refs)."""
    doc = resolver.root
    version = spec_version(doc)
    b = _Builder(resolver, toolbox, version)
    paths = doc.get("paths")
    if paths is None:
        return [], (
            [{"source": "paths", "message": "the spec has no paths (webhooks are not tools)"}]
            if doc.get("webhooks")
            else []
        )
    if not isinstance(paths, dict):
        raise SpecError("'paths' is not an object")
    consumes_root = listed if isinstance(listed := doc.get("consumes"), list) else []
    built: list[tuple[Operation, Any]] = []  # each with its operationId: named once all are known
    for path, raw_item in paths.items():
        if not isinstance(path, str) or path.startswith("x-"):
            continue
        try:
            item, ibase = resolver.follow(raw_item, resolver.location)
        except RefError as exc:
            b.errors.append({"source": f"paths.{path}", "message": f"left out: {exc}"})
            continue
        if not isinstance(item, dict):
            continue
        item_params = found if isinstance(found := item.get("parameters"), list) else []
        for method in METHODS:
            op = item.get(method)
            if not isinstance(op, dict):
                continue
            consumes = listed if isinstance(listed := op.get("consumes"), list) else consumes_root
            try:
                operation = b.build(method, path, op, item, ibase, item_params, consumes)
            except RefError as exc:
                b.errors.append({"source": f"paths.{path}.{method}", "message": f"left out: {exc}"})
                continue
            built.append((operation, op.get("operationId")))
    ops = _named(built, toolbox)
    reported: set[str] = set()
    for where, message in resolver.dangling_refs():
        reported.add(message)
        b.errors.append({"source": where, "message": f"{message}; a schema using it accepts any value there"})
    for ref, message in resolver.problems.items():
        if message not in reported:
            b.errors.append({"source": f"$ref {ref}", "message": f"{message}; that part of a schema accepts any value"})
    return ops, b.errors
