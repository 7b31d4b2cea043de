"""The pool of compiled schemas a starting worker reuses (``supervisor/tools/_schema_pool.py``). Pure."""

from __future__ import annotations

from supervisor.tools import CompiledSchema, SchemaPool, compile_schema, fingerprint, prepare_tool_list

DATE = {"type": "object", "properties": {}, "additionalProperties": False}
NAMED = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def _hello(*schemas: dict) -> dict:
    tools = [{"name": f"t{i}", "description": "d", "input_schema": s} for i, s in enumerate(schemas)]
    return {"t": "hello", "tools": tools}


def test_a_pooled_schema_is_reused_by_the_next_list_and_still_validates() -> None:
    pool = SchemaPool()
    first = prepare_tool_list(_hello(DATE, NAMED), {})
    pool.add(first.schemas)
    assert len(pool) == 2
    second = prepare_tool_list(_hello(NAMED), {s.fingerprint: s for s in pool.schemas()})
    assert second.schemas[0] is first.schemas[1]  # not compiled again
    validator = second.schemas[0].validator
    assert validator is not None and validator.errors({}) and not validator.errors({"name": "x"})


def test_retry_and_missing_schemas_are_not_pooled_and_retain_keeps_only_current_ones() -> None:
    pool = SchemaPool()
    left_out = CompiledSchema(fingerprint(DATE), None, "left out for want of time", retry=True)
    pool.add([left_out, None])
    assert len(pool) == 0
    date, named = compile_schema(DATE), compile_schema(NAMED)
    pool.add([date, named, date])
    assert len(pool) == 2
    pool.retain([named, None])
    assert pool.schemas() == [named]
