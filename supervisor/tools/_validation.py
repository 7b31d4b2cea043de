"""Argument validation against a tool's JSON schema, reported in the seed's text form (SPEC.md section 3).

The schema's regexes are matched within a time budget (:mod:`._bounded_patterns`); the errors are worded by
:mod:`._validation_errors`; arguments of the common shape are passed by :mod:`._fast_schema` without jsonschema.

::

    Tool call validation failed for 'NAME' with N errors:

    1. filters.status: Invalid enum value: pending. Allowed: active, inactive
    2. user.age: Expected number but got string

    Please correct these issues and try again.
"""

from __future__ import annotations

import re
from typing import Any

import jsonschema
from jsonschema import exceptions as js_exceptions
from jsonschema.validators import validator_for

from ._bounded_patterns import PATTERN_BUDGET_S, PatternTimeout, bounded, pattern_budget, search
from ._fast_schema import compile_fast
from ._validation_errors import FieldError, field_errors, format_validation_errors, type_name

__all__ = ["ArgumentValidator", "FieldError", "SchemaError", "format_validation_errors"]


class SchemaError(ValueError):
    """A tool declared an input schema that is not a valid JSON Schema (the tool is left out, with this reason)."""


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
            self._validator = bounded(cls)(schema)
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
        try:
            with pattern_budget():
                for _ in self._validator.iter_errors(args):
                    pass
        except PatternTimeout:
            return None  # a question of the arguments, reported by errors()
        except RecursionError:
            return "it refers to itself without end (a $ref cycle that never reaches a value)"
        except Exception as exc:  # an unresolvable $ref, a broken keyword value jsonschema did not check
            return f"it cannot be applied ({type(exc).__name__}: {str(exc)[:300]})"
        return None

    def errors(self, args: Any) -> list[FieldError]:
        """Every problem with ``args``, in a stable order (empty when valid). Never raises."""
        if not isinstance(args, dict):
            return [FieldError("", f"Expected object but got {type_name(args)}")]
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
        try:
            with pattern_budget():
                return list(self._validator.iter_errors(args))
        except Exception:  # PatternTimeout, RecursionError, a schema jsonschema cannot apply: errors() says which
            return None

    def extra_keys(self, error: js_exceptions.ValidationError) -> list[str]:
        """The keys an ``additionalProperties: false`` error of :meth:`raw_errors` is about (bounded in time as
        :meth:`errors` is; ``[]`` when matching the schema's ``patternProperties`` takes too long)."""
        if not isinstance(error.instance, dict) or not isinstance(error.schema, dict):
            return []
        known = error.schema.get("properties") or {}
        patterns = error.schema.get("patternProperties") or {}
        try:
            with pattern_budget():
                return [k for k in error.instance if k not in known and not any(search(p, k) for p in patterns)]
        except PatternTimeout:
            return []

    def _errors(self, args: dict[str, Any]) -> list[FieldError]:
        out: list[FieldError] = []
        try:
            with pattern_budget():
                for e in self._validator.iter_errors(args):
                    out.extend(field_errors(e))
        except PatternTimeout as exc:
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
        return sorted(out, key=self._schema_order)

    def _schema_order(self, error: FieldError) -> tuple[int, str, str]:
        """The seed's report lists problems in the schema's order: by the top-level property's place in
        ``properties`` (properties the schema does not name after them), then path and message."""
        head = re.split(r"[.\[]", error.path, maxsplit=1)[0]
        return self._ranks.get(head, len(self._ranks)), error.path, error.message
