"""MCP logging for real, with the official SDK client over stdio and over Streamable HTTP: after
``logging/setLevel`` a session is told its agent's toolbox load errors and the limits its own calls hit, never
another tenant's; plus the pure choice of what a trace record tells a session."""

from __future__ import annotations

import json
import os
import signal
import sys
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import pytest
import trio
from mcp import Client, ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from supervisor.frontends._http_auth import hash_token
from supervisor.frontends._mcp_logging import LIMIT_REFUSALS, log_entry
from tests._policies import agent, local_model, system_toolbox, write_policy
from tests.supervisor._model_server import call, model_server
from tests.supervisor.calls.test_portal_depth import _lua
from tests.supervisor.frontends.test_frontends import REPO, _env
from tests.supervisor.frontends.test_mcp_http import _start

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

# The SDK marks logging deprecated as of 2026-07-28 (SEP-2577); the handshake revisions served here still have it.
pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

ACME, GLOBEX = "acme-log-token", "globex-log-token"
WHY = "the store's config file is missing"


class _Log:
    """The ``notifications/message`` one client got; ``wait_for`` returns once one matches."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, dict[str, Any]]] = []
        self._event = trio.Event()

    async def callback(self, params: Any) -> None:
        self.messages.append((params.level, params.data))
        self._event.set()
        self._event = trio.Event()

    async def wait_for(self, event: str, **fields: Any) -> tuple[str, dict[str, Any]]:
        while True:
            for level, data in self.messages:
                if data.get("event") == event and all(data.get(k) == v for k, v in fields.items()):
                    return level, data
            await self._event.wait()


def _policy(root: Path) -> Path:
    server = {
        "tag": "McpSimpleBinary",
        "contents": {"name": "store", "executable": sys.executable, "args": ["-c", f"import sys; sys.exit({WHY!r})"]},
    }
    return write_policy(
        root,
        {"alpha": agent("alpha", mcpServers=[server], builtinToolboxes=[system_toolbox("system", ["date"])])},
        sessions={"max_calls": 1},
        frontends={"http": {"listen": "127.0.0.1:0"}},
        tenants={
            "acme": {"tokens": [hash_token(ACME)], "agents": ["alpha"]},
            "globex": {"tokens": [hash_token(GLOBEX)], "agents": ["alpha"]},
        },
    )


@asynccontextmanager
async def _client(url: str, token: str, logs: dict[str, _Log]) -> AsyncIterator[Client]:
    """The SDK client of the tenant of ``token`` on a 2025-11-25 session at ``url``, its log in ``logs[token]``."""
    async with (
        create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http,
        Client(
            streamable_http_client(url, http_client=http), mode="legacy", logging_callback=logs[token].callback
        ) as client,
    ):
        yield client


async def _use(client: Any, log: _Log) -> None:
    """Set the level, learn the load error, make one call and one past the session's limit, learn that."""
    await client.set_logging_level("warning")
    level, data = await log.wait_for("load_error", toolbox="store")
    assert level == "error" and WHY in data["message"]
    assert not (await client.call_tool("system_system_date", {})).is_error
    refused = await client.call_tool("system_system_date", {})
    assert refused.is_error and "reached its limit of 1 tool calls" in refused.content[0].text
    level, data = await log.wait_for("portal_refusal", kind="SessionLimit")
    assert level == "warning" and data["tool"] == "system_system_date"


@pytest.mark.root
async def test_over_stdio(sandbox_tmp: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "supervisor", "--policy", str(_policy(sandbox_tmp))], env=_env(), cwd=REPO
    )
    log = _Log()
    with trio.fail_after(90):
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write, logging_callback=log.callback) as session,
        ):
            init = await session.initialize()
            assert init.capabilities.logging is not None
            await _use(session, log)


@pytest.mark.root
async def test_over_http_each_tenant_hears_only_its_own(sandbox_tmp: Path) -> None:
    async with _start(_policy(sandbox_tmp)) as server:
        logs = {ACME: _Log(), GLOBEX: _Log()}
        with trio.fail_after(120):
            async with (
                _client(server.url("alpha"), ACME, logs) as acme,
                _client(server.url("alpha"), GLOBEX, logs) as globex,
            ):
                await globex.set_logging_level("warning")
                await logs[GLOBEX].wait_for("load_error", toolbox="store")
                await _use(acme, logs[ACME])
                # globex's own limit, after acme's: its stream is in order, so acme's would have come first.
                await _use(globex, logs[GLOBEX])
        for token in (ACME, GLOBEX):
            refusals = [d for _, d in logs[token].messages if d["event"] == "portal_refusal"]
            assert len(refusals) == 1, (token, logs[token].messages)


def test_what_a_record_tells_a_session() -> None:
    mine = "alpha"
    assert log_entry(
        "load_error",
        {"toolbox": "system", "agent": "alpha", "message": "m"},
        agent=mine,
        own_session=False,
        own_call=False,
    ) == ("error", {"event": "load_error", "toolbox": "system", "message": "m"})
    # a toolbox of the same name of another agent, and a record naming no agent, are not this session's
    for fields in ({"toolbox": "system", "agent": "beta"}, {"toolbox": "system"}):
        assert log_entry("load_error", fields, agent=mine, own_session=False, own_call=False) is None
        assert log_entry("worker_restart", fields, agent=mine, own_session=False, own_call=False) is None
    assert log_entry(
        "worker_restart",
        {"toolbox": "system", "agent": "alpha", "restarts": 2, "pid": 9},
        agent=mine,
        own_session=False,
        own_call=False,
    ) == ("warning", {"event": "worker_restart", "toolbox": "system", "restarts": 2})
    hit = {"toolbox": "system", "agent": "alpha", "limit": "pids_max", "value": 64, "call_id": 3}
    assert log_entry("limit_hit", hit, agent=mine, own_session=False, own_call=False) is None  # not its call
    assert log_entry("limit_hit", hit, agent=mine, own_session=False, own_call=True)[0] == "warning"
    refusal = {"tool": "t", "kind": "SessionLimit", "reason": "r", "session": "s"}
    assert log_entry("portal_refusal", refusal, agent=mine, own_session=False, own_call=False) is None
    assert (
        log_entry(
            "portal_refusal",
            {**refusal, "kind": "PortalToolNotFound"},
            agent=mine,
            own_session=True,
            own_call=False,
        )
        is None
    )  # answered already; not a limit


def _failing_store(why: str) -> dict[str, Any]:
    return {
        "tag": "McpSimpleBinary",
        "contents": {"name": "store", "executable": sys.executable, "args": ["-c", f"import sys; sys.exit({why!r})"]},
    }


@pytest.mark.root
async def test_two_agents_toolboxes_of_one_name_are_told_to_their_own_tenants_only(sandbox_tmp: Path) -> None:
    """Agents alpha and beta each have a ``store`` (that fails to start, with a host path in its error) and a
    ``system``; tenant acme may use alpha only, globex beta only. Each hears its own agent's load error and worker
    restart, never the other's (the toolbox name alone matched both before)."""
    policy = write_policy(
        sandbox_tmp,
        {
            "alpha": agent(
                "alpha",
                mcpServers=[_failing_store("/srv/alpha-secret/store.conf missing")],
                builtinToolboxes=[system_toolbox("system", ["date"])],
            ),
            "beta": agent(
                "beta",
                mcpServers=[_failing_store("/srv/beta-secret/store.conf missing")],
                builtinToolboxes=[system_toolbox("system", ["date"])],
            ),
        },
        frontends={"http": {"listen": "127.0.0.1:0"}},
        tenants={
            "acme": {"tokens": [hash_token(ACME)], "agents": ["alpha"]},
            "globex": {"tokens": [hash_token(GLOBEX)], "agents": ["beta"]},
        },
    )
    async with _start(policy) as server:
        logs = {ACME: _Log(), GLOBEX: _Log()}

        def kill_system_worker(of_agent: str, server: Any = server) -> None:
            [spawn] = [
                r
                for r in server.records("worker_spawn")
                if r["agent"] == of_agent and r["toolbox"] == "system" and not r.get("restart")
            ]
            os.kill(spawn["pid"], signal.SIGKILL)

        with trio.fail_after(120):
            async with (
                _client(server.url("alpha"), ACME, logs) as acme,
                _client(server.url("beta"), GLOBEX, logs) as globex,
            ):
                await acme.set_logging_level("debug")
                await globex.set_logging_level("debug")
                _, data = await logs[ACME].wait_for("load_error", toolbox="store")
                assert "alpha-secret" in data["message"]
                _, data = await logs[GLOBEX].wait_for("load_error", toolbox="store")
                assert "beta-secret" in data["message"]
                kill_system_worker("beta")  # beta's restart first, then alpha's: acme's stream is in order
                await logs[GLOBEX].wait_for("worker_restart", toolbox="system")
                kill_system_worker("alpha")
                await logs[ACME].wait_for("worker_restart", toolbox="system")
                assert not (await acme.call_tool("system_system_date", {})).is_error
        for token, other in ((ACME, "beta-secret"), (GLOBEX, "alpha-secret")):
            told = logs[token].messages
            assert not [d for _, d in told if other in str(d)], (token, told)
            assert len([d for _, d in told if d["event"] == "load_error"]) == 1, (token, told)
        # acme heard alpha's restart only, though beta's (a toolbox of the same name) came first
        assert len([d for _, d in logs[ACME].messages if d["event"] == "worker_restart"]) == 1, logs[ACME].messages


@pytest.mark.root
# The SDK client leaves its SSE reader's async generators unclosed when a request answers a JSON-RPC error on an
# SSE stream (its own resource warnings at garbage collection, after the assertions); not the server's.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_stateless_requests_opt_in_per_request(sandbox_tmp: Path) -> None:
    """2026-07-28: the SDK client stamps ``_meta`` logLevel on every request; a call hears, on its SSE answer and
    before the answer, a worker of its agent restarting while it ran. A request past the tenant's rate is refused
    before any answer is written (429: the reason and when to retry are in the error)."""
    root = sandbox_tmp
    policy = write_policy(
        root,
        {
            "alpha": agent(
                "alpha",
                builtinToolboxes=[system_toolbox("system", ["execute-command"]), system_toolbox("sys2", ["date"])],
            )
        },
        frontends={"http": {"listen": "127.0.0.1:0"}},
        tenants={"acme": {"tokens": [hash_token(ACME)], "agents": ["alpha"], "limits": {"calls_per_second": 3}}},
    )
    async with _start(policy) as server:
        log = _Log()

        async def kill_sys2_once_the_call_runs(server: Any = server) -> None:
            while not server.records("call_start"):  # noqa: ASYNC110 (the trace is the sign the call runs)
                await trio.sleep(0.05)
            [spawn] = [r for r in server.records("worker_spawn") if r["toolbox"] == "sys2"]
            os.kill(spawn["pid"], signal.SIGKILL)

        with trio.fail_after(60):
            async with (
                create_mcp_http_client(headers={"Authorization": f"Bearer {ACME}"}) as http,
                Client(
                    streamable_http_client(server.url("alpha"), http_client=http),
                    mode="auto",
                    log_level="warning",
                    logging_callback=log.callback,
                ) as client,
            ):
                assert client.protocol_version == "2026-07-28"
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(kill_sys2_once_the_call_runs)
                    result = await client.call_tool("system_system_execute_command", {"command": "sleep 3"})
                assert not result.is_error, result
                level, _ = await log.wait_for("worker_restart", toolbox="sys2")
                assert level == "warning"

                async def past_the_rate(client: Any = client) -> None:
                    for _ in range(10):  # past 3 a second
                        await client.call_tool("system_sys2_date", {})

                # the SDK raises the JSON-RPC error of the 429 answer
                with pytest.raises(Exception, match=r"calls per second is spent .*; retry in \d+ s"):
                    await past_the_rate()
        refused = [r for r in server.records("http_refused") if r["status"] == 429]
        assert refused and refused[0]["tenant"] == "acme" and "calls per second" in refused[0]["why"], refused


def test_a_call_trees_limits_are_told_to_the_session_whose_call_it_is() -> None:
    """A budget's refusal (``CallTreeBudget``) is a limit, as the session's and the depth's are; a refusal or a
    limit in a call's tree (a sub-agent's own session) is this session's when its root call is one of its calls."""
    assert {"SessionLimit", "PortalDepthExceeded", "CallTreeBudget"} <= LIMIT_REFUSALS
    refusal = {"tool": "t", "kind": "CallTreeBudget", "reason": "r", "session": "child", "root_call_id": "c1"}
    assert log_entry("portal_refusal", refusal, agent="alpha", own_session=True, own_call=False) == (
        "warning",
        {"event": "portal_refusal", "tool": "t", "kind": "CallTreeBudget", "reason": "r"},
    )
    assert log_entry("portal_refusal", refusal, agent="alpha", own_session=False, own_call=True) is not None
    assert log_entry("portal_refusal", refusal, agent="alpha", own_session=False, own_call=False) is None
    not_a_limit = {**refusal, "kind": "PortalInvalidArguments"}
    assert log_entry("portal_refusal", not_a_limit, agent="alpha", own_session=False, own_call=True) is None
    spent = {"limit": "budget.tool_calls", "value": 5, "used": {"tool_calls": 5}, "root_call_id": "c1"}
    assert log_entry("limit_hit", spent, agent="alpha", own_session=False, own_call=True) == (
        "warning",
        {"event": "limit_hit", "limit": "budget.tool_calls", "value": 5, "used": {"tool_calls": 5}},
    )


LOOP = """
for i = 1, 100000 do
  local r = tools.call("system_sys_date", {})
  if r.status ~= "ok" then return i, r.error end
end
return 0
"""


@pytest.mark.root
async def test_a_spent_call_tree_budget_is_heard_over_stdio(sandbox_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The official SDK client over stdio: a Lua ``tools.call`` loop runs its call's tree out of tool calls (the
    refusal is in the session's own calls), then a sub-agent's loop does (its refusal is in the sub-agent's own
    session, heard through its root call). The model is the one part that cannot be real: a scripted server on
    loopback, which the policy opens to model endpoints."""
    monkeypatch.setenv("AGENTS_TEST_KEY", "k")
    with model_server(lambda req: call("system_helper_sys_date", {})) as server:
        helper = agent("helper", modelUrl=server.url, builtinToolboxes=[system_toolbox("helper_sys", ["date"])])
        (sandbox_tmp / "helper.json").write_text(json.dumps(helper))
        alpha = agent(
            "alpha",
            builtinToolboxes=[system_toolbox("sys", ["date"]), _lua(["system_sys_date"])],
            extraAgents=[{"slug": "helper", "path": "helper.json"}],
        )
        policy = write_policy(
            sandbox_tmp,
            {"alpha": alpha},
            model_keys={"test": "AGENTS_TEST_KEY"},
            agent_loop=local_model({"max_steps": 50, "retries": 0, "request_timeout_s": 10}),
            budget={"tool_calls": 6, "model_requests": None, "wall_time_s": None},
        )
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "supervisor", "--policy", str(policy)], env=_env(), cwd=REPO
        )
        log = _Log()
        with trio.fail_after(120):
            async with (
                stdio_client(params) as (read, write),
                ClientSession(read, write, logging_callback=log.callback) as session,
            ):
                await session.initialize()
                await session.set_logging_level("warning")
                looped = await session.call_tool("lua_lua_execute", {"script": LOOP})
                assert looped.structured_content is not None, looped
                assert looped.structured_content["values"] == [6, "CallTreeBudget"]  # the root and 5 dates
                level, data = await log.wait_for("portal_refusal", kind="CallTreeBudget", tool="system_sys_date")
                assert level == "warning" and "of 6 tool calls (budget.tool_calls in the policy)" in data["reason"]
                level, data = await log.wait_for("limit_hit", limit="budget.tool_calls")
                assert level == "warning" and data["used"]["tool_calls"] == 6
                asked = await session.call_tool("io_prompt_agent_helper", {"what": "what day is it?"})
                assert asked.is_error  # its loop ran the tree out of tool calls, then of nothing else: it failed
                level, data = await log.wait_for("portal_refusal", kind="CallTreeBudget", tool="system_helper_sys_date")
                assert level == "warning"
    budget_hits = [d for _, d in log.messages if d["event"] == "limit_hit" and d["limit"] == "budget.tool_calls"]
    assert len(budget_hits) == 2  # once per tree
