"""Sub-agents for real: agent loops against a scripted OpenAI-compatible server on loopback, tool calls through the
portal into confined workers, depth across agents, retries, and bad model answers ending within the limits."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from supervisor._supervisor import Supervisor
from tests._policies import agent, local_model, system_toolbox, write_policy
from tests.supervisor._model_server import Reply, answer, call, message, model_server, streamed

pytestmark = pytest.mark.root

KEY = "sk-test-0123456789abcdef"


def _last(request: dict[str, Any]) -> dict[str, Any]:
    return request["messages"][-1]


def _system(request: dict[str, Any]) -> str:
    return next((m["content"] for m in request["messages"] if m["role"] == "system"), "")


def _policy(root: Path, url: str, *, loop: dict[str, Any] | None = None, **policy: Any) -> Path:
    """main (own System toolbox) names helper (another System toolbox) as a sub-agent."""
    helper = agent(
        "helper",
        modelUrl=url,
        systemPrompt=["You are helper."],
        builtinToolboxes=[system_toolbox("helper_sys", ["date", "hostname"])],
    )
    main = agent(
        "main",
        modelUrl=url,
        systemPrompt=["You are main."],
        builtinToolboxes=[system_toolbox("main_sys", ["date"])],
        extraAgents=[{"slug": "helper", "path": "helper.json"}],
    )
    (root / "helper.json").write_text(json.dumps(helper))
    return write_policy(
        root,
        {"main": main},
        model_keys={"test": "AGENTS_TEST_KEY"},
        agent_loop=local_model(
            {
                "max_steps": 4,
                "retries": 2,
                "backoff_initial_s": 0.01,
                "backoff_max_s": 0.05,
                "request_timeout_s": 5,
                **(loop or {}),
            }
        ),
        **policy,
    )


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTS_TEST_KEY", KEY)


def _trace(root: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (root / "state" / "trace.jsonl").read_text().splitlines()]


async def test_subagent_calls_its_own_tool_through_the_portal(sandbox_tmp: Path) -> None:
    def script(req: dict[str, Any]) -> Reply:
        if _last(req)["role"] == "user":
            return streamed("Let me look.", [("system_helper_sys_hostname", "{}")])
        return answer("The host is named " + json.loads(_last(req)["content"].split("\n\n", 1)[1])["data"]["hostname"])

    with model_server(script) as server:
        async with Supervisor.open(_policy(sandbox_tmp, server.url)) as sup:
            assert "io_prompt_agent_helper" in {t.name for t in sup.list_tools()}
            result = await sup.call("io_prompt_agent_helper", {"what": "What is the host's name?"})
            assert sup.sessions is not None  # the run's own session is kept on disk, not in memory, once it ended
            assert set(sup.sessions._known) == set(sup.sessions._roots) and len(sup.sessions._roots) == 1
    assert result.status == "passed", result.data
    assert result.data is not None and result.data.startswith("The host is named ")
    first = server.requests[0]
    assert first["model"] == "test-model" and first["stream"] is True
    assert _system(first) == "You are helper."
    assert _last(first) == {"role": "user", "content": "What is the host's name?"}
    # helper's tools only: its own toolbox, not main's
    names = {t["function"]["name"] for t in first["tools"]}
    assert names == {"system_helper_sys_date", "system_helper_sys_hostname"}
    assert all(h["authorization"] == f"Bearer {KEY}" for h in server.headers)
    # the streamed tool call was assembled and answered as a tool message
    tool_msg = next(m for m in server.requests[1]["messages"] if m["role"] == "tool")
    assert tool_msg["tool_call_id"] == "call_0" and tool_msg["content"].startswith("status: passed")
    records = _trace(sandbox_tmp)
    starts = {r["tool"]: r for r in records if r["event"] == "call_start"}
    outer, inner = starts["io_prompt_agent_helper"], starts["system_helper_sys_hostname"]
    assert inner["parent_call_id"] == outer["call_id"] and inner["depth"] == 2 and inner["caller"] == "agent helper"
    assert KEY not in (sandbox_tmp / "state" / "trace.jsonl").read_text()


async def test_subagent_may_not_call_tools_outside_its_set(sandbox_tmp: Path) -> None:
    def script(req: dict[str, Any]) -> Reply:
        tools = [m for m in req["messages"] if m["role"] == "tool"]
        if not tools:
            return call("system_main_sys_date", {})  # main's tool: exists, not helper's
        if len(tools) == 1:
            return call("rm_everything", {"path": "/"})  # exists nowhere
        return answer("done")

    with model_server(script) as server:
        async with Supervisor.open(_policy(sandbox_tmp, server.url)) as sup:
            result = await sup.call("io_prompt_agent_helper", {"what": "go"})
    assert result.status == "passed"
    not_allowed = server.last_tool_message(1)
    assert "Tool 'system_main_sys_date' is not allowed for agent helper" in not_allowed
    assert "Allowed tools: system_helper_sys_date, system_helper_sys_hostname" in not_allowed
    assert "Tool not found: 'rm_everything'" in server.last_tool_message(2)
    kinds = [r["kind"] for r in _trace(sandbox_tmp) if r["event"] == "portal_refusal"]
    assert kinds == ["PortalToolNotAllowed", "PortalToolNotFound"]


async def test_invalid_json_arguments_are_answered_to_the_model(sandbox_tmp: Path) -> None:
    def script(req: dict[str, Any]) -> Reply:
        if _last(req)["role"] == "user":
            return call("system_helper_sys_date", '{"capability": "date",')
        return answer("ok")

    with model_server(script) as server:
        async with Supervisor.open(_policy(sandbox_tmp, server.url)) as sup:
            result = await sup.call("io_prompt_agent_helper", {"what": "date?"})
    assert result.status == "passed" and result.data == "ok"
    text = server.last_tool_message()
    assert text.startswith("status: error") and "not valid JSON" in text and "system_helper_sys_date" in text


async def test_endless_tool_calls_stop_at_the_step_limit(sandbox_tmp: Path) -> None:
    with model_server(lambda req: call("system_helper_sys_date", {})) as server:
        async with Supervisor.open(_policy(sandbox_tmp, server.url, loop={"max_steps": 3})) as sup:
            result = await sup.call("io_prompt_agent_helper", {"what": "loop"})
    assert result.status == "error"
    assert "step limit of 3 model requests" in (result.data or "")
    assert len(server.requests) == 3
    assert any(r["event"] == "limit_hit" and r["limit"] == "agent_loop.max_steps" for r in _trace(sandbox_tmp))


async def test_429_then_success_is_retried(sandbox_tmp: Path) -> None:
    def script(req: dict[str, Any]) -> Reply:
        if len(server.requests) == 1:
            return Reply("status", {"error": {"message": "slow down"}}, status=429)
        return answer("after the retry")

    with model_server(script) as server:
        async with Supervisor.open(_policy(sandbox_tmp, server.url)) as sup:
            result = await sup.call("io_prompt_agent_helper", {"what": "hi"})
    assert result.status == "passed" and result.data == "after the retry"
    assert len(server.requests) == 2
    retries = [r for r in _trace(sandbox_tmp) if r["event"] == "model_retry"]
    assert len(retries) == 1 and retries[0]["status"] == 429 and "slow down" in retries[0]["reason"]


async def test_transient_false_vetoes_a_retry(sandbox_tmp: Path) -> None:
    quota = {"error": {"message": "monthly quota exhausted"}, "metadata": [["transient", "false"]]}
    with model_server(lambda req: Reply("status", quota, status=429)) as server:
        async with Supervisor.open(_policy(sandbox_tmp, server.url)) as sup:
            result = await sup.call("io_prompt_agent_helper", {"what": "hi"})
    assert result.status == "error" and len(server.requests) == 1
    assert "HTTP 429: monthly quota exhausted" in (result.data or "")
    assert result.meta("transient") == "false"


@pytest.mark.parametrize("broken", ["broken_sse", "broken_json"])
async def test_a_broken_answer_is_retried(sandbox_tmp: Path, broken: str) -> None:
    def script(req: dict[str, Any]) -> Reply:
        if len(server.requests) == 1:
            return Reply(broken, body=message("this answer is cut " * 20), chunks=streamed("x" * 30).chunks)
        return streamed("whole now")

    with model_server(script) as server:
        async with Supervisor.open(_policy(sandbox_tmp, server.url)) as sup:
            result = await sup.call("io_prompt_agent_helper", {"what": "hi"})
    assert result.status == "passed" and result.data == "whole now"
    assert len(server.requests) == 2
    reason = next(r for r in _trace(sandbox_tmp) if r["event"] == "model_retry")["reason"]
    assert "broke" in reason


async def test_retries_are_bounded(sandbox_tmp: Path) -> None:
    with model_server(lambda req: Reply("status", {"error": "overloaded"}, status=503)) as server:
        async with Supervisor.open(_policy(sandbox_tmp, server.url)) as sup:
            result = await sup.call("io_prompt_agent_helper", {"what": "hi"})
    assert result.status == "error" and len(server.requests) == 3  # 1 + retries: 2
    assert "HTTP 503: overloaded (after 3 attempts)" in (result.data or "")


async def test_an_endpoint_that_hangs_ends_at_the_request_timeout(sandbox_tmp: Path) -> None:
    with model_server(lambda req: Reply("hang")) as server:
        policy = _policy(sandbox_tmp, server.url, loop={"request_timeout_s": 0.3, "retries": 1})
        async with Supervisor.open(policy) as sup:
            start = time.monotonic()
            result = await sup.call("io_prompt_agent_helper", {"what": "hi"})
            elapsed = time.monotonic() - start
    assert result.status == "error"
    assert "did not answer within 0.3 s (after 2 attempts)" in (result.data or "")
    assert len(server.requests) == 2 and elapsed < 3


async def test_an_endpoint_that_answers_html_is_a_clear_error(sandbox_tmp: Path) -> None:
    with model_server(lambda req: Reply("html")) as server:
        async with Supervisor.open(_policy(sandbox_tmp, server.url)) as sup:
            result = await sup.call("io_prompt_agent_helper", {"what": "hi"})
    assert result.status == "error" and len(server.requests) == 1
    assert "text/html that is not JSON" in (result.data or "") and "Welcome to nginx" in (result.data or "")


async def test_a_missing_api_key_is_refused_before_any_request(
    sandbox_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGENTS_TEST_KEY")
    with model_server(lambda req: answer("never")) as server:
        async with Supervisor.open(_policy(sandbox_tmp, server.url)) as sup:
            result = await sup.call("io_prompt_agent_helper", {"what": "hi"})
    assert result.status == "error" and server.requests == []
    assert "environment variable AGENTS_TEST_KEY" in (result.data or "")


async def test_nested_agents_stop_at_the_depth_limit_with_the_stack(sandbox_tmp: Path) -> None:
    def script(req: dict[str, Any]) -> Reply:
        me = _system(req).split()[-1].rstrip(".")
        other = "beta" if me == "alpha" else "alpha"
        if _last(req)["role"] == "user":
            return call(f"io_prompt_agent_{other}", {"what": f"{me} asks"})
        return answer(f"{me} got: {_last(req)['content']}")

    with model_server(script) as server:
        alpha = agent(
            "alpha",
            modelUrl=server.url,
            systemPrompt=["You are alpha."],
            extraAgents=[{"slug": "beta", "path": "beta.json"}],
        )
        beta = agent(
            "beta",
            modelUrl=server.url,
            systemPrompt=["You are beta."],
            extraAgents=[{"slug": "alpha", "path": "alpha.json"}],
        )
        (sandbox_tmp / "beta.json").write_text(json.dumps(beta))
        policy = write_policy(
            sandbox_tmp,
            {"alpha": alpha},
            model_keys={"test": "AGENTS_TEST_KEY"},
            max_call_depth=4,
            agent_loop=local_model(),
        )
        async with Supervisor.open(policy) as sup:
            result = await sup.call("io_prompt_agent_alpha", {"what": "start"})
    assert result.status == "passed", result.data
    # frontend -> alpha (1) -> beta (2) -> alpha (3) -> beta (4) -> alpha refused (would be 5)
    assert len(server.requests) == 4 * 2
    text = result.data or ""
    assert text.startswith("alpha got: status: passed")
    assert "Call depth limit of 4 reached: calling 'io_prompt_agent_alpha' would be depth 5" in text
    assert (
        "Call stack: io_prompt_agent_alpha (agent alpha, depth 1) -> io_prompt_agent_beta (agent beta, depth 2) "
        "-> io_prompt_agent_alpha (agent alpha, depth 3) -> io_prompt_agent_beta (agent beta, depth 4) "
        "-> io_prompt_agent_alpha."
    ) in text
    refusals = [r for r in _trace(sandbox_tmp) if r["event"] == "portal_refusal"]
    assert [r["kind"] for r in refusals] == ["PortalDepthExceeded"] and refusals[0]["caller"] == "agent beta"


def test_cli_run_prints_the_answer(sandbox_tmp: Path) -> None:
    with model_server(lambda req: answer(f"answer to: {_last(req)['content']}")) as server:
        policy = _policy(sandbox_tmp, server.url)
        repo = str(Path(__file__).resolve().parents[3])
        env = {**os.environ, "PYTHONPATH": repo}
        done = subprocess.run(
            [sys.executable, "-m", "supervisor", "run", "--policy", str(policy), "--agent", "main", "say hi"],
            capture_output=True,
            text=True,
            env=env,
            cwd=repo,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "answer to: say hi"
        assert {t["function"]["name"] for t in server.requests[0]["tools"]} == {
            "system_main_sys_date",
            "io_prompt_agent_helper",
        }
        bad = subprocess.run(
            [sys.executable, "-m", "supervisor", "run", "--policy", str(policy), "--agent", "nobody", "x"],
            capture_output=True,
            text=True,
            env=env,
            cwd=repo,
            timeout=60,
        )
        assert bad.returncode == 2 and "no agent 'nobody' is loaded; loaded agents: main, helper" in bad.stderr
        assert "Traceback" not in bad.stderr


# ------------------------------------------------------------------------------------------ the agent tree
def test_subagents_come_from_extra_agents_and_tool_directory_json(sandbox_tmp: Path) -> None:
    from supervisor.config._agent_tree import expand_agents
    from supervisor.config._loader import load_config

    tools = sandbox_tmp / "tools"
    tools.mkdir()
    (tools / "zed.json").write_text(json.dumps(agent("zed", extraAgents=[{"slug": "main", "path": "../main.json"}])))
    (tools / "notes.txt").write_text("not an agent")
    (sandbox_tmp / "helper.json").write_text(json.dumps(agent("helper")))
    main = agent("main", toolDirectory="tools", extraAgents=[{"slug": "helper", "path": "helper.json"}])
    tree = expand_agents(load_config(str(write_policy(sandbox_tmp, {"main": main}))))
    assert [a.slug for a in tree.config.agents] == ["main", "helper", "zed"]
    assert dict(tree.subagents) == {"main": ("helper", "zed"), "helper": (), "zed": ("main",)}
    assert tree.subagent_slugs == ["helper", "zed", "main"]
    assert expand_agents(tree.config).subagents == tree.subagents  # idempotent


def test_duplicate_mismatched_and_broken_subagent_files_are_load_errors_of_the_naming_agent(sandbox_tmp: Path) -> None:
    """What an agent file names as a sub-agent never stops the supervisor (other tenants' agents load): each
    problem is the naming agent's load error and that sub-agent is left out."""
    from supervisor.config._agent_tree import expand_agents
    from supervisor.config._loader import load_config

    (sandbox_tmp / "one.json").write_text(json.dumps(agent("twin")))
    (sandbox_tmp / "two.json").write_text(json.dumps(agent("twin")))
    (sandbox_tmp / "bad.json").write_text('{"slug": "bad", ')
    (sandbox_tmp / "taken.json").write_text(json.dumps(agent("other")))  # the slug of one of the policy's agents
    extra = [
        {"slug": "twin", "path": "one.json"},
        {"slug": "twin", "path": "two.json"},
        {"slug": "bad", "path": "bad.json"},
        {"slug": "other", "path": "taken.json"},
        {"slug": "wrong", "path": "one.json"},
    ]
    policy = write_policy(sandbox_tmp, {"main": agent("main", extraAgents=extra), "other": agent("other")})
    tree = expand_agents(load_config(str(policy)))
    assert [a.slug for a in tree.config.agents] == ["main", "other"]
    assert dict(tree.subagents) == {"main": (), "other": ()}
    errors = [(e["agent"], e["source"].split(" ", 1)[1], e["message"]) for e in tree.load_errors]
    assert [e[:2] for e in errors] == [("main", f"$.contents.extraAgents[{i}]") for i in range(5)]
    one, two = str(sandbox_tmp / "one.json"), str(sandbox_tmp / "two.json")
    assert f"{one}: its slug 'twin' is claimed by another sub-agent file too ({two}, left out as well" in errors[0][2]
    assert f"{two}: its slug 'twin' is claimed by another sub-agent file too ({one}, left out as well" in errors[1][2]
    assert errors[2][2].startswith(f"sub-agent file {sandbox_tmp / 'bad.json'} does not load: ")
    assert "malformed JSON" in errors[2][2]
    assert (
        f"its slug 'other' is already used by {sandbox_tmp / 'other.json'}, one of the policy's agents" in errors[3][2]
    )
    assert f"extraAgents names slug 'wrong' but {one} says 'twin'" in errors[4][2]
    assert all(m.endswith("; that sub-agent is left out") for *_, m in errors)


def test_a_missing_subagent_file_is_a_load_error_of_its_agent(sandbox_tmp: Path) -> None:
    (sandbox_tmp / "helper.json").write_text(json.dumps(agent("helper", builtinToolboxes=[system_toolbox("h")])))
    main = agent(
        "main",
        builtinToolboxes=[system_toolbox("m")],
        extraAgents=[{"slug": "gone", "path": "gone.json"}, {"slug": "helper", "path": "helper.json"}],
    )
    policy = write_policy(sandbox_tmp, {"main": main})
    repo = str(Path(__file__).resolve().parents[3])
    env = {**os.environ, "PYTHONPATH": repo}
    for command in ("check", "tools"):
        done = subprocess.run(
            [sys.executable, "-m", "supervisor", command, "--policy", str(policy)],
            capture_output=True,
            text=True,
            env=env,
            cwd=repo,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        # `tools` prints "load error: <whose>: ...", `check`'s summary lists them under "load errors (N):"
        heading = "load errors (1):\n  " if command == "check" else "load error: "
        assert f"{heading}agent main: {sandbox_tmp / 'main.json'} $.contents.extraAgents[0]: " in done.stdout
        assert f"sub-agent file not found: {sandbox_tmp / 'gone.json'}; that sub-agent is left out" in done.stdout
    done = subprocess.run(
        [sys.executable, "-m", "supervisor", "tools", "--policy", str(policy)],
        capture_output=True,
        text=True,
        env=env,
        cwd=repo,
        timeout=120,
    )
    assert "io_prompt_agent_helper" in done.stdout and "system_h_date" in done.stdout  # the rest loads
    assert "io_prompt_agent_gone" not in done.stdout


def test_extra_agents_naming_the_agents_own_slug_in_another_file_is_the_agent_itself(sandbox_tmp: Path) -> None:
    # the seed's kimi example: local_lrmlua lists {"slug": "local_lrmlua", "path": "kimi-10.lrmlua.json"}
    from supervisor.config._agent_tree import expand_agents
    from supervisor.config._loader import load_config

    (sandbox_tmp / "kimi-10.lrmlua.json").write_text(json.dumps(agent("local_lrmlua")))
    main = agent("local_lrmlua", extraAgents=[{"slug": "local_lrmlua", "path": "kimi-10.lrmlua.json"}])
    tree = expand_agents(load_config(str(write_policy(sandbox_tmp, {"main": main}))))
    assert [a.slug for a in tree.config.agents] == ["local_lrmlua"]
    assert dict(tree.subagents) == {"local_lrmlua": ("local_lrmlua",)}
    [warning] = [w for w in tree.config.warnings if "own slug" in w]
    assert "kimi-10.lrmlua.json is not loaded as a second agent" in warning


# -- the seed's continuation_id: an endpoint that keeps the conversation --------------------------------------------
class StatefulDriver:
    """A model endpoint that holds each conversation under an id (``conv-N``) and answers from what it holds plus
    what a request adds, as a driver that opts into the seed's ``continuation_id`` would. ``forget`` makes it lose
    every conversation (it then refuses continued requests with HTTP 404)."""

    def __init__(self, *, hand_out: bool = True) -> None:
        self.held: dict[str, list[dict[str, Any]]] = {}
        self.hand_out = hand_out
        self.forget = False

    def __call__(self, req: dict[str, Any]) -> Reply:
        cid = req.get("continuation_id")
        if cid is not None and (self.forget or cid not in self.held):
            return Reply("status", {"error": {"message": f"unknown continuation {cid}"}}, status=404)
        history = (self.held[cid] if cid else []) + req["messages"]
        if history[-1]["role"] == "user":
            reply = call("system_helper_sys_hostname", {})
        else:
            reply = answer(f"I saw {len(history)} messages")
        cid = cid or f"conv-{len(self.held) + 1}"
        self.held[cid] = [*history, reply.body["choices"][0]["message"]]
        if self.hand_out:
            reply.body["metadata"] = [["continuation_id", cid]]
        return reply


async def test_with_a_continuation_id_only_the_new_messages_are_sent(sandbox_tmp: Path) -> None:
    driver = StatefulDriver()
    with model_server(driver) as server:
        async with Supervisor.open(_policy(sandbox_tmp, server.url)) as sup:
            result = await sup.call("io_prompt_agent_helper", {"what": "Which host?"})
    assert (result.status, result.data) == ("passed", "I saw 4 messages")  # system, user, call, tool result
    first, second = server.requests
    assert "continuation_id" not in first
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert second["continuation_id"] == "conv-1"
    assert [m["role"] for m in second["messages"]] == ["tool"]
    assert second["tools"] == first["tools"]


async def test_without_a_continuation_id_every_request_sends_everything(sandbox_tmp: Path) -> None:
    with model_server(StatefulDriver(hand_out=False)) as server:
        async with Supervisor.open(_policy(sandbox_tmp, server.url)) as sup:
            result = await sup.call("io_prompt_agent_helper", {"what": "Which host?"})
    assert (result.status, result.data) == ("passed", "I saw 4 messages")
    assert all("continuation_id" not in r for r in server.requests)
    assert [m["role"] for m in server.requests[1]["messages"]] == ["system", "user", "assistant", "tool"]


async def test_a_refused_continuation_is_sent_again_in_full(sandbox_tmp: Path) -> None:
    driver = StatefulDriver()

    def script(req: dict[str, Any]) -> Reply:
        if req.get("continuation_id"):
            driver.forget = True  # the endpoint lost its state between the two requests
        else:
            driver.forget = False
        return driver(req)

    with model_server(script) as server:
        async with Supervisor.open(_policy(sandbox_tmp, server.url)) as sup:
            result = await sup.call("io_prompt_agent_helper", {"what": "Which host?"})
    assert (result.status, result.data) == ("passed", "I saw 4 messages")
    assert [("continuation_id" in r, len(r["messages"])) for r in server.requests] == [
        (False, 2),
        (True, 1),
        (False, 4),
    ]
    dropped = [r for r in _trace(sandbox_tmp) if r["event"] == "model_continuation_dropped"]
    assert len(dropped) == 1 and "unknown continuation conv-1" in dropped[0]["reason"]
