"""OpenAPI toolbox, pure parts, on every fixture spec: tool names, schemas valid for the supervisor's validator,
``$ref`` resolution (local, relative files, cycles), the fixtures' real-world defects as load errors, requests."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from toolboxes.openapi import Resolver, SpecError, build_operations, build_request, load_spec, operation_name

FIXTURES = Path("/work/shared/fixtures/openapi")
ALL_SPECS = [
    *sorted(p for p in FIXTURES.glob("*.*") if p.suffix in {".json", ".yaml", ".yml"}),
    FIXTURES / "v2-petstore-separate" / "spec" / "swagger.json",
    FIXTURES / "v2-circular" / "circular.yaml",
]


def _ops(path: Path) -> tuple[dict, list[dict[str, str]], Resolver]:
    resolver = load_spec(str(path))
    ops, errors = build_operations(resolver, "tb")
    return {op.tool: op for op in ops}, errors, resolver


@pytest.mark.parametrize("path", ALL_SPECS, ids=lambda p: p.name)
def test_every_fixture_loads_with_valid_schemas(path: Path) -> None:
    ops, _errors, _r = _ops(path)
    for op in ops.values():
        jsonschema.Draft202012Validator.check_schema(op.input_schema)
        assert op.tool.startswith("openapi_tb_")
        assert '"$ref":' not in json.dumps(op.input_schema)  # every ref inlined or cut (notes may name one)
        assert op.input_schema["additionalProperties"] is False


def test_names_follow_the_seeds_normalisation() -> None:
    """The seed: ``pets.getById`` -> ``pets_getById``, ``/users/{id}/posts`` -> ``_users__id__posts``; the method in
    front only where path-derived names would collide."""
    assert operation_name("get", "/pets/{id}", "pets.getById") == "pets_getById"
    assert operation_name("get", "/users/{id}/posts", None) == "_users__id__posts"
    assert operation_name("get", "/users/{id}/posts", None, with_method=True) == "get__users__id__posts"
    ops, _, _ = _ops(FIXTURES / "v3.0-petstore.yaml")
    assert sorted(ops) == ["openapi_tb_createPets", "openapi_tb_listPets", "openapi_tb_showPetById"]
    ops, _, _ = _ops(FIXTURES / "v2-circular" / "circular.yaml")
    assert sorted(ops) == [
        "openapi_tb__parent",
        "openapi_tb__person",
        "openapi_tb__pet",
        "openapi_tb__thing",
    ]
    ok = {"responses": {"200": {"description": "ok"}}}
    doc = {
        "openapi": "3.0.0",
        "info": {"title": "t", "version": "1"},
        "paths": {
            "/users/{id}/posts": {
                "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}],
                "get": ok,
                "post": ok,
            },
            "/pets/{id}": {
                "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}],
                "get": {**ok, "operationId": "pets.getById"},
            },
            "/a.b": {"get": ok},
            "/a_b": {"get": ok},
            "/health": {"get": ok},
        },
    }
    names, _ = build_operations(Resolver(doc, "http://h/spec.json"), "tb")
    assert [o.tool for o in names] == [
        "openapi_tb_get__users__id__posts",  # GET and POST of one path: the seed's names would collide
        "openapi_tb_post__users__id__posts",
        "openapi_tb_pets_getById",
        "openapi_tb_get__a_b",  # /a.b and /a_b normalise alike
        "openapi_tb_get__a_b_2",
        "openapi_tb__health",
    ]


@pytest.mark.parametrize(
    ("json_file", "yaml_file"),
    [
        ("v2-petstore.json", "v2-petstore.yaml"),
        ("v3.0-petstore.json", "v3.0-petstore.yaml"),
        ("v3.0-petstore-expanded.json", "v3.0-petstore-expanded.yaml"),
        ("v3.0-callback-example.json", "v3.0-callback-example.yaml"),
    ],
)
def test_json_and_yaml_give_the_same_tools(json_file: str, yaml_file: str) -> None:
    a, _, _ = _ops(FIXTURES / json_file)
    b, _, _ = _ops(FIXTURES / yaml_file)
    assert {k: v.input_schema for k, v in a.items()} == {k: v.input_schema for k, v in b.items()}


def test_swagger2_parameters_and_bodies() -> None:
    ops, _, _ = _ops(FIXTURES / "v2-petstore-expanded.yaml")
    find = ops["openapi_tb_findPets"].input_schema
    assert find["properties"]["tags"]["type"] == "array"
    assert find["properties"]["limit"] == {
        "type": "integer",
        "format": "int32",
        "description": "maximum number of results to return",
    }
    add = ops["openapi_tb_addPet"].input_schema
    assert add["required"] == ["body"]
    body = add["properties"]["body"]
    assert body["required"] == ["name"]
    assert set(body["properties"]) == {"name", "tag"}


def test_openapi3_request_bodies_parameters_and_nullable() -> None:
    ops, _, _ = _ops(FIXTURES / "v3.0-petstore-expanded.yaml")
    add = ops["openapi_tb_addPet"]
    assert add.body is not None and add.body.media_type == "application/json" and add.body.required
    assert add.input_schema["properties"]["body"]["required"] == ["name"]
    ops, _, _ = _ops(FIXTURES / "v3.0-uspto.yaml")
    search = next(op for op in ops.values() if op.method == "POST")
    assert search.body is not None and search.body.media_type == "application/x-www-form-urlencoded"
    assert search.input_schema["properties"]["body"]["required"] == ["criteria"]


def test_external_relative_file_refs_are_followed() -> None:
    ops, errors, _ = _ops(FIXTURES / "v2-petstore-separate" / "spec" / "swagger.json")
    assert errors == []
    find = ops["openapi_tb_findPets"].input_schema["properties"]
    assert find["tags"]["type"] == "array" and find["limit"]["format"] == "int32"  # parameters.json#/tagsParam
    body = ops["openapi_tb_addPet"].input_schema["properties"]["body"]
    pet, extra = body["allOf"]  # NewPet.json = Pet.json + required name
    assert pet["required"] == ["id", "name"] and extra["required"] == ["name"]
    jsonschema.Draft202012Validator.check_schema(body)


def test_cycles_are_cut_with_a_note() -> None:
    resolver = load_spec(str(FIXTURES / "v2-circular" / "circular.yaml"))
    base = resolver.location
    person = resolver.schema({"$ref": "#/definitions/person"}, base)
    assert person["properties"]["name"] == {"type": "string"}
    assert "recursive $ref" in person["properties"]["spouse"]["description"]
    parent = resolver.schema({"$ref": "#/definitions/parent"}, base)
    child = parent["properties"]["children"]["items"]
    assert child["title"] == "child"
    assert "recursive $ref" in child["properties"]["parents"]["items"]["description"]
    pet = resolver.schema({"$ref": "#/definitions/pet"}, base)
    assert pet["properties"]["species"]["enum"] == ["cat", "dog", "bird", "fish"]
    thing = resolver.schema({"$ref": "#/definitions/thing"}, base)
    assert "loops onto itself" in thing["description"]
    jsonschema.Draft202012Validator.check_schema(person)


def test_large_cyclic_spec_stays_bounded() -> None:
    ops, errors, _ = _ops(FIXTURES / "v3.0-xero_accounting.yaml")
    assert len(ops) == 235
    assert errors == []
    create = ops["openapi_tb_createInvoices"].input_schema
    assert create["properties"]["xero-tenant-id"]["type"] == "string"  # #/components/parameters/requiredHeader
    assert "xero-tenant-id" in create["required"]
    assert max(len(json.dumps(op.input_schema)) for op in ops.values()) < 200_000
    text = json.dumps(ops["openapi_tb_createPayment"].input_schema)
    assert "recursive $ref" in text or "left out" in text


def test_real_world_defects_are_clear_load_errors() -> None:
    ops, errors, _ = _ops(FIXTURES / "v2-petstore-with-fake-endpoints-models-for-testing.yaml")
    assert len(ops) > 30
    messages = " ".join(e["message"] for e in errors)
    assert "'#/definitions/EnumTest' points to nothing" in messages
    ops, errors, _ = _ops(FIXTURES / "v3.0-spotify-official-open-api.yml")
    assert len(ops) == 96
    assert len(errors) == 1
    assert "policies.yaml" in errors[0]["message"] and "No such file" in errors[0]["message"]
    ops, errors, _ = _ops(FIXTURES / "v3.1-webhook-example.yaml")
    assert ops == {} and "no paths" in errors[0]["message"]


def test_unusable_specs_are_spec_errors(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("openapi: [unclosed\n")
    with pytest.raises(SpecError, match="not valid JSON or YAML"):
        load_spec(str(tmp_path / "bad.yaml"))
    (tmp_path / "other.json").write_text('{"hello": "world"}')
    with pytest.raises(SpecError, match=r"not a Swagger 2\.0 or OpenAPI"):
        build_operations(load_spec(str(tmp_path / "other.json")), "tb")
    with pytest.raises(SpecError, match="cannot read the spec"):
        load_spec(str(tmp_path / "missing.json"))


def test_a_url_spec_never_reads_files() -> None:
    doc = json.loads((FIXTURES / "v2-petstore-separate" / "spec" / "swagger.json").read_text())
    resolver = Resolver(doc, "http://127.0.0.1:9/swagger.json")
    ops, errors = build_operations(resolver, "tb")
    assert "openapi_tb_findPets" not in {op.tool for op in ops}  # its parameters are in another document
    assert any("follows only local refs" in e["message"] for e in errors)


def test_requests_encode_values_and_set_auth() -> None:
    ops, _, _ = _ops(FIXTURES / "v2-petstore-with-fake-endpoints-models-for-testing.yaml")
    op = next(o for o in ops.values() if o.method == "GET" and o.path == "/fake" and o.params)
    props = op.input_schema["properties"]
    args = {"enum_query_string_array": [">", "$"], "enum_header_string": "-efg"}
    args = {k: v for k, v in args.items() if k in props}
    req = build_request(op, args, "http://h:1/base/", {"X-Fixed": "1"}, "tok")
    assert req.url.startswith("http://h:1/base/fake")
    assert req.headers["Authorization"] == "Bearer tok" and req.headers["X-Fixed"] == "1"
    if "enum_query_string_array" in args:
        assert "enum_query_string_array=%3E%2C%24" in req.url  # csv, each item encoded
