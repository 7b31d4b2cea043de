"""The regexes of an input schema matched within a time budget: ``pattern``, ``patternProperties`` and the
``additionalProperties`` that depends on them, as jsonschema keywords that match with the ``regex`` module's timeout
(:func:`bounded` extends a draft's validator class with them). Schemas come from workers (untrusted) and strings from
agents (untrusted): a catastrophic pattern ends in :class:`PatternTimeout`, never holds the supervisor's thread."""

from __future__ import annotations

import contextlib
import contextvars
import re
import time
from typing import TYPE_CHECKING, Any

import regex
from jsonschema import _keywords
from jsonschema import exceptions as js_exceptions
from jsonschema.validators import extend

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["PATTERN_BUDGET_S", "PatternTimeout", "bounded", "pattern_budget", "search"]

#: Time one validation may spend matching the schema's regexes (``pattern``, ``patternProperties``). Schemas come
#: from workers (untrusted) and strings from agents (untrusted): ``^(a+)+$`` against 30 ``a`` and a ``b`` would
#: hold Python's ``re`` for minutes on the supervisor's only thread. The ``regex`` module checks a timeout while
#: it matches.
PATTERN_BUDGET_S = 0.25
_DEADLINE: contextvars.ContextVar[float] = contextvars.ContextVar("pattern_DEADLINE", default=0.0)


class PatternTimeout(Exception):
    """Matching the schema's regexes took longer than :data:`PATTERN_BUDGET_S`."""


def search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` matches somewhere in ``text``, within what is left of the budget; raises
    :class:`PatternTimeout` past it (outside :func:`pattern_budget`, at once)."""
    left = _DEADLINE.get() - time.monotonic()
    if left <= 0:
        raise PatternTimeout(pattern)
    try:
        return regex.search(pattern, text, timeout=left) is not None
    except TimeoutError as exc:
        raise PatternTimeout(pattern) from exc
    except regex.error:
        return bool(re.search(pattern, text))  # what jsonschema itself would do (already compiled by check_schema)


def _pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Iterator[js_exceptions.ValidationError]:
    if validator.is_type(instance, "string") and not search(patrn, instance):
        yield js_exceptions.ValidationError(f"{instance!r} does not match {patrn!r}")


def _pattern_properties(
    validator: Any, pattern_properties: dict[str, Any], instance: Any, schema: Any
) -> Iterator[js_exceptions.ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in pattern_properties.items():
        for k, v in instance.items():
            if search(pattern, k):
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
    extras = sorted(k for k in instance if k not in known and not any(search(p, k) for p in patterns))
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


_EXTENDED: dict[Any, Any] = {}


def bounded(cls: Any) -> Any:
    """``cls`` with the time-bounded keywords (made once per draft: ``extend`` builds a class, about 1.5 ms)."""
    extended = _EXTENDED.get(cls)
    if extended is None:
        extended = _EXTENDED.setdefault(cls, extend(cls, _BOUNDED))  # type: ignore[no-untyped-call]  # no stubs
    return extended


@contextlib.contextmanager
def pattern_budget() -> Iterator[None]:
    """Within the block, the schema's regexes may take :data:`PATTERN_BUDGET_S` together; then
    :class:`PatternTimeout` is raised by the match that passes it."""
    token = _DEADLINE.set(time.monotonic() + PATTERN_BUDGET_S)
    try:
        yield
    finally:
        _DEADLINE.reset(token)
