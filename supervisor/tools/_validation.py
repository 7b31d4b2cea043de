"""Argument validation against a tool's JSON schema, reported in the seed's text form (SPEC.md section 3).

::

    Tool call validation failed for 'NAME' with N errors:

    1. filters.status: Invalid enum value: pending. Allowed: active, inactive
    2. user.age: Expected number but got string

    Please correct these issues and try again.
"""

from __future__ import annotations

import contextvars
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import jsonschema
import regex
from jsonschema import _keywords
from jsonschema import exceptions as js_exceptions
from jsonschema.validators import extend, validator_for

from ._fast_schema import compile_fast

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["ArgumentValidator", "FieldError", "SchemaError", "format_validation_errors"]

#: Time one validation may spend matching the schema's regexes (``pattern``, ``patternProperties``). Schemas come
#: from workers (untrusted) and strings from agents (untrusted): ``^(a+)+$`` against 30 ``a`` and a ``b`` would
#: hold Python's ``re`` for minutes on the supervisor's only thread. The ``regex`` module checks a timeout while
#: it matches.
PATTERN_BUDGET_S = 0.25
_deadline: contextvars.ContextVar[float] = contextvars.ContextVar("pattern_deadline", default=0.0)


class _PatternTimeout(Exception):
    """Matching the schema's regexes took longer than :data:`PATTERN_BUDGET_S`."""


def _search(pattern: str, text: str) -> bool:
    left = _deadline.get() - time.monotonic()
    if left <= 0:
        raise _PatternTimeout(pattern)
    try:
        return regex.search(pattern, text, timeout=left) is not None
    except TimeoutError as exc:
        raise _PatternTimeout(pattern) from exc
    except regex.error:
        return bool(re.search(pattern, text))  # what jsonschema itself would do (already compiled by check_schema)


def _pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Iterator[js_exceptions.ValidationError]:
    if validator.is_type(instance, "string") and not _search(patrn, instance):
        yield js_exceptions.ValidationError(f"{instance!r} does not match {patrn!r}")


def _pattern_properties(
    validator: Any, pattern_properties: dict[str, Any], instance: Any, schema: Any
) -> Iterator[js_exceptions.ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in pattern_properties.items():
        for k, v in instance.items():
            if _search(pattern, k):
                yield from validator.descend(v, subschema, path=k, schema_path=pattern)


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Any
) -> Iterator[js_exceptions.ValidationError]:
    patterns = schema.get("patternProperties")
    if not patterns or not validator.is_type(instance, "object"):
        keywords: Any = _keywords  # its stubs type the keyword functions as returning None; they are generators
        yield from keywords.additionalProperties(validator, additional, instance, schema)
        return
    known = schema.get("properties", {})
    extras = sorted(k for k in instance if k not in known and not any(_search(p, k) for p in patterns))
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        joined = ", ".join(repr(each) for each in extras)
        yield js_exceptions.ValidationError(
            f"{joined} do not match any of the regexes: {', '.join(repr(p) for p in sorted(patterns))}"
        )


_BOUNDED = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
}

_JSON_TYPES = {
    dict: "object",
    list: "array",
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    type(None): "null",
}


_EXTENDED: dict[Any, Any] = {}


def _bounded(cls: Any) -> Any:
    """``cls`` with the time-bounded keywords (made once per draft: ``extend`` builds a class, about 1.5 ms)."""
    extended = _EXTENDED.get(cls)
    if extended is None:
        extended = _EXTENDED.setdefault(cls, extend(cls, _BOUNDED))  # type: ignore[no-untyped-call]  # no stubs
    return extended


class SchemaError(ValueError):
    """A tool declared an input schema that is not a valid JSON Schema (the tool is left out, with this reason)."""


@dataclass(frozen=True)
class FieldError:
    """One validation problem: ``path`` like ``user.age`` (``""`` = the arguments themselves) and a message."""

    path: str
    message: str


def _type_name(value: Any) -> str:
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


def _field_errors(error: js_exceptions.ValidationError) -> list[FieldError]:
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
        return [FieldError(path, f"Expected {expected_s} but got {_type_name(error.instance)}")]
    if v == "enum":
        allowed = ", ".join(str(a) for a in value)
        return [FieldError(path, f"Invalid enum value: {error.instance}. Allowed: {allowed}")]
    if v == "additionalProperties" and isinstance(error.instance, dict):
        known = set((schema or {}).get("properties", {}))
        patterns = (schema or {}).get("patternProperties") or {}
        extras = [k for k in error.instance if k not in known and not any(_search(p, k) for p in patterns)] or ["?"]
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
        return _field_errors(js_exceptions.best_match(error.context))
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
        return {_type_name(schema["const"])}
    if isinstance(schema.get("enum"), list):
        return {_type_name(e) for e in schema["enum"]}
    return None


def _accepts(types: set[str], value: Any) -> bool:
    name = _type_name(value)
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
        return [fe for sub in by_branch[fitting[0]] for fe in _field_errors(sub)]
    if not fitting and kinds and all(t is not None for t in kinds):
        names = sorted({n for t in kinds if t is not None for n in t})
        return [FieldError(path, f"Expected {' or '.join(names)} but got {_type_name(error.instance)}")]
    candidates = [sub for i in fitting for sub in by_branch.get(i, [])] or list(error.context or [])
    return _field_errors(js_exceptions.best_match(candidates))


def format_validation_errors(tool: str, errors: list[FieldError]) -> str:
    """The seed's validation report for ``errors``."""
    noun = "error" if len(errors) == 1 else "errors"
    lines = [f"Tool call validation failed for '{tool}' with {len(errors)} {noun}:", ""]
    for i, e in enumerate(errors, 1):
        lines.append(f"{i}. {e.path}: {e.message}" if e.path else f"{i}. {e.message}")
    lines += ["", "Please correct these issues and try again."]
    return "\n".join(lines)


#: Arguments that would probe a schema for references to itself at load time (the empty object).
_PROBE: dict[str, Any] = {}


class ArgumentValidator:
    """A compiled validator for one tool's input schema.

    The schema is untrusted (a worker sent it): whatever it holds, constructing a validator either succeeds or raises
    :class:`SchemaError` with a reason (never another exception), and :meth:`errors` never raises (a schema that
    cannot be applied, such as a ``$ref`` that refers to itself without end or cannot be resolved, is reported as
    a problem of the call). References are resolved only inside the schema itself: nothing is fetched.
    """

    def __init__(self, schema: dict[str, Any]) -> None:
        if not isinstance(schema, dict):
            raise SchemaError("the input schema must be a JSON object")
        dialect = schema.get("$schema")
        if dialect is not None and not isinstance(dialect, str):
            raise SchemaError(
                f"invalid input schema: $schema must be a string (the URI of a JSON Schema dialect), "
                f"not {dialect!r:.60}"
            )
        try:
            cls = validator_for(schema, default=jsonschema.Draft202012Validator)
            cls.check_schema(schema)
        except js_exceptions.SchemaError as exc:
            raise SchemaError(f"invalid input schema: {exc.message[:500]}") from exc
        except RecursionError as exc:
            raise SchemaError("invalid input schema: it is nested too deeply to be checked") from exc
        except Exception as exc:  # jsonschema's own checks can fail in other ways on hostile input
            raise SchemaError(f"invalid input schema ({type(exc).__name__}: {str(exc)[:300]})") from exc
        if "unevaluatedProperties" in repr(schema) and "patternProperties" in repr(schema):
            # jsonschema matches patternProperties again for unevaluatedProperties, without a time bound.
            raise SchemaError("unevaluatedProperties together with patternProperties is not supported")
        try:
            self._validator = _bounded(cls)(schema)
        except Exception as exc:
            raise SchemaError(f"invalid input schema ({type(exc).__name__}: {str(exc)[:300]})") from exc
        properties = schema.get("properties")
        self._ranks: dict[str, int] = (
            {"": -1} | {str(k): i for i, k in enumerate(properties)} if isinstance(properties, dict) else {"": -1}
        )
        self._trivial = (
            schema.get("type") == "object"
            and not schema.get("properties")
            and not schema.get("required")
            and len(schema) <= 2
        )
        if not self._trivial:
            problem = self._unusable(_PROBE)
            if problem is not None:
                raise SchemaError(f"invalid input schema: {problem}")
        #: the errors of ``{}`` (the arguments of most calls of a tool without required ones), found once: the
        #: answer depends on the schema only (no string to match, nothing to time out)
        self._empty: list[FieldError] | None = None
        self._fast = compile_fast(schema)  # the common shape in plain Python, for arguments that pass

    def _unusable(self, args: Any) -> str | None:
        """Why the schema cannot be applied to ``args`` at all (``None``: it can)."""
        token = _deadline.set(time.monotonic() + PATTERN_BUDGET_S)
        try:
            for _ in self._validator.iter_errors(args):
                pass
        except _PatternTimeout:
            return None  # a question of the arguments, reported by errors()
        except RecursionError:
            return "it refers to itself without end (a $ref cycle that never reaches a value)"
        except Exception as exc:  # an unresolvable $ref, a broken keyword value jsonschema did not check
            return f"it cannot be applied ({type(exc).__name__}: {str(exc)[:300]})"
        finally:
            _deadline.reset(token)
        return None

    def errors(self, args: Any) -> list[FieldError]:
        """Every problem with ``args``, in a stable order (empty when valid). Never raises."""
        if not isinstance(args, dict):
            return [FieldError("", f"Expected object but got {_type_name(args)}")]
        if self._trivial:
            return []
        if not args:
            if self._empty is None:
                self._empty = self._errors(args)
            return list(self._empty)
        if self._fast is not None and self._fast(args):
            return []
        return self._errors(args)

    def raw_errors(self, args: Any) -> list[js_exceptions.ValidationError] | None:
        """jsonschema's own errors of ``args`` (for :mod:`._relax`, which mends what it may); ``None`` when the
        arguments cannot be checked at all (time, a schema that cannot be applied). Never raises."""
        token = _deadline.set(time.monotonic() + PATTERN_BUDGET_S)
        try:
            return list(self._validator.iter_errors(args))
        except Exception:  # _PatternTimeout, RecursionError, a schema jsonschema cannot apply: errors() says which
            return None
        finally:
            _deadline.reset(token)

    def extra_keys(self, error: js_exceptions.ValidationError) -> list[str]:
        """The keys an ``additionalProperties: false`` error of :meth:`raw_errors` is about (bounded in time as
        :meth:`errors` is; ``[]`` when matching the schema's ``patternProperties`` takes too long)."""
        if not isinstance(error.instance, dict) or not isinstance(error.schema, dict):
            return []
        known = error.schema.get("properties") or {}
        patterns = error.schema.get("patternProperties") or {}
        token = _deadline.set(time.monotonic() + PATTERN_BUDGET_S)
        try:
            return [k for k in error.instance if k not in known and not any(_search(p, k) for p in patterns)]
        except _PatternTimeout:
            return []
        finally:
            _deadline.reset(token)

    def _errors(self, args: dict[str, Any]) -> list[FieldError]:
        out: list[FieldError] = []
        token = _deadline.set(time.monotonic() + PATTERN_BUDGET_S)
        try:
            for e in self._validator.iter_errors(args):
                out.extend(_field_errors(e))
        except _PatternTimeout as exc:
            return [
                FieldError(
                    "",
                    f"the arguments could not be checked within {PATTERN_BUDGET_S:g} s: matching "
                    f"the schema's pattern {str(exc)[:200]!r} took too long; send shorter or "
                    "simpler strings",
                )
            ]
        except RecursionError:
            return [
                FieldError(
                    "",
                    "the arguments could not be checked: the tool's input schema refers to itself "
                    "without end (a $ref cycle); the tool cannot be called until its toolbox fixes "
                    "its schema",
                )
            ]
        except Exception as exc:
            return [
                FieldError(
                    "",
                    f"the arguments could not be checked against the tool's input schema "
                    f"({type(exc).__name__}: {str(exc)[:300]}); the tool cannot be called until "
                    "its toolbox fixes its schema",
                )
            ]
        finally:
            _deadline.reset(token)
        return sorted(out, key=self._schema_order)

    def _schema_order(self, error: FieldError) -> tuple[int, str, str]:
        """The seed's report lists problems in the schema's order: by the top-level property's place in
        ``properties`` (properties the schema does not name after them), then path and message."""
        head = re.split(r"[.\[]", error.path, maxsplit=1)[0]
        return self._ranks.get(head, len(self._ranks)), error.path, error.message
