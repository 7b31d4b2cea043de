"""The fast check of a tool's argument schema (``supervisor/tools/_fast_schema.py``): it accepts only what jsonschema
accepts (hypothesis: random schemas of its subset and random arguments), decides the common cases itself, and leaves
the rest (errors, shapes outside its subset) to jsonschema, whose report the caller then gets unchanged."""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema.validators import validator_for

from supervisor.tools._fast_schema import compile_fast
from supervisor.tools._validation import ArgumentValidator

_EXAMPLES = int(os.environ.get("AGENTS_SUPERVISE_FUZZ_EXAMPLES") or 300)

BASH = {"type": "object", "properties": {"v": {"type": "string"}}, "required": ["v"], "additionalProperties": False}
MCP = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {
        "path": {"type": "string", "description": "where", "minLength": 1, "maxLength": 8},
        "count": {"type": "integer", "minimum": 0, "maximum": 10},
        "mode": {"type": "string", "enum": ["a", "b"]},
        "flag": {"type": ["boolean", "null"]},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2},
        "nested": {"type": "object", "properties": {"x": {"type": "string"}}},
    },
    "required": ["path"],
    "additionalProperties": False,
}


def _jsonschema_accepts(schema: dict[str, Any], args: dict[str, Any]) -> bool:
    return not list(validator_for(schema)(schema).iter_errors(args))


def test_the_common_cases_are_decided_without_jsonschema() -> None:
    bash = compile_fast(BASH)
    assert bash is not None
    assert bash({"v": "hello"})
    assert not bash({})  # required missing
    assert not bash({"v": "x", "w": 1})  # an extra under additionalProperties: false
    assert not bash({"v": 1})
    mcp = compile_fast(MCP)
    assert mcp is not None
    assert mcp({"path": "/x", "count": 3, "mode": "a", "flag": None, "tags": ["t"]})
    assert mcp({"path": "/2345678", "count": 0, "flag": True, "tags": ["t", "u"]})  # every bound, at the bound
    assert mcp({"path": "/", "count": 10})
    for wrong in (
        {"path": ""},  # minLength
        {"path": "/123456789"},  # maxLength
        {"path": "/x", "count": -1},  # minimum
        {"path": "/x", "tags": []},  # minItems
        {"path": "/x", "count": 11},  # maximum
        {"path": "/x", "count": True},  # a boolean is no integer
        {"path": "/x", "count": 1.0},  # a float: left to jsonschema (which takes 1.0 as an integer)
        {"path": "/x", "mode": "c"},  # not in the enum
        {"path": "/x", "tags": ["a", "b", "c"]},  # maxItems
        {"path": "/x", "tags": [1]},  # items
        {"path": "/x", "nested": {"x": "y"}},  # outside the subset: left to jsonschema
    ):
        assert not mcp(wrong), wrong
    open_ended = compile_fast({**BASH, "additionalProperties": True})
    assert open_ended is not None and open_ended({"v": "x", "w": [1]})


def test_schemas_outside_the_subset_compile_to_none() -> None:
    assert compile_fast({"type": "object", "anyOf": [{"required": ["a"]}]}) is None
    assert compile_fast({"type": "array"}) is None
    assert compile_fast({**BASH, "$schema": "http://json-schema.org/draft-03/schema#"}) is None
    assert compile_fast({**BASH, "additionalProperties": {"type": "string"}}) is None
    assert compile_fast({"type": "object", "$ref": "#/definitions/x"}) is None


def test_the_validator_gives_jsonschemas_report_when_the_fast_check_does_not_accept() -> None:
    v = ArgumentValidator(MCP)
    assert v.errors({"path": "/x", "count": 2}) == []
    assert [(e.path, e.message) for e in v.errors({"path": "/x", "count": "2", "extra": 1})] == [
        ("count", "Expected integer but got string"),
        ("extra", "Unknown property"),
    ]
    assert v.errors({"path": "/x", "count": 1.0}) == []  # jsonschema's answer, not the fast check's
    assert v.errors({"path": "/x", "nested": {"x": "y"}}) == []


_SIMPLE_TYPES = ["string", "integer", "number", "boolean", "null", "array"]
_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(-5, 5, allow_nan=False) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=2),
    max_leaves=6,
)


@st.composite
def _property_schemas(draw: st.DrawFn) -> dict[str, Any]:
    schema: dict[str, Any] = {}
    if draw(st.booleans()):
        names = draw(st.lists(st.sampled_from(_SIMPLE_TYPES), min_size=1, max_size=3, unique=True))
        schema["type"] = names[0] if len(names) == 1 and draw(st.booleans()) else names
    if draw(st.booleans()):
        schema["enum"] = draw(st.lists(st.text(max_size=3), min_size=1, max_size=3, unique=True))
    for key in ("minLength", "maxLength", "minItems", "maxItems"):
        if draw(st.integers(0, 4)) == 0:
            schema[key] = draw(st.integers(0, 3))
    for key in ("minimum", "maximum"):
        if draw(st.integers(0, 3)) == 0:
            schema[key] = draw(st.integers(-3, 3) | st.floats(-3, 3, allow_nan=False))
    if schema.get("type") in ("array", ["array"]) and draw(st.booleans()):
        schema["items"] = {"type": draw(st.sampled_from(_SIMPLE_TYPES[:5]))}
    if draw(st.booleans()):
        schema["description"] = "d"
    return schema


@st.composite
def _schemas(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=4, unique=True))
    schema: dict[str, Any] = {"type": "object", "properties": {n: draw(_property_schemas()) for n in names}}
    if names and draw(st.booleans()):
        schema["required"] = draw(st.lists(st.sampled_from([*names, "z"]), max_size=3, unique=True))
    if draw(st.booleans()):
        schema["additionalProperties"] = draw(st.booleans())
    if draw(st.booleans()):
        schema["$schema"] = draw(
            st.sampled_from(
                [
                    "http://json-schema.org/draft-04/schema#",
                    "http://json-schema.org/draft-07/schema#",
                    "https://json-schema.org/draft/2020-12/schema",
                ]
            )
        )
    return schema


@settings(max_examples=_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_schemas(), st.dictionaries(st.sampled_from(["a", "b", "c", "d", "e"]), _values, max_size=5))
def test_what_the_fast_check_accepts_jsonschema_accepts(schema: dict[str, Any], args: dict[str, Any]) -> None:
    try:
        validator_for(schema).check_schema(schema)
    except Exception:
        return  # not a schema a tool could list (ArgumentValidator refuses it before any check)
    fast = compile_fast(schema)
    assert fast is not None  # every schema drawn is of the subset's top level
    if fast(args):
        assert _jsonschema_accepts(schema, args), (schema, args)
