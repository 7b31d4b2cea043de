"""OpenAPI documents and their ``$ref``s: parsing, JSON pointers, local and relative-file refs, cycles.

A :class:`Resolver` owns the documents of one spec: the root (parsed from a file or from bytes fetched over HTTP)
and, for a spec read from a file, every file a relative ``$ref`` names (``Pet.json``, ``../common/Error.json#/x``),
read on first use. A spec fetched from a URL follows only local refs (``#/...``): it never makes the worker read a
file, and its external refs are reported, not fetched.

Two ways to follow refs:

- :meth:`Resolver.follow` for objects that are not schemas (parameters, request bodies, path items): follows a chain
  of ``$ref`` to a real object, and raises :class:`RefError` on a dangling ref or a chain that loops;
- :meth:`Resolver.schema` for schemas: returns a self-contained JSON Schema (2020-12) with every ``$ref`` inlined
  (see :mod:`._schema` for the dialect conversion). A ref already being expanded higher up (a cycle: ``person.spouse``
  -> ``person``) is cut: it becomes an open schema whose description says which ref was cut. A dangling ref becomes an
  open schema with a note, and is listed in :attr:`Resolver.problems` (load errors).
"""

from __future__ import annotations

import json
import os
from typing import Any
from urllib.parse import unquote, urlsplit

import yaml

from ._schema import SchemaBudget, normalize_schema

__all__ = ["MAX_DOCUMENT_BYTES", "RefError", "Resolver", "SpecError", "parse_document"]

#: Largest spec document (root or referenced file) read or fetched.
MAX_DOCUMENT_BYTES = 16 * 1024 * 1024


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """A safe loader that keeps dates as text (``2020-01-01`` is a string in JSON, and so in a spec)."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


class SpecError(Exception):
    """The spec cannot be used at all (unreadable, not JSON or YAML, not an OpenAPI or Swagger document)."""


class RefError(Exception):
    """A ``$ref`` cannot be followed: dangling, looping, external where only local refs are followed, unreadable."""


def parse_document(data: bytes | str, source: str) -> Any:
    """Parse JSON or YAML (JSON is YAML, but the JSON parser is faster and stricter). Raises :class:`SpecError`."""
    text = data.decode("utf-8-sig", "replace") if isinstance(data, bytes) else data
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            return json.loads(stripped)
        except ValueError:
            pass  # YAML flow style also starts with '{'
    try:
        return yaml.load(text, Loader=_Loader)  # a safe loader (no Python objects)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}" if where is not None else ""
        raise SpecError(f"{source}: not valid JSON or YAML{at}: {getattr(exc, 'problem', None) or exc}") from exc


def _pointer_parts(fragment: str) -> list[str]:
    pointer = unquote(fragment)
    if pointer in ("", "/"):
        return [] if pointer == "" else [""]
    if not pointer.startswith("/"):
        raise RefError(f"'#{fragment}' is not a JSON pointer (it must start with '#/')")
    return [p.replace("~1", "/").replace("~0", "~") for p in pointer[1:].split("/")]


class Resolver:
    """The documents of one spec and the refs between them.

    Args:
        root: the parsed root document.
        location: where it came from: an absolute file path (relative file refs are followed) or a URL (only
            local refs are followed).
    """

    def __init__(self, root: Any, location: str) -> None:
        self.root = root
        self.location = location
        self.files = "://" not in location
        self._docs: dict[str, Any] = {location: root}
        self.problems: dict[str, str] = {}

    # -- locating ------------------------------------------------------------------------------------------
    def _split(self, ref: str, base: str) -> tuple[str, str]:
        if not isinstance(ref, str):
            raise RefError(f"$ref must be a string, not {type(ref).__name__}")
        target, _, fragment = ref.partition("#")
        if not target:
            return base, fragment
        if urlsplit(target).scheme:
            raise RefError(f"$ref {ref!r} points to another server; only local and relative-file refs are followed")
        if not self.files:
            raise RefError(
                f"$ref {ref!r} names another document; a spec fetched from a URL follows only local refs ('#/...')"
            )
        path = os.path.normpath(os.path.join(os.path.dirname(base), unquote(target)))
        return path, fragment

    def _document(self, location: str) -> Any:
        if location in self._docs:
            return self._docs[location]
        try:
            with open(location, "rb") as f:
                data = f.read(MAX_DOCUMENT_BYTES + 1)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            hint = " (the worker may read only the spec's folder)" if isinstance(exc, PermissionError) else ""
            raise RefError(f"cannot read {location}: {reason}{hint}") from exc
        if len(data) > MAX_DOCUMENT_BYTES:
            raise RefError(f"{location} is larger than {MAX_DOCUMENT_BYTES} bytes")
        try:
            doc = parse_document(data, location)
        except SpecError as exc:
            raise RefError(str(exc)) from exc
        self._docs[location] = doc
        return doc

    def lookup(self, ref: str, base: str) -> tuple[Any, str, str]:
        """The object ``ref`` (seen in the document at ``base``) names, the location of its document, and a key
        that identifies it (for cycle detection). Raises :class:`RefError`."""
        location, fragment = self._split(ref, base)
        node = self._document(location)
        for hops, part in enumerate(_pointer_parts(fragment)):
            if isinstance(node, dict) and part not in node and isinstance(node.get("$ref"), str) and hops < 64:
                node, location, _key = self.lookup(node["$ref"], location)  # a pointer through a ref
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                where = "" if location == self.location else f" in {location}"
                raise RefError(f"$ref {ref!r} points to nothing{where} (no {part!r})")
        return node, location, f"{location}#{fragment}"

    def dangling_refs(self, limit: int = 20) -> list[tuple[str, str]]:
        """Every ``$ref`` of the root document that cannot be followed, as ``(where, message)`` (JSON path in the
        root document), at most ``limit`` of them: the spec's defects, reported whether or not a tool uses them."""
        found: list[tuple[str, str]] = []
        todo: list[tuple[Any, str]] = [(self.root, "")]
        while todo and len(found) < limit:
            node, where = todo.pop()
            if isinstance(node, dict):
                ref = node.get("$ref")
                if isinstance(ref, str):
                    try:
                        self.lookup(ref, self.location)
                    except RefError as exc:
                        if all(str(exc) != m for _w, m in found):
                            found.append((where.lstrip(".") or "$", str(exc)))
                todo.extend((v, f"{where}.{k}") for k, v in reversed(list(node.items())) if k != "$ref")
            elif isinstance(node, list):
                todo.extend((v, f"{where}[{i}]") for i, v in reversed(list(enumerate(node))))
        return found

    # -- following -----------------------------------------------------------------------------------------
    def follow(self, node: Any, base: str) -> tuple[Any, str]:
        """Follow a chain of ``$ref`` from ``node`` to an object that is not a ref; returns it and its document's
        location. Raises :class:`RefError` (dangling, looping, unreadable)."""
        seen: list[str] = []
        while isinstance(node, dict) and "$ref" in node:
            node, base, key = self.lookup(node["$ref"], base)
            if key in seen:
                raise RefError(f"$ref {seen[0]} loops onto itself ({' -> '.join([*seen, key])})")
            seen.append(key)
        return node, base

    def schema(self, node: Any, base: str, budget: SchemaBudget | None = None) -> Any:
        """``node`` as a self-contained JSON Schema (2020-12): refs inlined, cycles cut with a note, the OpenAPI
        dialect converted (:func:`._schema.normalize_schema`); ``budget`` bounds its size."""
        budget = budget or SchemaBudget()
        return normalize_schema(node, lambda n, stack: self._expand(n, base, stack, budget), budget, ())

    def _expand(self, node: dict[str, Any], base: str, stack: tuple[str, ...], budget: SchemaBudget) -> Any:
        ref = node["$ref"]
        try:
            target, location, key = self.lookup(ref, base)
            chain = [key]
            while isinstance(target, dict) and set(target) == {"$ref"}:
                target, location, key = self.lookup(target["$ref"], location)
                if key in chain:
                    raise RefError(f"$ref {ref!r} loops onto itself ({' -> '.join([*chain, key])})")
                chain.append(key)
        except RefError as exc:
            self.problems.setdefault(str(ref), str(exc))
            return {"description": f"(unresolved $ref {ref}: {exc}; any value accepted)"}
        if key in stack:
            return {"description": f"(recursive $ref {ref} cut here; any value accepted)"}
        if budget.exhausted(len(stack)):
            return {"description": f"(schema too large to inline fully: $ref {ref} left out; any value accepted)"}
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        merged = {**target, **siblings} if isinstance(target, dict) and siblings else target
        return normalize_schema(merged, lambda n, st: self._expand(n, location, st, budget), budget, (*stack, key))
