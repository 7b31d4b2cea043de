"""Sessions bound to an owner (tenant, agent), the policy's caps on introspection, and conversation and turn ids.

Real parts: two agents in one policy with real System toolbox workers answering session requests through the real
portal; the ``agents-supervise call`` CLI as a subprocess; the official MCP SDK client over stdio; a bash tool that
prints the ids it was given in its environment.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from labkit import describe_json, write_script
from supervisor._errors import PolicyRefused
from supervisor._supervisor import Supervisor
from supervisor.config import Introspection
from supervisor.sessions._ids import LOCAL_TENANT, Owner, client_id, ids_from_meta, root_session_id
from supervisor.sessions._introspection import answer_host_request, introspection_problem, visible_sessions
from supervisor.sessions._store import SessionStore
from tests._policies import agent, local_model, system_toolbox, write_policy
from tests.supervisor._model_server import Reply, answer, call, model_server

SESSION_CAPS = ["list-sessions", "search-sessions", "read-session", "get-session-stats"]
REPO = str(Path(__file__).resolve().parents[3])
IDS_SCRIPT = 'echo "S=$AGENT_SESSION_ID C=$AGENT_CONVERSATION_ID T=$AGENT_TURN_ID A=$AGENT_AGENT_ID"'


def _ids(text: str) -> dict[str, str]:
    """``{"S": ..., "C": ..., "T": ..., "A": ...}`` from the ids tool's output."""
    return dict(part.split("=", 1) for part in text.split())


# -- pure ----------------------------------------------------------------------------------------------------------
def test_a_root_session_id_is_stable_and_never_shared_between_owners() -> None:
    alice, bob = Owner("alice"), Owner("bob")
    assert root_session_id(alice, "shared") == root_session_id(Owner("alice", LOCAL_TENANT), "shared")
    ids = {
        root_session_id(alice, "shared"),
        root_session_id(bob, "shared"),
        root_session_id(Owner("alice", "other-tenant"), "shared"),
        root_session_id(alice, "other"),
    }
    assert len(ids) == 4
    # Agent A's session id given as a name by agent B is another session of B's, not A's.
    taken = root_session_id(alice, "shared")
    assert root_session_id(bob, taken) not in ids


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (7, "must be a string, not int"),
        ("", "must have 1 to 200 characters, not 0"),
        ("x" * 201, "not 201"),
        ("a\nb", "no line breaks"),
    ],
)
def test_client_ids_are_checked(value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        client_id(value, "the turn id")


def test_ids_from_meta() -> None:
    assert ids_from_meta(None) == {}
    assert ids_from_meta({"progressToken": 3}) == {}
    assert ids_from_meta({"conversationId": "c1", "agents-supervise/turnId": "t1"}) == {
        "conversation_id": "c1",
        "turn_id": "t1",
    }
    with pytest.raises(ValueError, match="_meta must be an object"):
        ids_from_meta([1])
    with pytest.raises(ValueError, match=r"_meta\.turnId must be a string"):
        ids_from_meta({"turnId": 5})


def test_introspection_never_leaves_the_owner_unless_the_policy_allows() -> None:
    owners = {"a1": Owner("alice"), "a2": Owner("alice"), "b1": Owner("bob"), "x1": Owner("alice", "t2")}
    parents: dict[str, str | None] = dict.fromkeys(owners)
    assert visible_sessions(owners, parents, "a1", Introspection()) == {"a1", "a2"}
    assert visible_sessions(owners, parents, "a1", Introspection(other_agents=True)) == {"a1", "a2", "b1"}  # never t2's


def test_the_callers_own_call_tree_is_visible_whatever_its_agents() -> None:
    """a1 (alice) asked bob (b2), who asked carol (c1): both runs are a1's tree. bob's other runs (b1, b3 made from
    alice's other session a2) are not; nor is a child in another tenant; and b2 does not see its caller a1."""
    owners = {
        "a1": Owner("alice"),
        "a2": Owner("alice"),
        "b1": Owner("bob"),
        "b2": Owner("bob"),
        "c1": Owner("carol"),
        "b3": Owner("bob"),
        "x2": Owner("bob", "t2"),
    }
    parents = {"a1": None, "a2": None, "b1": None, "b2": "a1", "c1": "b2", "b3": "a2", "x2": "a1"}
    caps = Introspection()
    assert visible_sessions(owners, parents, "a1", caps) == {"a1", "a2", "b2", "c1"}
    assert visible_sessions(owners, parents, "b2", caps) == {"b1", "b2", "b3", "c1"}  # not its caller a1
    assert visible_sessions(owners, parents, "c1", caps) == {"c1"}
    assert visible_sessions(owners, parents, "a1", Introspection(other_agents=True)) == set(owners) - {"x2"}


def test_the_policy_caps_what_an_agent_file_may_ask() -> None:
    caps = Introspection(scopes=["subtree", "children-only"], tool_outputs=False)
    wide = {"Capabilities": ["list-sessions"], "SessionIntrospectionScope": "all"}
    assert (
        "SessionIntrospectionScope 'all' is not among the scopes the policy allows (sessions.introspection."
        "scopes: subtree, children-only)" in (introspection_problem(wide, caps) or "")
    )
    outputs = {"Capabilities": ["read-session"], "SessionIntrospectionIncludeToolOutputs": True}
    assert "sessions.introspection.tool_outputs: false" in (introspection_problem(outputs, caps) or "")
    assert introspection_problem({"Capabilities": ["date"], "SessionIntrospectionScope": "all"}, caps) is None
    assert introspection_problem({"Capabilities": ["list-sessions"]}, caps) is None  # the default, subtree
    # Applied again when answering (a config that got past the load is still capped).
    store = SessionStore(":memory:")
    sid, _ = store.open_root(Owner("alice"), "s")
    refused = answer_host_request(store, wide, sid, "list-sessions", {}, caps)
    assert refused["error"].startswith("SessionAccessDeniedError: the policy does not allow the scope 'all'")
    store.add_turn(sid, "tool", "the secret output", tool="t")
    reading = {"Capabilities": ["read-session"], "SessionIntrospectionIncludeToolOutputs": True}
    content = answer_host_request(store, reading, sid, "read-session", {"session_id": sid}, caps)["result"]
    assert "secret" not in content["content"] and "(output not shown)" in content["content"]


def test_a_named_root_session_keeps_its_conversation_across_stores(tmp_path: Path) -> None:
    path = str(tmp_path / "s.sqlite3")
    first = SessionStore(path)
    sid, conversation = first.open_root(Owner("alice"), "work")
    assert conversation and first.open_root(Owner("alice"), "work") == (sid, conversation)
    first.close()
    again = SessionStore(path)
    assert again.open_root(Owner("alice"), "work") == (sid, conversation)
    row = again.rows({sid})[0]
    assert (row.agent, row.tenant, row.name) == ("alice", LOCAL_TENANT, "work")
    again.close()


def test_a_store_of_the_old_layout_is_upgraded_and_its_shared_sessions_belong_to_nobody(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE sessions (id TEXT PRIMARY KEY, conversation_id TEXT NOT NULL, parent_id TEXT,
            agent TEXT NOT NULL DEFAULT '', parent_call_id TEXT, created REAL NOT NULL, modified REAL NOT NULL,
            status TEXT NOT NULL);
        CREATE TABLE tool_calls (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL, call_id TEXT,
            parent_call_id TEXT, tool TEXT NOT NULL, args TEXT NOT NULL, status TEXT NOT NULL, summary TEXT,
            output TEXT, started REAL NOT NULL, duration_s REAL NOT NULL);
        INSERT INTO sessions VALUES ('cli', 'cli', NULL, '', NULL, 1, 1, 'idle');
        INSERT INTO tool_calls (session_id, tool, args, status, started, duration_s)
            VALUES ('cli', 't', '{"token": "old-secret"}', 'passed', 1, 0);
    """)
    db.close()
    store = SessionStore(str(path))
    sid, _ = store.open_root(Owner("alice"), "cli")
    cfg = {"Capabilities": SESSION_CAPS, "SessionIntrospectionScope": "all"}
    found = answer_host_request(store, cfg, sid, "search-sessions", {"query": "old-secret"})["result"]
    assert found["totalMatches"] == 0
    store.record_call(
        sid,
        call_id="c1",
        parent_call_id=None,
        tool="t",
        args={},
        status="passed",
        summary=None,
        output=None,
        started=2.0,
        duration_s=0.0,
        conversation_id="conv",
        turn_id="turn",
    )
    assert store.tool_calls(sid)[0]["turn_id"] == "turn"
    store.close()


# -- two agents, real workers --------------------------------------------------------------------------------------
@pytest.mark.root
async def test_agent_bs_session_tools_cannot_see_agent_as_sessions(sandbox_tmp: Path) -> None:
    """Two agents in one policy, both with introspection at scope ``all`` and tool outputs, both using the frontend
    session name ``shared``: each sees only its own agent's sessions."""
    toolboxes = {
        slug: [
            system_toolbox(
                f"{slug}_sys",
                SESSION_CAPS,
                SessionIntrospectionScope="all",
                SessionIntrospectionIncludeToolOutputs=True,
            )
        ]
        for slug in ("alice", "bob")
    }
    policy = write_policy(sandbox_tmp, {slug: agent(slug, builtinToolboxes=boxes) for slug, boxes in toolboxes.items()})
    async with Supervisor.open(policy) as sup:
        marked = await sup.call(
            "system_alice_sys_search_sessions", {"query": "alice-secret-marker"}, session_id="shared"
        )
        assert marked.status == "passed", marked.data
        alice_list = (await sup.call("system_alice_sys_list_sessions", {}, session_id="shared")).structured
        [alice_session] = [s["sessionId"] for s in alice_list["sessions"]]
        assert alice_session == root_session_id(Owner("alice"), "shared")

        found = await sup.call("system_bob_sys_search_sessions", {"query": "alice-secret-marker"}, session_id="shared")
        assert found.status == "passed" and found.structured["totalMatches"] == 0, found.data
        listed = (await sup.call("system_bob_sys_list_sessions", {}, session_id="shared")).structured
        assert {s["agent"] for s in listed["sessions"]} == {"bob"}
        assert alice_session not in {s["sessionId"] for s in listed["sessions"]}
        read = await sup.call("system_bob_sys_read_session", {"session_id": alice_session}, session_id="shared")
        assert read.status == "error" and f"SessionNotFoundError: no session '{alice_session}'" in (read.data or "")
        # A session name that is alice's session id is one more session of bob's, not alice's.
        borrowed = await sup.call(
            "system_bob_sys_read_session", {"session_id": alice_session}, session_id=alice_session
        )
        assert borrowed.status == "error" and "SessionNotFoundError" in (borrowed.data or "")
        stats = (await sup.call("system_bob_sys_get_session_stats", {}, session_id="shared")).structured
        assert stats["totalSessions"] == 2  # bob's two sessions, nothing of alice's
        # And alice, with the same scope, still finds her own call.
        mine = await sup.call("system_alice_sys_search_sessions", {"query": "alice-secret-marker"}, session_id="other")
        assert [r["sessionId"] for r in mine.structured["results"]] == [alice_session]


@pytest.mark.root
async def test_a_policy_cap_refuses_scope_all_and_reading_tool_outputs(sandbox_tmp: Path) -> None:
    caps = {"introspection": {"scopes": ["parents-only", "children-only", "subtree"], "tool_outputs": False}}
    wide = write_policy(
        sandbox_tmp,
        {
            "alice": agent(
                "alice", builtinToolboxes=[system_toolbox("alice_sys", SESSION_CAPS, SessionIntrospectionScope="all")]
            )
        },
        sessions=caps,
    )
    with pytest.raises(PolicyRefused) as info:
        async with Supervisor.open(wide):
            pass
    assert str(info.value).startswith("toolbox alice_sys (agent alice): SessionIntrospectionScope 'all' is not among")
    outputs = write_policy(
        sandbox_tmp,
        {
            "alice": agent(
                "alice",
                builtinToolboxes=[
                    system_toolbox("alice_sys", SESSION_CAPS, SessionIntrospectionIncludeToolOutputs=True)
                ],
            )
        },
        sessions=caps,
    )
    with pytest.raises(PolicyRefused, match="the policy forbids reading tool outputs"):
        async with Supervisor.open(outputs):
            pass
    # The CLI says the same as an error, never a traceback.
    done = subprocess.run(
        [sys.executable, "-m", "supervisor", "check", "--policy", str(outputs)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": REPO},
        cwd=REPO,
    )
    assert done.returncode == 2 and done.stderr.startswith("agents-supervise: error: toolbox alice_sys (agent alice)")
    assert "Traceback" not in done.stderr


# -- conversation and turn ids -------------------------------------------------------------------------------------
def _ids_policy(root: Path) -> Path:
    tools = root / "tools"
    tools.mkdir()
    write_script(tools, "ids", describe_json("ids"), IDS_SCRIPT)
    return write_policy(
        root, {"tester": agent(bashToolboxes=[{"tag": "FileSystemDirectory", "contents": {"Path": "./tools"}}])}
    )


@pytest.mark.root
async def test_api_ids_are_generated_non_empty_and_stable_within_a_session(sandbox_tmp: Path) -> None:
    async with Supervisor.open(_ids_policy(sandbox_tmp)) as sup:
        first, second = [_ids((await sup.call("bash_ids", {}, session_id="s")).data or "") for _ in range(2)]
        assert all(first.values()) and all(second.values())
        assert first["S"] == second["S"] == root_session_id(Owner("tester"), "s") and first["A"] == "tester"
        assert first["C"] == second["C"]  # one conversation per session
        assert first["T"] != second["T"]  # a turn per call
        given = _ids((await sup.call("bash_ids", {}, session_id="s", conversation_id="c-9", turn_id="t-9")).data or "")
        assert (given["S"], given["C"], given["T"]) == (first["S"], "c-9", "t-9")
        default = _ids((await sup.call("bash_ids", {})).data or "")  # no name: this supervisor's own session
        assert default["S"] not in (first["S"], "") and default["C"]
        bad = await sup.call("bash_ids", {}, session_id="s", turn_id="a\nb")
        assert bad.status == "error" and "the turn id must be printable text" in (bad.data or "")
        sup.trace.flush()
        trace = [json.loads(line) for line in (sandbox_tmp / "state" / "trace.jsonl").read_text().splitlines()]
        starts = [r for r in trace if r.get("event") == "call_start" and r.get("tool") == "bash_ids"]
        assert [(r["conversation"], r["turn"]) for r in starts[:2]] == [
            (first["C"], first["T"]),
            (second["C"], second["T"]),
        ]
        assert sup.sessions is not None
        calls = sup.sessions.tool_calls(first["S"])
        assert [(c["conversation_id"], c["turn_id"]) for c in calls[:2]] == [
            (first["C"], first["T"]),
            (second["C"], second["T"]),
        ]


def _cli_call(policy: Path, *extra: str) -> dict[str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "supervisor", "call", "--policy", str(policy), *extra, "bash_ids"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": REPO},
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return _ids(json.loads(done.stdout)["data"])


@pytest.mark.slow
@pytest.mark.root
def test_cli_calls_get_a_session_each_unless_session_names_one(sandbox_tmp: Path) -> None:
    policy = _ids_policy(sandbox_tmp)
    one, two = _cli_call(policy), _cli_call(policy)
    assert one["S"] != two["S"] and one["C"] != two["C"] and all(one.values()) and all(two.values())
    named, again = _cli_call(policy, "--session", "work"), _cli_call(policy, "--session", "work")
    assert named["S"] == again["S"] == root_session_id(Owner("tester"), "work")
    assert named["C"] == again["C"] and named["T"] != again["T"]  # the session's conversation, a new turn
    given = _cli_call(policy, "--session", "work", "--conversation", "conv-x", "--turn", "turn-y")
    assert (given["S"], given["C"], given["T"]) == (named["S"], "conv-x", "turn-y")


@pytest.mark.root
async def test_mcp_meta_ids_reach_a_bash_tools_environment(sandbox_tmp: Path) -> None:
    policy = _ids_policy(sandbox_tmp)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "supervisor", "--policy", str(policy)],
        env={**os.environ, "PYTHONPATH": REPO},
        cwd=REPO,
    )
    with trio.fail_after(60):
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            given = await session.call_tool(
                "bash_ids", {}, meta={"conversationId": "conv-from-client", "turnId": "turn-42"}
            )
            assert not given.is_error, given
            sent = _ids(given.content[0].text)
            assert (sent["C"], sent["T"]) == ("conv-from-client", "turn-42") and sent["S"]
            plain = [_ids((await session.call_tool("bash_ids", {})).content[0].text) for _ in range(2)]
            assert plain[0]["S"] == plain[1]["S"] == sent["S"]  # one connection, one session with this agent
            assert plain[0]["C"] == plain[1]["C"] and plain[0]["C"] not in ("", "conv-from-client")
            assert plain[0]["T"] != plain[1]["T"] and all(p["T"] for p in plain)


@pytest.mark.root
async def test_lua_sees_the_calls_ids_and_tools_call_carries_them(sandbox_tmp: Path) -> None:
    tools = sandbox_tmp / "tools"
    tools.mkdir()
    write_script(tools, "ids", describe_json("ids"), IDS_SCRIPT)
    lua = {
        "tag": "LuaToolbox",
        "contents": {
            "Name": "lua",
            "Description": "scripts",
            "MaxMemoryMB": 32,
            "MaxExecutionTimeSeconds": 20,
            "AllowedTools": ["bash_ids"],
            "AllowedHosts": [],
        },
    }
    policy = write_policy(
        sandbox_tmp,
        {
            "tester": agent(
                bashToolboxes=[{"tag": "FileSystemDirectory", "contents": {"Path": "./tools"}}], builtinToolboxes=[lua]
            )
        },
    )
    script = (
        'local c = tools.context()\nlocal r = tools.call("bash_ids", {})\n'
        "return {c.session_id, c.conversation_id, c.turn_id, c.agent_id, r.result_txt}"
    )
    async with Supervisor.open(policy) as sup:
        result = await sup.call("lua_lua_execute", {"script": script}, session_id="s", turn_id="turn-1")
        assert result.status == "passed", result.data
        [[session, conversation, turn, agent_id, nested]] = json.loads(result.data or "")["values"]
        assert session == root_session_id(Owner("tester"), "s") and conversation and turn == "turn-1"
        assert agent_id == "tester"
        assert _ids(nested) == {"S": session, "C": conversation, "T": "turn-1", "A": "tester"}


@pytest.mark.root
async def test_by_default_a_sub_agent_does_not_see_its_callers_session_but_the_caller_sees_its_run(
    sandbox_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ``sessions.introspection.other_agents`` a sub-agent's ``parents-only`` finds nothing of its caller's
    (another agent's session), while the caller's ``subtree`` holds the sub-agent's run: its own call tree
    (``test_subtree_across_agents.py``; ``test_sessions.py`` has the same tree with the key set)."""
    monkeypatch.setenv("AGENTS_TEST_KEY", "k")

    def script(req: dict[str, Any]) -> Reply:
        last = req["messages"][-1]
        if last["role"] == "user":
            return call("system_helper_sys_list_sessions", {})
        return answer("sessions seen: " + last["content"].split("\n\n", 1)[1])

    with model_server(script) as server:
        helper = agent(
            "helper",
            modelUrl=server.url,
            builtinToolboxes=[
                system_toolbox("helper_sys", ["list-sessions"], SessionIntrospectionScope="parents-only")
            ],
        )
        main = agent(
            "main",
            modelUrl=server.url,
            extraAgents=[{"slug": "helper", "path": "helper.json"}],
            builtinToolboxes=[system_toolbox("main_sys", SESSION_CAPS)],
        )
        (sandbox_tmp / "helper.json").write_text(json.dumps(helper))
        policy = write_policy(
            sandbox_tmp, {"main": main}, model_keys={"test": "AGENTS_TEST_KEY"}, agent_loop=local_model()
        )
        async with Supervisor.open(policy) as sup:
            asked = await sup.call("io_prompt_agent_helper", {"what": "which sessions are above me?"}, session_id="s1")
            assert asked.status == "passed", asked.data
            seen = json.loads((asked.data or "").removeprefix("sessions seen: "))
            assert seen["sessions"] == [] and seen["scope"] == "parents-only"
            listed = await sup.call("system_main_sys_list_sessions", {}, session_id="s1")
            mine = root_session_id(Owner("main"), "s1")
            assert sup.sessions is not None
            [run] = [sid for sid, parent in sup.sessions.parents().items() if parent == mine]
            assert {s["sessionId"]: s["agent"] for s in listed.structured["sessions"]} == {mine: "main", run: "helper"}


@pytest.mark.root
async def test_run_agent_runs_in_the_named_session_of_that_agent(
    sandbox_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTS_TEST_KEY", "k")
    with model_server(lambda req: answer("done")) as server:
        policy = write_policy(
            sandbox_tmp,
            {"solo": agent("solo", modelUrl=server.url)},
            model_keys={"test": "AGENTS_TEST_KEY"},
            agent_loop=local_model(),
        )
        async with Supervisor.open(policy) as sup:
            for _ in range(2):
                assert (await sup.run_agent("solo", "hi", session_id="r")).status == "passed"
            assert (await sup.run_agent("solo", "hi")).status == "passed"
            assert sup.sessions is not None
            parents = sup.sessions.parents()
            runs = [parent for sid, parent in parents.items() if parent is not None]
            named = root_session_id(Owner("solo"), "r")
            assert runs.count(named) == 2  # both runs are children of solo's session "r"
            [other] = [p for p in runs if p != named]  # the third, of this supervisor's own default session
            assert sup.sessions.owners()[other] == Owner("solo")
            assert all(owner == Owner("solo") for owner in sup.sessions.owners().values())
            bad = await sup.run_agent("solo", "hi", session_id="")
            assert bad.status == "error" and "the session name must have 1 to 200 characters" in (bad.data or "")
