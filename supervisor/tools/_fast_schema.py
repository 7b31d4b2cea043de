"""A tool's argument schema compiled once into a plain-Python check of its common shape, for the arguments that pass
(issue 29: work done once per tool, not per call).

jsonschema walks a schema's keywords for every call: 74 Python functions for one string property, about 200 for
four (counted with cProfile). Most tools' schemas are an object of named properties with simple types, and most
calls pass. :func:`compile_fast` turns such a schema into a check that answers ``True`` only when jsonschema would
find no error; anything else (``False``: an error, or a case it does not decide) is left to jsonschema, which also
words the errors. So the fast check can only skip work, never change an answer.

What it decides (draft 4 to 2020-12, the ``$schema`` of the schema, if any, among them): a top-level ``type:
object`` (or none) with ``properties``, ``required`` (a list of names) and ``additionalProperties`` (absent,
``true`` or ``false``); each property with ``type`` (``string``, ``integer``, ``number``, ``boolean``, ``null``,
``array``, or a list of them), ``enum`` of strings, ``minLength``/``maxLength``, ``minimum``/``maximum``, and for an
array ``items`` of the same simple kind with ``minItems``/``maxItems``; and the annotations (``description``,
``title``, ``default``, ``examples``, ``$comment``, ``deprecated``, ``readOnly``, ``writeOnly``). A value's type is
judged by its exact Python type (``True`` is no integer, ``1.0`` is left to jsonschema). A property outside that
subset is left to jsonschema whenever the arguments hold it; a schema whose top level is outside it compiles to
``None``. Pure.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["compile_fast"]

_DRAFTS = (
    "http://json-schema.org/draft-04/",
    "http://json-schema.org/draft-06/",
    "http://json-schema.org/draft-07/",
    "https://json-schema.org/draft/2019-09/",
    "https://json-schema.org/draft/2020-12/",
)
_ANNOTATIONS = frozenset(
    {"description", "title", "default", "examples", "$comment", "deprecated", "readOnly", "writeOnly"}
)
_TOP_KEYS = _ANNOTATIONS | {"type", "properties", "required", "additionalProperties", "$schema", "$id"}
_PROPERTY_KEYS = _ANNOTATIONS | {"type", "enum", "minLength", "maxLength", "minimum", "maximum"}
_ARRAY_KEYS = _ANNOTATIONS | {"type", "items", "minItems", "maxItems"}
#: the exact Python types of the JSON values each simple type accepts
_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
    "array": (list,),
}


def _count(value: Any) -> bool:
    return type(value) is int and value >= 0


def _number(value: Any) -> bool:
    return type(value) in (int, float)


def _is_str(value: Any) -> bool:
    return type(value) is str


def _is_list(value: Any) -> bool:
    return type(value) is list


def _same(value: Any) -> Any:
    return value


#: keyword, the values it applies to, what of them is bounded, and how
_BOUNDS: tuple[tuple[str, Callable[[Any], bool], Callable[[Any], Any], Callable[[Any, Any], bool]], ...] = (
    ("minLength", _is_str, len, operator.ge),
    ("maxLength", _is_str, len, operator.le),
    ("minimum", _number, _same, operator.ge),
    ("maximum", _number, _same, operator.le),
)


def _bound_check(
    applies: Callable[[Any], bool], measure: Callable[[Any], Any], op: Callable[[Any, Any], bool], bound: Any
) -> Callable[[Any], bool]:
    return lambda v: not applies(v) or op(measure(v), bound)


def _every_item(item: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: all(item(x) for x in v)


def _property(schema: Any) -> Callable[[Any], bool] | None:
    """The check of one property's schema, or ``None`` when it is not of the simple kind."""
    if not isinstance(schema, dict):
        return None
    declared = schema.get("type")
    names = [declared] if isinstance(declared, str) else declared
    if names is not None and (not isinstance(names, list) or not names or any(n not in _TYPES for n in names)):
        return None
    allowed = _ARRAY_KEYS if names == ["array"] else _PROPERTY_KEYS
    if not set(schema) <= allowed:
        return None
    types = tuple({t for n in names for t in _TYPES[n]}) if names is not None else None
    checks: list[Callable[[Any], bool]] = []
    if types is not None:
        checks.append(lambda v: type(v) in types)
    if "enum" in schema:
        enum = schema["enum"]
        if not isinstance(enum, list) or not enum or not all(type(e) is str for e in enum):
            return None
        members = frozenset(enum)
        checks.append(lambda v: type(v) is str and v in members)
    for key, applies, measure, op in _BOUNDS:
        if key in schema:
            bound = schema[key]
            if not (_count(bound) if measure is len else _number(bound)):
                return None
            checks.append(_bound_check(applies, measure, op, bound))
    if names == ["array"]:
        if "items" in schema:
            item = _property(schema["items"])
            if item is None:
                return None
            checks.append(_every_item(item))
        for key, op in (("minItems", operator.ge), ("maxItems", operator.le)):
            if key in schema:
                if not _count(schema[key]):
                    return None
                checks.append(_bound_check(_is_list, len, op, schema[key]))
    if not checks:
        return lambda v: True
    if len(checks) == 1:
        return checks[0]
    return lambda v: all(check(v) for check in checks)


def compile_fast(schema: Any) -> Callable[[dict[str, Any]], bool] | None:
    """The fast check of ``schema`` (see the module docstring): a function of the arguments (a ``dict``) that is
    ``True`` only when jsonschema finds them valid; ``None`` when the schema's top level is outside the subset."""
    if not isinstance(schema, dict) or not set(schema) <= _TOP_KEYS:
        return None
    dialect = schema.get("$schema")
    if dialect is not None and not (isinstance(dialect, str) and dialect.startswith(_DRAFTS)):
        return None
    if schema.get("type", "object") != "object":
        return None
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    extras = schema.get("additionalProperties", True)
    if not isinstance(properties, dict) or not isinstance(required, list) or not isinstance(extras, bool):
        return None
    if not all(isinstance(name, str) for name in required):
        return None
    checks: dict[str, Callable[[Any], bool] | None] = {str(k): _property(v) for k, v in properties.items()}
    needed = tuple(dict.fromkeys(required))

    def accepts(args: dict[str, Any]) -> bool:
        for name in needed:
            if name not in args:
                return False
        for key, value in args.items():
            if key not in checks:
                if not extras:
                    return False
                continue
            check = checks[key]
            if check is None or not check(value):
                return False
        return True

    return accepts
