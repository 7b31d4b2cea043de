"""The validation report (SPEC.md section 3): messages of ``anyOf``/``oneOf`` told for the branch the value was meant
for, and patterns told in the schema's own words."""

from __future__ import annotations

from supervisor.tools import ArgumentValidator, FieldError, ValidationConfig, relax


def _errors(schema: dict, args: dict) -> list[FieldError]:
    return ArgumentValidator({"type": "object", "properties": schema}).errors(args)


ROW = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def test_an_anyof_reports_the_errors_of_the_branch_of_the_values_type() -> None:
    schema = {"row": {"anyOf": [ROW, {"type": "array", "items": ROW}]}}
    assert _errors(schema, {"row": {}}) == [FieldError("row.name", "Required property missing")]
    assert _errors(schema, {"row": [{"name": "a"}, {"name": 1}]}) == [
        FieldError("row[1].name", "Expected string but got integer")
    ]
    assert _errors(schema, {"row": 3}) == [FieldError("row", "Expected array or object but got integer")]
    one_of = {"n": {"oneOf": [{"type": "integer", "minimum": 5}, {"type": "string", "maxLength": 2}]}}
    assert _errors(one_of, {"n": "abc"})[0].path == "n" and "too long" in _errors(one_of, {"n": "abc"})[0].message
    assert _errors(one_of, {"n": 2})[0].message.startswith("2 is less than the minimum")


def test_a_pattern_is_told_by_the_schemas_description_when_it_has_one() -> None:
    described = {"d": {"type": "string", "pattern": "^a", "description": "a word starting with a"}}
    assert _errors(described, {"d": "b"}) == [FieldError("d", "Invalid value 'b': expected a word starting with a")]
    bare = {"d": {"type": "string", "pattern": "^a"}}
    assert _errors(bare, {"d": "b"}) == [FieldError("d", "Invalid value 'b': does not match the pattern '^a'")]


# --- the seed's ValidationConfig (allowExtraProperties, strictMode) ----------------------------------------------

ARGS = {
    "type": "object",
    "properties": {
        "count": {"type": "integer"},
        "ratio": {"type": "number"},
        "on": {"type": "boolean"},
        "inner": {"type": "object", "properties": {"n": {"type": "integer"}}, "additionalProperties": False},
    },
    "additionalProperties": False,
}


def test_the_defaults_mend_nothing() -> None:
    v = ArgumentValidator(ARGS)
    given = {"count": "42", "extra": 1}
    out = relax(v, given, ValidationConfig())
    assert out.args is given and [e.path for e in out.errors] == ["count", "extra"] and out.notes == []


def test_allow_extra_properties_leaves_them_out_of_what_the_tool_gets() -> None:
    v = ArgumentValidator(ARGS)
    given = {"count": 1, "extra": 1, "inner": {"n": 2, "more": 3}}
    out = relax(v, given, ValidationConfig(allow_extra_properties=True))
    assert out.errors == [] and out.args == {"count": 1, "inner": {"n": 2}}
    assert given == {"count": 1, "extra": 1, "inner": {"n": 2, "more": 3}}  # the caller's arguments unchanged
    assert sorted(out.notes) == [
        "extra: not a property of this tool; left out (allowExtraProperties)",
        "inner.more: not a property of this tool; left out (allowExtraProperties)",
    ]
    # what is still wrong is reported, strictly
    bad = relax(v, {"count": "x", "extra": 1}, ValidationConfig(allow_extra_properties=True))
    assert bad.errors == [FieldError("count", "Expected integer but got string")]


def test_strict_mode_off_reads_strings_that_spell_the_expected_value() -> None:
    v = ArgumentValidator(ARGS)
    out = relax(
        v, {"count": "42", "ratio": "0.5", "on": "true", "inner": {"n": " 7 "}}, ValidationConfig(strict_mode=False)
    )
    assert out.errors == [] and out.args == {"count": 42, "ratio": 0.5, "on": True, "inner": {"n": 7}}
    assert "count: the string '42' was read as the integer 42 (strictMode off)" in out.notes
    for wrong in ({"count": "4.5"}, {"count": "forty"}, {"on": "yes"}, {"ratio": "nan"}, {"ratio": "1e999"}):
        assert relax(v, wrong, ValidationConfig(strict_mode=False)).errors, wrong
    strict = relax(v, {"count": "42"}, ValidationConfig(strict_mode=True, allow_extra_properties=True))
    assert strict.errors == [FieldError("count", "Expected integer but got string")]
