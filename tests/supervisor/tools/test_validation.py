"""The validation report (SPEC.md section 3): messages of ``anyOf``/``oneOf`` told for the branch the value was meant
for, and patterns told in the schema's own words."""

from __future__ import annotations

from supervisor.tools import ArgumentValidator, FieldError


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
