"""jsonschema's validation errors told in the seed's words (SPEC.md section 3): one :class:`FieldError` (a path
such as ``user.age`` and a message such as ``Expected number but got string``) per problem, an ``anyOf``/``oneOf``
told for the branch the value was meant for, and the whole report (:func:`format_validation_errors`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from jsonschema import exceptions as js_exceptions

from ._bounded_patterns import search

__all__ = ["FieldError", "field_errors", "format_validation_errors", "type_name"]

_JSON_TYPES = {
    dict: "object",
    list: "array",
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    type(None): "null",
}


@dataclass(frozen=True)
class FieldError:
    """One validation problem: ``path`` like ``user.age`` (``""`` = the arguments themselves) and a message."""

    path: str
    message: str


def type_name(value: Any) -> str:
    """The JSON type of a decoded value (``boolean`` before ``integer``)."""
    if isinstance(value, bool):
        return "boolean"
    for t, name in _JSON_TYPES.items():
        if isinstance(value, t):
            return name
    return type(value).__name__


def _join(path: Any) -> str:
    parts: list[str] = []
    for p in path:
        if isinstance(p, int):
            parts.append(f"[{p}]")
        else:
            parts.append(("." if parts else "") + str(p))
    return "".join(parts)


def field_errors(error: js_exceptions.ValidationError) -> list[FieldError]:
    """jsonschema's ``error`` as the seed words it, one :class:`FieldError` per property it is about."""
    path = _join(error.absolute_path)
    value: Any = error.validator_value  # Unset only on errors built by hand, never on the validator's own
    schema: Any = error.schema
    v = error.validator
    if v == "required":
        match = re.match(r"'(.+)' is a required property", error.message)
        name = match.group(1) if match else str(value)
        return [FieldError(f"{path}.{name}" if path else name, "Required property missing")]
    if v == "type":
        expected = value
        expected_s = " or ".join(expected) if isinstance(expected, list) else str(expected)
        return [FieldError(path, f"Expected {expected_s} but got {type_name(error.instance)}")]
    if v == "enum":
        allowed = ", ".join(str(a) for a in value)
        return [FieldError(path, f"Invalid enum value: {error.instance}. Allowed: {allowed}")]
    if v == "additionalProperties" and isinstance(error.instance, dict):
        known = set((schema or {}).get("properties", {}))
        patterns = (schema or {}).get("patternProperties") or {}
        extras = [k for k in error.instance if k not in known and not any(search(p, k) for p in patterns)] or ["?"]
        return [FieldError(f"{path}.{k}" if path else k, "Unknown property") for k in extras]
    if v == "const":
        return [FieldError(path, f"Expected the value {value!r}")]
    if v == "pattern" and isinstance(error.instance, str):
        described = (schema or {}).get("description") if isinstance(schema, dict) else None
        shown = _shown(error.instance)
        if isinstance(described, str) and described.strip():
            return [FieldError(path, f"Invalid value {shown}: expected {described.strip()}")]
        return [FieldError(path, f"Invalid value {shown}: does not match the pattern {value!r}")]
    if v in ("anyOf", "oneOf") and error.context:
        return _branch_errors(error, path)
    if error.context:  # another keyword with sub-errors: report the best one
        return field_errors(js_exceptions.best_match(error.context))
    return [FieldError(path, error.message)]


def _shown(value: str) -> str:
    """A string value as a message quotes it (long ones cut)."""
    return repr(value if len(value) <= 80 else value[:77] + "...")


def _branch_types(schema: Any) -> set[str] | None:
    """The JSON types a branch of an ``anyOf``/``oneOf`` accepts, or ``None`` when it does not say (no ``type``,
    ``const`` or ``enum``; a ``$ref``; ``true``)."""
    if not isinstance(schema, dict):
        return None if schema is True else set()
    declared = schema.get("type")
    if isinstance(declared, str):
        return {declared}
    if isinstance(declared, list) and all(isinstance(t, str) for t in declared):
        return set(declared)
    if "const" in schema:
        return {type_name(schema["const"])}
    if isinstance(schema.get("enum"), list):
        return {type_name(e) for e in schema["enum"]}
    return None


def _accepts(types: set[str], value: Any) -> bool:
    name = type_name(value)
    if name in types:
        return True
    if name == "integer" and "number" in types:
        return True
    return name == "number" and "integer" in types and float(value).is_integer()


def _branch_errors(error: js_exceptions.ValidationError, path: str) -> list[FieldError]:
    """The errors of an ``anyOf``/``oneOf`` that no branch accepted, told for the branch the value was meant for.

    The branch meant is the one whose type the value has (an object for ``{"anyOf": [row, [row]]}``): its own
    errors are the report (``body.title: Required property missing``, not ``body: Expected array``). When the
    value's type fits no branch, the report lists the types the branches take; when several fit, the best of
    their errors (jsonschema's ``best_match``)."""
    branches = error.validator_value if isinstance(error.validator_value, list) else []
    by_branch: dict[int, list[js_exceptions.ValidationError]] = {}
    for sub in error.context or []:
        index = sub.relative_schema_path[0] if sub.relative_schema_path else None
        if isinstance(index, int):
            by_branch.setdefault(index, []).append(sub)
    kinds = [_branch_types(b) for b in branches]
    fitting = [i for i, t in enumerate(kinds) if t is None or _accepts(t, error.instance)]
    if len(fitting) == 1 and by_branch.get(fitting[0]):
        return [fe for sub in by_branch[fitting[0]] for fe in field_errors(sub)]
    if not fitting and kinds and all(t is not None for t in kinds):
        names = sorted({n for t in kinds if t is not None for n in t})
        return [FieldError(path, f"Expected {' or '.join(names)} but got {type_name(error.instance)}")]
    candidates = [sub for i in fitting for sub in by_branch.get(i, [])] or list(error.context or [])
    return field_errors(js_exceptions.best_match(candidates))


def format_validation_errors(tool: str, errors: list[FieldError]) -> str:
    """The seed's validation report for ``errors``."""
    noun = "error" if len(errors) == 1 else "errors"
    lines = [f"Tool call validation failed for '{tool}' with {len(errors)} {noun}:", ""]
    for i, e in enumerate(errors, 1):
        lines.append(f"{i}. {e.path}: {e.message}" if e.path else f"{i}. {e.message}")
    lines += ["", "Please correct these issues and try again."]
    return "\n".join(lines)
