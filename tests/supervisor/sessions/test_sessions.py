"""The session store: scopes (pure), the host-request answers (output shapes, limits, refusals), and session
introspection through real System toolbox workers, from a frontend and from inside a sub-agent."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from supervisor._supervisor import Supervisor
from supervisor.sessions._ids import Owner, root_session_id
from supervisor.sessions._introspection import answer_host_request
from supervisor.sessions._scopes import scope_members
from supervisor.sessions._store import SessionStore
from tests._policies import agent, local_model, system_toolbox, write_policy
from tests.supervisor._model_server import Reply, answer, call, model_server

if TYPE_CHECKING:
    from pathlib import Path

SESSION_CAPS = ["list-sessions", "search-sessions", "read-session", "get-session-stats"]
#: root -> a -> a1, root -> b; other is unrelated
PARENTS: dict[str, str | None] = {"root": None, "a": "root", "a1": "a", "b": "root", "other": None}


@pytest.mark.parametrize(
    ("scope", "current", "expected"),
    [
        ("subtree", "root", {"root", "a", "a1", "b"}),
        ("subtree", "a", {"a", "a1"}),
        ("children-only", "root", {"a", "a1", "b"}),
        ("children-only", "a1", set()),
        ("parents-only", "a1", {"a", "root"}),
        ("parents-only", "root", set()),
        ("all", "a1", {"root", "a", "a1", "b", "other"}),
    ],
)
def test_scope_members(scope: str, current: str, expected: set[str]) -> None:
    assert scope_members(scope, current, PARENTS) == expected


def test_unknown_scope_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown session scope 'everything'"):
        scope_members("everything", "root", PARENTS)


def _store() -> SessionStore:
    """root -> a, root -> b, every session the agent main's (the owner filter has tests of its own)."""
    store = SessionStore(":memory:")
    store.ensure_session("root", agent="main")
    store.start_child("a", "conv-a", "root", "main", "c1")
    store.add_turn("a", "user", "please find the needle in the haystack")
    store.add_turn("a", "tool", "secret tool output with a token", tool="system_x_date")
    store.add_turn("a", "assistant", "found it")
    store.finish("a", "idle")
    store.start_child("b", "conv-b", "root", "main", "c2")
    store.record_call(
        "root",
        call_id="c1",
        parent_call_id=None,
        tool="io_prompt_agent_helper",
        args={"what": "x"},
        status="passed",
        summary="ok",
        output="found it",
        started=1.0,
        duration_s=0.5,
    )
    return store


def _ask(store: SessionStore, current: str, op: str, args: dict[str, Any] | None = None, **config: Any) -> Any:
    cfg = {"Capabilities": SESSION_CAPS, **config}
    return answer_host_request(store, cfg, current, op, args or {})


def test_list_sessions_shape_scope_and_max_results() -> None:
    store = _store()
    listed = _ask(store, "root", "list-sessions")["result"]
    assert listed["totalAccessible"] == 3 and listed["scope"] == "subtree"
    by_id = {s["sessionId"]: s for s in listed["sessions"]}
    assert by_id["a"]["conversationId"] == "conv-a" and by_id["a"]["turnCount"] == 3
    assert by_id["a"]["isChild"] and not by_id["a"]["isParent"] and by_id["a"]["status"] == "idle"
    assert by_id["b"]["isLocked"] and by_id["b"]["status"] == "running"
    assert by_id["root"]["modificationTime"].endswith("Z")
    capped = _ask(store, "root", "list-sessions", SessionIntrospectionMaxResults=1)["result"]
    assert len(capped["sessions"]) == 1 and capped["totalAccessible"] == 3 and capped["truncated"]
    # a frontend's session has tool calls, no turns: read-session shows its calls as turns, and counts them so
    root = _ask(store, "root", "read-session", {"session_id": "root"})["result"]
    assert by_id["root"]["turnCount"] == root["totalTurns"] == 1 and by_id["a"]["turnCount"] == 3
    parents = _ask(store, "a", "list-sessions", SessionIntrospectionScope="parents-only")["result"]
    assert [(s["sessionId"], s["isParent"]) for s in parents["sessions"]] == [("root", True)]


def test_read_session_hides_tool_outputs_unless_the_config_allows() -> None:
    store = _store()
    hidden = _ask(store, "root", "read-session", {"session_id": "a", "include_tool_responses": True})["result"]
    assert hidden["content"].splitlines() == [
        "Turn 1: [User] please find the needle in the haystack",
        "Turn 2: [Tool system_x_date] (output not shown)",
        "Turn 3: [LLM] found it",
    ]
    assert hidden["totalTurns"] == 3 and hidden["access"] == "granted" and hidden["format"] == "condensed-text"
    shown = _ask(
        store, "root", "read-session", {"session_id": "a", "take_n": 2}, SessionIntrospectionIncludeToolOutputs=True
    )["result"]
    assert shown["returnedTurns"] == 2 and "secret tool output" in shown["content"]
    # a session with only tool calls (a frontend's) shows its calls
    root = _ask(store, "root", "read-session", {"session_id": "root"})["result"]
    assert root["content"] == 'Turn 1: [Tool call] io_prompt_agent_helper {"what": "x"} -> passed'


def test_search_sessions_respects_scope_and_tool_outputs() -> None:
    store = _store()
    found = _ask(store, "root", "search-sessions", {"query": "NEEDLE"})["result"]
    assert found["totalMatches"] == 1 and found["results"][0]["sessionId"] == "a"
    assert "needle in the haystack" in found["results"][0]["preview"]
    assert _ask(store, "root", "search-sessions", {"query": "token"})["result"]["totalMatches"] == 0
    with_outputs = _ask(
        store, "root", "search-sessions", {"query": "token"}, SessionIntrospectionIncludeToolOutputs=True
    )["result"]
    assert with_outputs["results"][0]["matchType"] == "tool_output"
    assert _ask(store, "b", "search-sessions", {"query": "needle"})["result"]["totalMatches"] == 0


def test_refusals_say_why() -> None:
    store = _store()
    store.ensure_session("other", agent="main")
    denied = _ask(store, "b", "read-session", {"session_id": "a"})
    assert denied == {"error": "SessionAccessDeniedError: session 'a' is outside this toolbox's scope (subtree)"}
    unknown = "5f0c1d1e-0000-4000-8000-000000000000"
    assert _ask(store, "root", "read-session", {"session_id": unknown})["error"].startswith("SessionNotFoundError")
    # the seed's own example id is not of the form session ids have: InvalidSessionIdError, not "not found"
    malformed = _ask(store, "root", "read-session", {"session_id": "target-session-uuid"})["error"]
    assert malformed.startswith("InvalidSessionIdError: 'target-session-uuid' is not a session id")
    assert _ask(store, "root", "read-session", {})["error"].startswith("InvalidSessionIdError")
    assert _ask(store, "root", "search-sessions", {"query": " "})["error"].startswith("MissingParameterError")
    not_enabled = answer_host_request(
        store, {"Capabilities": ["list-sessions"]}, "root", "read-session", {"session_id": "a"}
    )
    assert not_enabled["error"].startswith("CapabilityNotEnabledError: read-session")
    assert answer_host_request(None, {}, "root", "list-sessions", {})["error"].startswith(
        "SessionStoreNotConfiguredError"
    )
    stats = _ask(store, "root", "get-session-stats")["result"]
    assert stats == {
        "totalSessions": 3,
        "totalTurnsAcrossAllSessions": 4,  # a's 3 turns and root's one tool call (a frontend's session has no turns)
        "totalToolCalls": 1,
        "scope": "subtree",
        "note": "counts cover the sessions this toolbox's scope lets it see",
    }


def test_sessions_left_running_are_marked_interrupted_on_reopen(tmp_path: Path) -> None:
    path = str(tmp_path / "s.sqlite3")
    store = SessionStore(path)
    store.start_child("a", "conv", "root", "main", None)
    store.close()
    again = SessionStore(path)
    assert again.rows({"a"})[0].status == "interrupted"
    again.close()


@pytest.mark.root
async def test_introspection_through_real_workers_and_a_subagent(
    sandbox_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTS_TEST_KEY", "k")

    def script(req: dict[str, Any]) -> Reply:
        last = req["messages"][-1]
        if last["role"] == "user":
            return call("system_helper_sys_list_sessions", {})
        reply = answer("sessions seen: " + last["content"].split("\n\n", 1)[1])
        reply.body["choices"][0]["message"]["reasoning_content"] = "the list has what I need"  # Kimi's field
        return reply

    with model_server(script) as server:
        helper = agent(
            "helper",
            modelUrl=server.url,
            builtinToolboxes=[
                system_toolbox(
                    "helper_sys", ["list-sessions", "read-session"], SessionIntrospectionScope="parents-only"
                )
            ],
        )
        main = agent(
            "main",
            modelUrl=server.url,
            extraAgents=[{"slug": "helper", "path": "helper.json"}],
            builtinToolboxes=[system_toolbox("main_sys", SESSION_CAPS, SessionIntrospectionMaxResults=5)],
        )
        (sandbox_tmp / "helper.json").write_text(json.dumps(helper))
        # The policy lets introspection see other agents' sessions: main its sub-agent's run, helper main's session.
        policy = write_policy(
            sandbox_tmp,
            {"main": main},
            model_keys={"test": "AGENTS_TEST_KEY"},
            sessions={"introspection": {"other_agents": True}},
            agent_loop=local_model(),
        )
        s1, s2 = (root_session_id(Owner("main"), name) for name in ("s1", "s2"))  # the frontend acts as main
        async with Supervisor.open(policy) as sup:
            asked = await sup.call("io_prompt_agent_helper", {"what": "which sessions are above me?"}, session_id="s1")
            assert asked.status == "passed", asked.data
            seen = json.loads((asked.data or "").removeprefix("sessions seen: "))
            # parents-only, from inside the sub-agent: just the frontend's session s1
            assert [s["sessionId"] for s in seen["sessions"]] == [s1] and seen["scope"] == "parents-only"
            assert seen["sessions"][0]["isParent"]

            listed = await sup.call("system_main_sys_list_sessions", {}, session_id="s1")
            assert listed.status == "passed", listed.data
            sessions = listed.structured["sessions"]
            child = next(s for s in sessions if s["sessionId"] != s1)
            assert {s["sessionId"] for s in sessions} == {s1, child["sessionId"]}
            assert child["isChild"] and child["agent"] == "helper" and child["status"] == "idle"

            read = await sup.call("system_main_sys_read_session", {"session_id": child["sessionId"]}, session_id="s1")
            lines = read.structured["content"].splitlines()
            assert lines[0] == "Turn 1: [User] which sessions are above me?"
            assert lines[1] == "Turn 2: [Tool system_helper_sys_list_sessions] (output not shown)"
            assert lines[2].startswith("Turn 4: [LLM] sessions seen:") and len(lines) == 3
            # the seed's read-session example: include_thinking shows the model's reasoning, kept as a turn
            thought = await sup.call(
                "system_main_sys_read_session",
                {
                    "session_id": child["sessionId"],
                    "take_n": 10,
                    "include_thinking": True,
                    "include_tool_responses": True,
                },
                session_id="s1",
            )
            assert thought.structured["content"].splitlines()[2] == "Turn 3: [Thinking] the list has what I need"
            assert thought.structured["totalTurns"] == read.structured["totalTurns"] == 4
            assert child["turnCount"] == 4  # list-sessions' turnCount is read-session's totalTurns

            found = await sup.call("system_main_sys_search_sessions", {"query": "above me"}, session_id="s1")
            matches = {r["sessionId"]: r["matchType"] for r in found.structured["results"]}
            assert matches == {child["sessionId"]: "content", s1: "tool_call"}  # s1's call carried the prompt

            # another frontend session sees neither s1 nor its child
            other = await sup.call("system_main_sys_list_sessions", {}, session_id="s2")
            assert [s["sessionId"] for s in other.structured["sessions"]] == [s2]
            denied = await sup.call("system_main_sys_read_session", {"session_id": s1}, session_id="s2")
            assert denied.status == "error"
            assert f"SessionAccessDeniedError: session '{s1}' is outside this toolbox's scope (subtree)" in (
                denied.data or ""
            )
            stats = await sup.call("system_main_sys_get_session_stats", {}, session_id="s1")
            assert stats.structured["totalSessions"] == 2 and stats.structured["totalToolCalls"] >= 2
    assert (sandbox_tmp / "state" / "sessions.sqlite3").exists()


def test_a_failing_write_is_counted_never_raised() -> None:
    store = _store()
    store.flush()
    store._db.execute("PRAGMA query_only = ON")  # every later write fails, as on a full disk
    store.add_turn("a", "user", "lost")
    store.record_call(
        "a",
        call_id="c9",
        parent_call_id=None,
        tool="t",
        args={},
        status="passed",
        summary=None,
        output=None,
        started=0.0,
        duration_s=0.0,
    )
    store.flush()  # writes are batched; the supervisor flushes every 0.2 s and before every read
    # the turn, a's row (made by start_child, unknown to ensure_session), the call, and a's modified time
    assert store.write_errors == 4 and "readonly" in (store.last_write_error or "")
    assert _ask(store, "root", "get-session-stats")["result"]["totalTurnsAcrossAllSessions"] == 4


def test_prune_deletes_old_sessions_with_their_turns_and_calls_but_not_running_ones() -> None:
    store = _store()  # root and a (idle) and b (running), modified just now
    store.flush()
    store._db.execute("UPDATE sessions SET modified = 1000 WHERE id IN ('root', 'a', 'b')")
    assert store.prune(older_than=2000) == 2  # root and a; b is still running
    assert set(store.parents()) == {"b"}
    assert store.turns("a") == [] and store.tool_calls("root") == []
    assert store.prune(older_than=2000) == 0
    # A session seen again after it was pruned starts afresh.
    store.record_call(
        "root",
        call_id="c9",
        parent_call_id=None,
        tool="t",
        args={},
        status="passed",
        summary=None,
        output="",
        started=3000.0,
        duration_s=0.1,
    )
    assert set(store.parents()) == {"b", "root"} and len(store.tool_calls("root")) == 1


def test_prune_deletes_old_records_of_a_session_still_in_use_but_not_of_a_running_one() -> None:
    """A session that never ends (one MCP connection for months) keeps only the records of the retention period,
    so the store stays bounded by the traffic of ``keep_days`` (issue 19)."""
    store = _store()  # root (in use), a (idle) and b (running)
    for sid in ("root", "b"):
        for started in (1000.0, 3000.0):
            store.record_call(
                sid,
                call_id=f"{sid}-{started}",
                parent_call_id=None,
                tool="t",
                args={},
                status="passed",
                summary=None,
                output="",
                started=started,
                duration_s=0.1,
            )
    store.add_turn("b", "user", "still looping")
    store.flush()
    store._db.execute("UPDATE turns SET ts = 1000")
    # every session was modified just now (the calls above): none goes, their old records do
    assert store.prune(older_than=2000) == 0
    assert store.pruned_records == 3 + 2  # a's three turns; root's call of 1000 and the c1 of _store (started 1.0)
    assert [c["started"] for c in store.tool_calls("root")] == [3000.0]
    assert store.turns("a") == []
    assert sorted(c["started"] for c in store.tool_calls("b")) == [1000.0, 3000.0]  # running: untouched
    assert len(store.turns("b")) == 1
    assert set(store.parents()) == {"root", "a", "b"}


@pytest.mark.root  # compiles a policy with cgroup limits: making a cgroup needs root
async def test_the_supervisor_prunes_sessions_past_keep_days_when_it_starts(sandbox_tmp: Path) -> None:
    import time

    path = write_policy(sandbox_tmp, {"tester": agent(builtinToolboxes=[system_toolbox()])}, sessions={"keep_days": 7})
    old = SessionStore(str(sandbox_tmp / "state" / "sessions.sqlite3"))
    for sid, age_days in (("ancient", 30), ("recent", 1)):
        old.ensure_session(sid)
        old.flush()
        old._db.execute("UPDATE sessions SET modified = ? WHERE id = ?", (time.time() - age_days * 86400, sid))
    old.close()
    async with Supervisor.open(path) as sup:
        assert sup.sessions is not None
        assert set(sup.sessions.parents()) == {"recent"}
    trace = [json.loads(line) for line in (sandbox_tmp / "state" / "trace.jsonl").read_text().splitlines()]
    pruned = [(r["sessions"], r["records"], r["keep_days"]) for r in trace if r["event"] == "sessions_pruned"]
    assert pruned == [(1, 0, 7)]
