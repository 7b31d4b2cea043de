"""PostgREST toolbox: tools from PostgREST's recorded Swagger 2.0 output (no PostgREST server can be installed here:
Debian has PostgreSQL but no ``postgrest`` package, and PyPI/npm carry only clients), requests checked against the
query grammar, and end to end through ``Supervisor.open`` against a recording server on 127.0.0.1 that serves the
recorded description."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlsplit

import jsonschema
import pytest

from supervisor import Supervisor
from supervisor.tools import ArgumentValidator
from tests._policies import agent, write_policy
from tests.toolboxes._api_server import Answer, ApiServer, Seen, serve_api
from toolboxes.openapi import Resolver
from toolboxes.postgrest import FILTER_PATTERN, TableTool, build_request, build_tools

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

FIXTURES = Path("/work/shared/fixtures/postgrest")
TODOS = json.loads((FIXTURES / "supabase-mcp-todos.swagger.json").read_text())


def _with_rpc() -> dict:
    """The todos document plus ``/rpc/varied_arguments_openapi`` as PostgREST's own tests expect it."""
    doc = copy.deepcopy(TODOS)
    fragments = json.loads((FIXTURES / "postgrest-test-openapi-expected-fragments.json").read_text())["fragments"]
    get_args = post_schema = None
    for f in fragments:
        for e in f["expectations"]:
            if f["it"].endswith("query parameters for arguments in the get path item") and e["binding"] == "args":
                get_args = e["json"]
            if f["it"].endswith("body schema for arguments in the post path item") and e["binding"] == "args":
                post_schema = e["json"]
    assert get_args and post_schema
    doc["paths"]["/rpc/varied_arguments_openapi"] = {
        "get": {"parameters": get_args, "summary": "An RPC function", "responses": {"200": {"description": "OK"}}},
        "post": {
            "parameters": [
                {"name": "args", "in": "body", "required": True, "schema": post_schema},
                {"$ref": "#/parameters/preferParams"},
            ],
            "responses": {"200": {"description": "OK"}},
        },
    }
    return doc


#: The seed's PostgREST argument example (seed 004, "PostgREST toolbox"), verbatim.
SEED_ARGUMENTS = {
    "filters": {"column_name": "filter_value"},
    "subset": {"limit": 10, "offset": 0, "columns": "id,name,email"},
    "ranking": {"order": "created_at.desc"},
    "body": {"name": "New Item", "value": 42},
}
#: The columns the seed's example names, as PostgREST describes them (column -> (type, format)).
ITEMS = {
    "id": ("integer", "bigint"),
    "column_name": ("string", "text"),
    "name": ("string", "text"),
    "email": ("string", "text"),
    "value": ("integer", "integer"),
    "created_at": ("string", "timestamp with time zone"),
}


def with_items(doc: dict) -> dict:
    """``doc`` plus a table ``items`` with the seed example's columns, described as PostgREST describes ``todos``
    in the recorded document (same parameters, same ``$ref``s; ``name`` is NOT NULL without a default)."""
    doc = copy.deepcopy(doc)

    def renamed(value: object) -> object:
        text = json.dumps(value).replace("rowFilter.todos.", "rowFilter.items.").replace("body.todos", "body.items")
        return json.loads(text.replace("#/definitions/todos", "#/definitions/items"))

    todos_path = doc["paths"]["/todos"]
    item_path: dict = {}
    for method, op in todos_path.items():
        op = renamed(op)
        params = []
        for p in op["parameters"]:
            ref = p.get("$ref", "")
            if ref.startswith("#/parameters/rowFilter.items."):
                if ref.endswith(".id"):  # one filter per column of items, in the table's order
                    params += [{"$ref": f"#/parameters/rowFilter.items.{c}"} for c in ITEMS]
                continue
            params.append(p)
        item_path[method] = {**op, "parameters": params, "summary": "Items", "tags": ["items"]}
    doc["paths"]["/items"] = item_path
    template = doc["parameters"]["rowFilter.todos.title"]
    for column, (_, fmt) in ITEMS.items():
        doc["parameters"][f"rowFilter.items.{column}"] = {**template, "name": column, "format": fmt}
    body = renamed(doc["parameters"]["body.todos"])
    doc["parameters"]["body.items"] = {**body, "name": "items", "description": "items"}
    doc["definitions"]["items"] = {
        "description": "Items",
        "required": ["name"],
        "properties": {c: {"format": f, "type": t} for c, (t, f) in ITEMS.items()},
        "type": "object",
    }
    return doc


def _tools(doc: dict, methods: list[str] | None) -> dict:
    tools, errors = build_tools(Resolver(doc, "http://127.0.0.1:3000/"), "db", methods)
    assert errors == []
    return {t.tool: t for t in tools}


def test_tool_names_per_listed_method_narrowed_by_allowed_methods() -> None:
    assert sorted(_tools(TODOS, ["GET"])) == ["postgrest_db_get_todos"]
    everything = [
        "postgrest_db_delete_todos",
        "postgrest_db_get_rpc_varied_arguments_openapi",
        "postgrest_db_get_todos",
        "postgrest_db_patch_todos",
        "postgrest_db_post_rpc_varied_arguments_openapi",
        "postgrest_db_post_todos",
    ]
    assert sorted(_tools(_with_rpc(), ["GET", "POST", "PATCH", "DELETE"])) == everything
    assert sorted(_tools(_with_rpc(), None)) == everything  # no AllowedMethods: every method the description lists
    only_reads = copy.deepcopy(TODOS)
    for method in ("post", "patch", "delete"):  # a role PostgREST lists reads only for (openapi-mode follow-privileges)
        del only_reads["paths"]["/todos"][method]
    assert sorted(_tools(only_reads, None)) == ["postgrest_db_get_todos"]


def test_schemas_follow_the_row_filters_and_definitions() -> None:
    tools = _tools(_with_rpc(), ["GET", "POST", "PATCH", "DELETE"])
    for t in tools.values():
        jsonschema.Draft202012Validator.check_schema(t.input_schema)
    get = tools["postgrest_db_get_todos"].input_schema["properties"]
    columns = {"id", "title", "description", "due_date", "is_completed", "user_id"}
    assert set(get["filters"]["properties"]) == columns | {"or", "and"}  # rowFilter.todos.* through $ref
    assert "(bigint)" in get["filters"]["properties"]["id"]["description"]
    assert set(get["subset"]["properties"]) == {"limit", "offset", "columns"}
    assert set(get["ranking"]["properties"]) == {"order"}
    post = tools["postgrest_db_post_todos"].input_schema
    row = post["properties"]["body"]["anyOf"][0]
    assert row["required"] == ["id", "title", "user_id"] and row["properties"]["is_completed"]["default"] is False
    delete = tools["postgrest_db_delete_todos"].input_schema
    assert delete["required"] == ["filters"] and delete["properties"]["filters"]["minProperties"] == 1
    patch = tools["postgrest_db_patch_todos"].input_schema
    assert "required" not in patch["properties"]["body"]
    rpc_get = tools["postgrest_db_get_rpc_varied_arguments_openapi"].input_schema["properties"]["args"]
    assert "double" in rpc_get["required"] and rpc_get["properties"]["integer"]["type"] == "integer"
    rpc_post = tools["postgrest_db_post_rpc_varied_arguments_openapi"].input_schema["properties"]["body"]
    assert rpc_post["properties"]["int_arr"] == {"type": "array", "format": "integer[]", "items": {"type": "integer"}}


def test_arguments_are_checked_against_the_grammar() -> None:
    schema = _tools(TODOS, ["GET", "DELETE"])
    v = jsonschema.Draft202012Validator(schema["postgrest_db_get_todos"].input_schema)
    for ok in ("eq.1", "not.is.null", "in.(1,2,3)", "like(any).{a*,b*}", "fts(english).cat", "gte.2024-01-01"):
        assert re.match(FILTER_PATTERN, ok), ok
        assert not list(v.iter_errors({"filters": {"title": ok}}))
    for bad in ("1", "equals.1", "eq1", "; drop table todos"):
        assert list(v.iter_errors({"filters": {"title": bad}})), bad
    assert list(v.iter_errors({"filters": {"nope": "eq.1"}}))  # not a column
    d = jsonschema.Draft202012Validator(schema["postgrest_db_delete_todos"].input_schema)
    assert list(d.iter_errors({})) and list(d.iter_errors({"filters": {}}))  # never a whole-table delete


def test_requests_follow_the_query_grammar_url_encoded() -> None:
    tools = _tools(_with_rpc(), ["GET", "POST", "PATCH", "DELETE"])
    req = build_request(
        tools["postgrest_db_get_todos"],
        {
            "filters": {"title": "like.*a b&c=d#%+*", "id": ["gte.1", "lt.10"], "or": "(is_completed.is.true,id.eq.3)"},
            "subset": {"limit": 5, "offset": 10, "columns": "id,title"},
            "ranking": {"order": "due_date.desc.nullslast"},
        },
        "http://127.0.0.1:3000/",
    )
    assert req.method == "GET"
    assert req.url == (
        "http://127.0.0.1:3000/todos?title=like.*a%20b%26c%3Dd%23%25%2B*&id=gte.1&id=lt.10"
        "&or=(is_completed.is.true,id.eq.3)&select=id,title&order=due_date.desc.nullslast"
        "&limit=5&offset=10"
    )
    assert parse_qsl(urlsplit(req.url).query)[0] == ("title", "like.*a b&c=d#%+*")
    req = build_request(tools["postgrest_db_post_todos"], {"body": [{"title": "a"}, {"title": "b"}]}, "http://h/")
    assert (req.method, req.url, json.loads(req.content or b"")) == (
        "POST",
        "http://h/todos",
        [{"title": "a"}, {"title": "b"}],
    )
    assert req.headers["Prefer"] == "return=representation"
    req = build_request(
        tools["postgrest_db_get_rpc_varied_arguments_openapi"],
        {"args": {"double": 1.5, "boolean": True, "varchar": "x y"}},
        "http://h",
    )
    assert req.url == "http://h/rpc/varied_arguments_openapi?double=1.5&boolean=true&varchar=x%20y"


def _report(tool: TableTool, args: dict) -> str:
    from supervisor.tools import ArgumentValidator, format_validation_errors

    return format_validation_errors(tool.tool, ArgumentValidator(tool.input_schema).errors(args))


def test_the_seeds_argument_example_is_a_patch_of_the_seeds_config() -> None:
    """The seed's config (no AllowedMethods) gets the write tools, and its four argument groups are one PATCH:
    ``body`` set on the first ``limit`` rows ``filters`` selects in ``order``, answering ``columns``."""
    tools = _tools(with_items(TODOS), None)
    patch = tools["postgrest_db_patch_items"]
    # the example's filter value is a placeholder: the report says what a filter value is and how to write one
    verbatim = _report(patch, SEED_ARGUMENTS)
    assert verbatim.startswith("Tool call validation failed for 'postgrest_db_patch_items' with 1 error:")
    assert "1. filters.column_name: Invalid value 'filter_value': expected operator.value: an operator" in verbatim
    assert "for equality write eq.<value>" in verbatim
    filled = {**SEED_ARGUMENTS, "filters": {"column_name": "eq.filter_value"}}
    assert ArgumentValidator(patch.input_schema).errors(filled) == []
    req = build_request(patch, filled, "http://localhost:3000")
    assert (req.method, req.url) == (
        "PATCH",
        "http://localhost:3000/items?column_name=eq.filter_value&select=id,name,email&order=created_at.desc"
        "&limit=10&offset=0",
    )
    assert json.loads(req.content or b"") == {"name": "New Item", "value": 42}
    assert req.headers["Prefer"] == "return=representation"
    # the same groups on a POST: what an insert does not take is named
    post = _report(tools["postgrest_db_post_items"], filled)
    for wrong in ("filters: Unknown property", "ranking: Unknown property", "subset.limit: Unknown property"):
        assert wrong in post
    # DELETE takes the row groups, GET all but the body
    assert (
        ArgumentValidator(tools["postgrest_db_delete_items"].input_schema).errors(
            {k: v for k, v in filled.items() if k != "body"}
        )
        == []
    )
    assert "1. body: Unknown property" in _report(tools["postgrest_db_get_items"], filled)


def test_validation_reports_point_at_the_branch_the_value_was_meant_for() -> None:
    tools = _tools(TODOS, None)
    post = tools["postgrest_db_post_todos"]
    assert _report(post, {"body": {"title": "milk", "id": 1}}) == (
        "Tool call validation failed for 'postgrest_db_post_todos' with 1 error:\n\n"
        "1. body.user_id: Required property missing\n\n"
        "Please correct these issues and try again."
    )
    assert "1. body[1].title: Required property missing" in _report(
        post, {"body": [{"title": "a", "id": 1, "user_id": "u"}, {"id": 2, "user_id": "u"}]}
    )
    assert "1. body: Expected array or object but got string" in _report(post, {"body": "a row"})
    get = tools["postgrest_db_get_todos"]
    report = _report(get, {"filters": {"id": "foo.1", "title": ["eq.a", "b"]}})
    assert "1. filters.id: Invalid value 'foo.1': expected operator.value" in report
    assert "2. filters.title[1]: Invalid value 'b': expected operator.value" in report
    assert "Expected array" not in report


def test_a_description_that_is_not_postgrest_is_a_clear_error() -> None:
    from toolboxes.openapi import SpecError

    with pytest.raises(SpecError, match=r"PostgREST serves Swagger 2\.0"):
        build_tools(Resolver({"openapi": "3.0.0", "paths": {}}, "http://h/"), "db", ["GET"])


# --- end to end ------------------------------------------------------------------------------------------------


def _answer(seen: Seen) -> Answer:
    if seen.method == "GET":
        return Answer(200, [{"id": 1, "title": "a"}])
    if seen.method == "POST":
        return Answer(201, seen.json() if isinstance(seen.json(), list) else [seen.json()])
    if seen.method == "PATCH":
        return Answer(400, {"code": "PGRST100", "message": "failed to parse filter"})
    return Answer(204, b"")


@pytest.fixture
def api() -> Iterator[ApiServer]:
    with serve_api(_answer, {"/": json.dumps(with_items(TODOS)).encode()}) as server:
        yield server


@pytest.fixture
async def sup(api: ApiServer, sandbox_tmp: Path) -> AsyncIterator[Supervisor]:
    toolboxes = [
        {"tag": "PostgRESTServer", "contents": {"SpecUrl": f"{api.url}/", "BaseUrl": api.url}},  # the seed's keys
        {
            "tag": "PostgRESTServer",
            "contents": {
                "SpecUrl": f"http://localhost:{api.port}/",
                "BaseUrl": f"http://localhost:{api.port}",
                "AllowedMethods": ["GET"],
            },
        },
    ]
    # The PostgREST stand-in listens on the host's loopback, which the policy opens (its BaseUrl alone does not).
    policy = write_policy(
        sandbox_tmp, {"tester": agent(postgrestToolboxes=toolboxes)}, strict=True, network={"allow_loopback": True}
    )
    async with Supervisor.open(policy) as s:
        yield s


@pytest.mark.root
async def test_postgrest_end_to_end(sup: Supervisor, api: ApiServer) -> None:
    names = {t.name for t in sup.list_tools()}
    # names from the BaseUrl host; every method the description lists unless AllowedMethods narrows them
    assert {"postgrest_127_0_0_1_get_todos", "postgrest_127_0_0_1_post_todos", "postgrest_localhost_get_todos"} <= names
    assert {"postgrest_127_0_0_1_patch_items", "postgrest_127_0_0_1_delete_items"} <= names
    assert not {n for n in names if n.startswith("postgrest_localhost_") and "_get_" not in n}
    result = await sup.call(
        "postgrest_127_0_0_1_get_todos",
        {"filters": {"title": "ilike.*milk & eggs*"}, "subset": {"limit": 2, "columns": "id,title"}},
    )
    assert result.status == "passed", result
    assert result.summary == "HTTP 200" and result.structured == [{"id": 1, "title": "a"}]
    seen = api.api_requests()[-1]
    assert seen.target == "/todos?title=ilike.*milk%20%26%20eggs*&select=id,title&limit=2"
    result = await sup.call("postgrest_127_0_0_1_post_todos", {"body": [{"title": "x", "id": 1, "user_id": "u"}]})
    assert result.status == "passed" and result.summary == "HTTP 201"
    assert api.api_requests()[-1].json() == [{"title": "x", "id": 1, "user_id": "u"}]
    assert api.api_requests()[-1].headers["prefer"] == "return=representation"
    result = await sup.call("postgrest_127_0_0_1_patch_todos", {"filters": {"id": "eq.1"}, "body": {"title": "y"}})
    assert result.status == "failed" and result.structured["code"] == "PGRST100"
    result = await sup.call("postgrest_127_0_0_1_delete_todos", {"filters": {"id": "in.(1,2)"}})
    assert result.status == "passed" and result.summary == "HTTP 204"
    assert api.api_requests()[-1].target == "/todos?id=in.(1,2)"
    before = len(api.requests)
    result = await sup.call("postgrest_127_0_0_1_delete_todos", {})
    assert result.status == "error" and len(api.requests) == before
    # the seed's argument example, its placeholder filter value written as a filter, is a PATCH
    seed = {**SEED_ARGUMENTS, "filters": {"column_name": "eq.filter_value"}}
    result = await sup.call("postgrest_127_0_0_1_patch_items", seed)
    assert result.summary == "HTTP 400"  # the recording server's answer to every PATCH
    seen = api.api_requests()[-1]
    assert (seen.method, seen.target, seen.json()) == (
        "PATCH",
        "/items?column_name=eq.filter_value&select=id,name,email&order=created_at.desc&limit=10&offset=0",
        {"name": "New Item", "value": 42},
    )
    result = await sup.call("postgrest_127_0_0_1_post_todos", {"body": {"title": "milk", "id": 3}})
    assert result.status == "error" and "1. body.user_id: Required property missing" in result.data
