"""The policy's ceiling on HTTP methods (``ceilings.<slug>.http_methods``, ``tenants.<name>.ceiling.http_methods``):
OpenAPI and PostgREST toolboxes get tools for every operation their description lists (PostgREST's
``AllowedMethods`` narrows); the policy bounds them. Real workers, a recording HTTP server on the host's loopback
serving PostgREST's recorded description and the OpenAPI petstore, ``check`` as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from supervisor._supervisor import Supervisor
from supervisor.frontends._cli import main
from tests._policies import agent, write_policy
from tests.toolboxes._api_server import Answer, Seen, serve_api

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.toolboxes._api_server import ApiServer

pytestmark = pytest.mark.root

TODOS = Path("/work/shared/fixtures/postgrest/supabase-mcp-todos.swagger.json")
PETSTORE = Path("/work/shared/fixtures/openapi/v3.0-petstore-expanded.json")


def _answer(seen: Seen) -> Answer:
    return Answer(200, [{"id": 1, "method": seen.method}])


@pytest.fixture
def api() -> Iterator[ApiServer]:
    with serve_api(_answer, {"/": TODOS.read_bytes(), "/openapi.json": PETSTORE.read_bytes()}) as server:
        yield server


def _policy(root: Path, api: ApiServer, *, ask: list[str] | None = None) -> Path:
    """Agent ``tester``: the petstore (OpenAPI, every operation), a PostgREST server as the seed writes it (every
    method its description lists) and, with ``ask``, one whose ``AllowedMethods`` asks for those methods. The
    agents of every agent may call GET and HEAD; tenant acme's, GET alone."""
    postgrest = [{"tag": "PostgRESTServer", "contents": {"Name": "db", "SpecUrl": f"{api.url}/", "BaseUrl": api.url}}]
    if ask is not None:
        contents = {"Name": "asks", "SpecUrl": f"{api.url}/", "BaseUrl": api.url, "AllowedMethods": ask}
        postgrest.append({"tag": "PostgRESTServer", "contents": contents})
    openapi = [
        {"tag": "OpenAPIServer", "contents": {"Name": "pets", "SpecUrl": f"{api.url}/openapi.json", "BaseUrl": api.url}}
    ]
    return write_policy(
        root,
        {"tester": agent("tester", openApiToolboxes=openapi, postgrestToolboxes=postgrest)},
        network={"allow_loopback": True},  # the recording server listens on the host's loopback
        ceilings={"*": {"http_methods": ["get", "HEAD"]}},
        tenants={"acme": {"tokens": [], "agents": ["tester"], "ceiling": {"http_methods": ["GET"]}}},
    )


async def test_tools_of_methods_past_the_ceiling_are_not_offered_and_never_sent(
    sandbox_tmp: Path, api: ApiServer
) -> None:
    async with Supervisor.open(_policy(sandbox_tmp, api)) as sup:
        assert sup.load_errors() == []
        names = {t.name for t in sup.list_tools()}
        assert {"postgrest_db_get_todos", "openapi_pets_findPets", "openapi_pets_find_pet_by_id"} <= names
        # the description lists POST, PATCH and DELETE on todos and the petstore addPet and deletePet: not offered
        assert not {n for n in names if n.startswith("postgrest_db_") and "_get_" not in n}, names
        assert not {"openapi_pets_addPet", "openapi_pets_deletePet"} & names
        refused = await sup.call("postgrest_db_delete_todos", {"filters": {"id": "eq.1"}})
        assert refused.status == "error" and "postgrest_db_delete_todos" in (refused.data or ""), refused.data
        got = await sup.call("postgrest_db_get_todos", {"subset": {"limit": 1}})
        assert got.status == "passed", got.data
        assert {r.method for r in api.api_requests()} == {"GET"}  # nothing else reached the server
        caps = sup.runner("db", "tester").spec.report["caps"]["http_methods"]
        assert caps == [
            {"key": 'ceilings."*".http_methods', "methods": ["GET", "HEAD"]},
            {"key": "tenants.acme.ceiling.http_methods", "methods": ["GET"]},
        ]


async def test_allowed_methods_past_the_ceiling_is_that_toolboxs_load_error(sandbox_tmp: Path, api: ApiServer) -> None:
    async with Supervisor.open(_policy(sandbox_tmp, api, ask=["GET", "DELETE"])) as sup:
        [error] = sup.load_errors()
        assert error["toolbox"] == "asks"
        assert (
            'the HTTP method DELETE (AllowedMethods), past the policy\'s ceiling ceilings."*".http_methods'
            in (error["message"])
        )
        assert "tenants.acme.ceiling.http_methods (GET)" in error["message"]
        assert "postgrest_db_get_todos" in {t.name for t in sup.list_tools()}  # the others load


def test_check_shows_the_methods_the_policy_allows(
    sandbox_tmp: Path, api: ApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = _policy(sandbox_tmp, api)
    assert main(["check", "--policy", str(policy)]) == 0
    out = capsys.readouterr().out
    assert (
        'tester: HTTP methods GET, HEAD (ceilings."*".http_methods); HTTP methods GET '
        "(tenants.acme.ceiling.http_methods)"
    ) in out, out
    assert main(["check", "--policy", str(policy), "--json"]) == 0
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    pets = next(tb for tb in report["toolboxes"] if tb["toolbox"] == "pets")
    assert [m["methods"] for m in pets["caps"]["http_methods"]] == [["GET", "HEAD"], ["GET"]]
