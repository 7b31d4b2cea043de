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
from tests._policies import agent, write_policy
from tests.toolboxes._api_server import Answer, ApiServer, Seen, serve_api
from toolboxes.openapi import Resolver
from toolboxes.postgrest import FILTER_PATTERN, build_request, build_tools

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


def _tools(doc: dict, methods: list[str]) -> dict:
    tools, errors = build_tools(Resolver(doc, "http://127.0.0.1:3000/"), "db", methods)
    assert errors == []
    return {t.tool: t for t in tools}


def test_tool_names_per_allowed_method() -> None:
    assert sorted(_tools(TODOS, ["GET"])) == ["postgrest_db_get_todos"]
    assert sorted(_tools(_with_rpc(), ["GET", "POST", "PATCH", "DELETE"])) == [
        "postgrest_db_delete_todos",
        "postgrest_db_get_rpc_varied_arguments_openapi",
        "postgrest_db_get_todos",
        "postgrest_db_patch_todos",
        "postgrest_db_post_rpc_varied_arguments_openapi",
        "postgrest_db_post_todos",
    ]


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
    with serve_api(_answer, {"/": json.dumps(TODOS).encode()}) as server:
        yield server


@pytest.fixture
async def sup(api: ApiServer, sandbox_tmp: Path) -> AsyncIterator[Supervisor]:
    toolboxes = [
        {
            "tag": "PostgRESTServer",
            "contents": {
                "SpecUrl": f"{api.url}/",
                "BaseUrl": api.url,
                "AllowedMethods": ["GET", "POST", "PATCH", "DELETE"],
            },
        },
        {
            "tag": "PostgRESTServer",
            "contents": {"SpecUrl": f"http://localhost:{api.port}/", "BaseUrl": f"http://localhost:{api.port}"},
        },
    ]
    policy = write_policy(sandbox_tmp, {"tester": agent(postgrestToolboxes=toolboxes)}, strict=True)
    async with Supervisor.open(policy) as s:
        yield s


@pytest.mark.root
async def test_postgrest_end_to_end(sup: Supervisor, api: ApiServer) -> None:
    names = {t.name for t in sup.list_tools()}
    # names from the BaseUrl host; GET only by default
    assert {"postgrest_127_0_0_1_get_todos", "postgrest_127_0_0_1_post_todos", "postgrest_localhost_get_todos"} <= names
    assert "postgrest_localhost_post_todos" not in names
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
