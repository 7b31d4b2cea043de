"""OpenAPI toolboxes end to end: real confined workers through ``Supervisor.open``, reaching a real HTTP server on
127.0.0.1 only through the supervisor's egress proxy. The server records each request as it arrived, so the tests
check URL-encoding, headers and bodies on the wire."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from supervisor import Supervisor
from tests._policies import agent, write_policy
from tests.toolboxes._api_server import Answer, ApiServer, Seen, serve_api

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

pytestmark = pytest.mark.root

FIXTURES = Path("/work/shared/fixtures/openapi")

#: A spec given by path, with the cases the fixtures lack: a string path parameter, a header parameter, a name in
#: two locations, a form body, and a large answer.
FILE_SPEC = {
    "openapi": "3.0.3",
    "info": {"title": "files", "version": "1"},
    "paths": {
        "/files/{name}": {
            "parameters": [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}],
            "get": {
                "operationId": "files.get",
                "parameters": [
                    {"name": "q", "in": "query", "schema": {"type": "string"}},
                    {"name": "tags", "in": "query", "schema": {"type": "array", "items": {"type": "string"}}},
                    {"name": "name", "in": "query", "schema": {"type": "string"}},
                    {"name": "X-Trace", "in": "header", "schema": {"type": "string"}},
                ],
                "responses": {"200": {"description": "ok"}},
            },
        },
        "/forms": {
            "post": {
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/x-www-form-urlencoded": {
                            "schema": {
                                "type": "object",
                                "properties": {"a": {"type": "string"}, "n": {"type": "integer"}},
                            }
                        }
                    },
                },
                "responses": {"200": {"description": "ok"}},
            }
        },
        "/big": {"get": {"operationId": "big", "responses": {"200": {"description": "ok"}}}},
    },
}


def _answer(seen: Seen) -> Answer:
    if seen.target.endswith("/big"):
        return Answer(200, b"x" * 300_000, "text/plain")
    if seen.target == "/pets/999":
        return Answer(404, {"code": 404, "message": "no pet 999"})
    if seen.method == "POST" and seen.target == "/pets":
        return Answer(200, {"id": 7, **seen.json()})
    return Answer(200, {"ok": True, "target": seen.target})


@dataclass
class Env:
    sup: Supervisor
    api: ApiServer


@pytest.fixture
def api() -> Iterator[ApiServer]:
    spec = (FIXTURES / "v3.0-petstore-expanded.json").read_bytes()
    with serve_api(_answer, {"/openapi.json": spec}) as server:
        yield server


@pytest.fixture
async def env(api: ApiServer, sandbox_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Env]:
    monkeypatch.setenv("OPENAPI_TEST_TOKEN", "s3cret-token")
    (sandbox_tmp / "specs").mkdir()
    (sandbox_tmp / "specs" / "files.json").write_text(json.dumps(FILE_SPEC))
    toolboxes = [
        {
            "tag": "OpenAPIServer",
            "contents": {
                "Name": "pets",
                "SpecUrl": f"{api.url}/openapi.json",
                "BaseUrl": api.url,
                "Headers": {"X-Api-Version": "v1"},
                "Token": "${OPENAPI_TEST_TOKEN}",
            },
        },
        {
            "tag": "OpenAPIServer",
            "contents": {
                "Name": "files",
                "SpecUrl": str(sandbox_tmp / "specs" / "files.json"),
                "BaseUrl": f"{api.url}/v2/",
            },
        },
        # 127.0.0.2 is loopback but not one of the names the proxy lets reach loopback: refused, no packet sent
        {
            "tag": "OpenAPIServer",
            "contents": {
                "Name": "elsewhere",
                "SpecUrl": str(sandbox_tmp / "specs" / "files.json"),
                "BaseUrl": f"http://127.0.0.2:{api.port}",
            },
        },
        {
            "tag": "OpenAPIServer",
            "contents": {"Name": "nospec", "SpecUrl": f"http://127.0.0.2:{api.port}/x.json", "BaseUrl": api.url},
        },
    ]
    # The API listens on the host's loopback: the policy opens it to the toolboxes that use it (an agent file's
    # BaseUrl alone does not); "elsewhere" stays closed.
    opened = {"allow_loopback": True}
    policy = write_policy(
        sandbox_tmp,
        {"tester": agent(openApiToolboxes=toolboxes)},
        limits={"output_bytes": 100_000, "wall_time_s": 20},
        toolboxes={k: dict(opened) for k in ("tester/pets", "tester/files", "tester/nospec")},
    )
    async with Supervisor.open(policy) as sup:
        yield Env(sup, api)


async def test_tools_are_named_from_the_spec(env: Env) -> None:
    names = {t.name for t in env.sup.list_tools()}
    assert {
        "openapi_pets_findPets",
        "openapi_pets_addPet",
        "openapi_pets_find_pet_by_id",
        "openapi_pets_deletePet",
    } <= names
    assert {"openapi_files_files_get", "openapi_files__forms", "openapi_files_big"} <= names
    tool = next(t for t in env.sup.list_tools() if t.name == "openapi_files_files_get")
    # "name" is both a path and a query parameter: prefixed with the location only for that clash
    assert set(tool.input_schema["properties"]) == {"path_name", "query_name", "q", "tags", "X-Trace"}
    assert tool.input_schema["required"] == ["path_name"]


async def test_query_path_headers_and_token_on_the_wire(env: Env) -> None:
    result = await env.sup.call("openapi_pets_findPets", {"tags": ["a b", "c&d=e"], "limit": 5})
    assert result.status == "passed", result
    assert result.summary == "HTTP 200"
    assert result.structured["ok"] is True
    seen = env.api.api_requests()[-1]
    assert seen.target == "/pets?tags=a%20b&tags=c%26d%3De&limit=5"
    assert seen.headers["authorization"] == "Bearer s3cret-token"
    assert seen.headers["x-api-version"] == "v1"
    assert dict(result.metadata)["state_effect"] == "read"

    result = await env.sup.call(
        "openapi_files_files_get", {"path_name": "../etc/passwd?#", "query_name": "ü+%", "q": "x y", "X-Trace": "t-1"}
    )
    assert result.status == "passed", result
    seen = env.api.api_requests()[-1]
    assert seen.target == "/v2/files/..%2Fetc%2Fpasswd%3F%23?q=x%20y&name=%C3%BC%2B%25"
    assert seen.headers["x-trace"] == "t-1"
    assert "authorization" not in seen.headers  # no Token for this toolbox

    result = await env.sup.call("openapi_files_files_get", {"path_name": ".."})
    assert env.api.api_requests()[-1].target == "/v2/files/%2E%2E"


async def test_bodies_and_failed_statuses(env: Env) -> None:
    result = await env.sup.call("openapi_pets_addPet", {"body": {"name": "Rex", "tag": "dog"}})
    assert result.status == "passed", result
    assert result.structured == {"id": 7, "name": "Rex", "tag": "dog"}
    seen = env.api.api_requests()[-1]
    assert seen.method == "POST"
    assert seen.json() == {"name": "Rex", "tag": "dog"}
    assert seen.headers["content-type"] == "application/json"
    assert dict(result.metadata)["state_effect"] == "mutate"

    result = await env.sup.call("openapi_pets_find_pet_by_id", {"id": 999})
    assert result.status == "failed"
    assert result.summary == "HTTP 404"
    assert result.structured == {"code": 404, "message": "no pet 999"}

    result = await env.sup.call("openapi_files__forms", {"body": {"a": "x&y", "n": 3}})
    assert result.status == "passed", result
    seen = env.api.api_requests()[-1]
    assert seen.body == b"a=x%26y&n=3"
    assert seen.headers["content-type"] == "application/x-www-form-urlencoded"


async def test_invalid_arguments_never_reach_the_server(env: Env) -> None:
    before = len(env.api.requests)
    result = await env.sup.call("openapi_pets_find_pet_by_id", {"id": "seven"})
    assert result.status == "error"
    assert "Tool call validation failed" in (result.data or "")
    assert len(env.api.requests) == before


async def test_large_answers_are_cut_and_marked_truncated(env: Env) -> None:
    result = await env.sup.call("openapi_files_big", {})
    assert result.status == "passed"
    assert result.truncated
    assert len(result.data or "") <= 100_000


async def test_hosts_the_proxy_refuses(env: Env) -> None:
    before = len(env.api.requests)
    result = await env.sup.call("openapi_elsewhere_big", {})
    assert result.status == "error"
    assert "egress proxy refused" in (result.data or "")
    assert "127.0.0.2" in (result.data or "")
    assert "403" in (result.summary or "")
    assert len(env.api.requests) == before  # nothing reached the server
    errors = [e for e in env.sup.load_errors() if e["toolbox"] == "nospec"]
    assert errors, env.sup.load_errors()
    assert "refused by the egress proxy" in errors[0]["message"]
    assert not [t for t in env.sup.list_tools() if t.name.startswith("openapi_nospec_")]
