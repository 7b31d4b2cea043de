"""Hostile schemas and arguments never raise out of :class:`ArgumentValidator` (hypothesis, bounded examples).

Schemas come from workers, arguments from agents: compiling a schema either succeeds or raises ``SchemaError``, and
checking arguments against a compiled one returns a list, whatever either holds.
"""

from __future__ import annotations

import os
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supervisor.tools._validation import ArgumentValidator, SchemaError


def _examples(default: int) -> int:
    """Hypothesis examples: ``default`` in the normal suite, more with ``AGENTS_SUPERVISE_FUZZ_EXAMPLES`` (the long
    mode of ``scripts/chaos fuzz``)."""
    return int(os.environ.get("AGENTS_SUPERVISE_FUZZ_EXAMPLES") or default)


_KEYWORDS = [
    "$schema",
    "$ref",
    "$id",
    "$defs",
    "$anchor",
    "$dynamicRef",
    "type",
    "properties",
    "required",
    "enum",
    "const",
    "items",
    "prefixItems",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "pattern",
    "patternProperties",
    "additionalProperties",
    "minimum",
    "maximum",
    "format",
    "dependentSchemas",
    "unevaluatedProperties",
    "minLength",
    "multipleOf",
]
_REFS = st.sampled_from(["#", "#/$defs/a", "#/$defs/b", "#/properties/x", "http://x.test/s", "urn:x", "#a", "", "%"])
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    _REFS,
    st.sampled_from(["object", "string", "integer", "^(a|a)*$", "["]),
)


def _json(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.dictionaries(st.one_of(st.sampled_from(_KEYWORDS), st.text(max_size=4)), inner, max_size=5),
        ),
        max_leaves=30,
    )


SCHEMAS = st.dictionaries(st.sampled_from(_KEYWORDS), _json(_SCALARS), max_size=6)
ARGS = st.dictionaries(st.text(max_size=4), _json(_SCALARS), max_size=4)


@pytest.mark.slow
@settings(max_examples=_examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=SCHEMAS, args=st.lists(ARGS, max_size=3))
def test_any_schema_compiles_or_is_refused_and_checking_never_raises(
    schema: dict[str, Any], args: list[dict[str, Any]]
) -> None:
    try:
        validator = ArgumentValidator(schema)
    except SchemaError as exc:
        refusal = str(exc)
        assert refusal.startswith(("invalid input schema", "unevaluatedProperties")), refusal
        return
    for each in args:
        errors = validator.errors(each)
        assert isinstance(errors, list)
        assert all(isinstance(e.message, str) for e in errors)


def test_the_known_crashers_are_named_refusals() -> None:
    for schema, why in [
        ({"$schema": []}, "$schema must be a string"),
        ({"$schema": 1}, "$schema must be a string"),
        ({"$schema": True}, "$schema must be a string"),
        ({"$ref": "#"}, "refers to itself"),
        ({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}, "refers to itself"),
        ({"$ref": "http://x.test/s"}, "Unresolvable"),
    ]:
        with pytest.raises(SchemaError, match=re.escape(why)):
            ArgumentValidator(schema)
