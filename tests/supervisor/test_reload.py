"""SIGHUP reloads the policy of a running supervisor without dropping what did not change.

Real ``serve --http`` and stdio ``serve`` processes, an MCP session open on each (the official SDK client over HTTP,
raw JSON-RPC lines on stdio): the policy is edited (a toolbox added to the agent file, another one's limits changed
in the policy, one left alone) and the process gets SIGHUP. The unchanged toolbox keeps its worker (one
``worker_spawn``, the same pid, still alive) and the session keeps working; the changed one is restarted (a new
pid); the new tool is announced with ``notifications/tools/list_changed`` and called. Then the policy file is broken
and the process gets SIGHUP again: the reload is refused with a reason (on stderr and as a ``policy_reload`` trace
record), and the tools that were served still are.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import trio
import yaml
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from labkit import describe_json, write_script
from supervisor._generation import SwitchPlan, plan_switch
from supervisor.frontends._http_auth import hash_token
from tests._policies import agent, system_toolbox, write_policy
from tests.supervisor._service import Service, serve_processes
from tests.supervisor.test_skills_e2e import Notifications

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

pytestmark = pytest.mark.root

REPO = str(Path(__file__).resolve().parents[2])
TOKEN = "reload-test-token"


def test_plan_switch_keeps_only_what_compiled_the_same() -> None:
    running = {("a", "keep"): "1", ("a", "change"): "2", ("a", "gone"): "3", ("b", "broken"): "4"}
    new = {("a", "keep"): "1", ("a", "change"): "2'", ("b", "broken"): "4", ("a", "new"): "5"}
    assert plan_switch(running, {("b", "broken")}, new) == SwitchPlan(
        kept=(("a", "keep"),),
        restarted=(("a", "change"), ("b", "broken")),
        stopped=(("a", "gone"),),
        started=(("a", "new"),),
    )
    assert plan_switch(running, set(), running) == SwitchPlan(kept=tuple(running))
    # start-up is the switch from no generation: every toolbox is started, in the policy's order
    assert plan_switch({}, set(), new) == SwitchPlan(started=tuple(new))
    assert plan_switch(running, {("b", "broken")}, new).fresh == {("a", "change"), ("b", "broken"), ("a", "new")}


def _policy(root: Path) -> Path:
    return write_policy(
        root,
        {
            "alpha": agent(
                "alpha", builtinToolboxes=[system_toolbox("keep", ["date"]), system_toolbox("change", ["date"])]
            )
        },
        frontends={"http": {"listen": "127.0.0.1:0"}},
        tenants={"acme": {"tokens": [hash_token(TOKEN)], "agents": ["alpha"]}},
    )


def _edit(root: Path) -> None:
    """Add a toolbox (the agent file) and change another's limits (the policy); ``keep`` stays as it was."""
    (root / "alpha.json").write_text(
        json.dumps(
            agent(
                "alpha",
                builtinToolboxes=[
                    system_toolbox("keep", ["date"]),
                    system_toolbox("change", ["date"]),
                    system_toolbox("added", ["date"]),
                ],
            )
        )
    )
    policy = root / "policy.yaml"
    data = yaml.safe_load(policy.read_text())
    data["toolboxes"] = {"change": {"limits": {"wall_time_s": 77}}}
    policy.write_text(yaml.safe_dump(data, sort_keys=False))


def _break(root: Path) -> None:
    (root / "policy.yaml").write_text("agents: [alpha.json\nstate_dir: {\n")


@pytest.fixture
async def start(sandbox_tmp: Path) -> AsyncIterator[Any]:
    async with serve_processes(sandbox_tmp) as start:
        yield start


def _alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


def _check_applied(service: Service, line: str, keep_pid: int, change_pid: int) -> None:
    assert "the policy was reloaded" in line and "kept alpha/keep" in line, line
    assert "restarted alpha/change" in line and "started alpha/added" in line, line
    assert service.spawns("keep") == [keep_pid] and _alive(keep_pid)  # the same worker, still running
    new_change = service.spawns("change")
    assert len(new_change) == 2 and new_change[0] == change_pid and new_change[1] != change_pid
    assert len(service.spawns("added")) == 1
    [applied] = [r for r in service.records("policy_reload") if r["status"] == "applied"]
    assert applied["kept"] == ["alpha/keep"] and applied["restarted"] == ["alpha/change"]
    assert applied["started"] == ["alpha/added"] and applied["stopped"] == []


def _check_refused(service: Service, line: str) -> None:
    assert "the policy was not reloaded, the running one stays" in line and "policy.yaml" in line, line
    refused = [r for r in service.records("policy_reload") if r["status"] == "refused"]
    assert len(refused) == 1 and "policy.yaml" in refused[0]["reason"], refused


async def test_sighup_reloads_an_http_service_and_keeps_its_sessions(sandbox_tmp: Path, start: Any) -> None:
    _policy(sandbox_tmp)
    service = await start("--http")
    with trio.fail_after(120):
        address = await service.wait_line("serving MCP over HTTP at ")
    url = address.split("serving MCP over HTTP at ")[1].split("/agents/")[0] + "/agents/alpha/mcp"
    seen = Notifications()
    with trio.fail_after(180):
        async with (
            create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"}) as http,
            Client(
                streamable_http_client(url, http_client=http), mode="legacy", message_handler=seen.handler
            ) as client,
        ):
            names = {t.name for t in (await client.list_tools()).tools}
            assert names == {"system_keep_date", "system_change_date"}
            [keep_pid], [change_pid] = service.spawns("keep"), service.spawns("change")

            _edit(sandbox_tmp)
            line = await service.wait_line("the policy was", service.hup())
            _check_applied(service, line, keep_pid, change_pid)
            await seen.wait_for(1)  # the session's stream announced the change
            names = {t.name for t in (await client.list_tools()).tools}
            assert names == {"system_keep_date", "system_change_date", "system_added_date"}
            for tool in sorted(names):  # the kept worker, the restarted one and the new one all answer
                assert not (await client.call_tool(tool, {})).is_error, tool

            _break(sandbox_tmp)
            line = await service.wait_line("the policy was not reloaded", service.hup())
            _check_refused(service, line)
            assert {t.name for t in (await client.list_tools()).tools} == names
            assert not (await client.call_tool("system_keep_date", {})).is_error
            assert service.spawns("keep") == [keep_pid] and _alive(keep_pid)


class StdioClient:
    """Raw MCP over a ``serve`` process's pipes: one JSON line per message."""

    def __init__(self, process: trio.Process) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.stdin, self.stdout = process.stdin, process.stdout
        self.buffer = b""
        self.next_id = 1
        self.notifications: list[str] = []

    async def send(self, message: dict[str, Any]) -> None:
        await self.stdin.send_all(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")

    async def message(self) -> dict[str, Any]:
        while b"\n" not in self.buffer:
            chunk = await self.stdout.receive_some(65536)
            assert chunk, "the server closed stdout"
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        req_id, self.next_id = self.next_id, self.next_id + 1
        await self.send({"id": req_id, "method": method, "params": params or {}})
        while True:
            message = await self.message()
            if message.get("id") == req_id:
                assert "result" in message, message
                return message["result"]
            self.notifications.append(message.get("method", ""))

    async def notification(self, method: str) -> None:
        while method not in self.notifications:
            message = await self.message()
            self.notifications.append(message.get("method", ""))

    async def initialize(self) -> None:
        """The MCP handshake (initialize, then initialized)."""
        await self.request(
            "initialize",
            {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
        )
        await self.send({"method": "notifications/initialized"})

    async def names(self) -> set[str]:
        return {t["name"] for t in (await self.request("tools/list"))["tools"]}

    async def call(self, tool: str) -> dict[str, Any]:
        return await self.request("tools/call", {"name": tool, "arguments": {}})


async def test_sighup_reloads_a_stdio_service_and_keeps_its_session(sandbox_tmp: Path, start: Any) -> None:
    _policy(sandbox_tmp)
    service = await start("--agent", "alpha")
    client = StdioClient(service.process)
    with trio.fail_after(180):
        await client.initialize()
        assert await client.names() == {"system_keep_date", "system_change_date"}
        [keep_pid], [change_pid] = service.spawns("keep"), service.spawns("change")

        _edit(sandbox_tmp)
        line = await service.wait_line("the policy was", service.hup())
        _check_applied(service, line, keep_pid, change_pid)
        await client.notification("notifications/tools/list_changed")
        names = await client.names()
        assert names == {"system_keep_date", "system_change_date", "system_added_date"}
        for tool in sorted(names):
            assert not (await client.call(tool)).get("isError"), tool

        _break(sandbox_tmp)
        line = await service.wait_line("the policy was not reloaded", service.hup())
        _check_refused(service, line)
        assert await client.names() == names
        assert not (await client.call("system_keep_date")).get("isError")
        assert service.spawns("keep") == [keep_pid] and _alive(keep_pid)


def test_settings_read_once_are_named_when_a_reload_changes_them() -> None:
    from supervisor._reload import _changed_restart_only
    from supervisor.config import Policy

    old = Policy()
    new = Policy.model_validate({"kernel_audit": "off", "supervision": {"spawn": "launcher"}})
    assert _changed_restart_only(old, new) == ["kernel_audit", "supervision.spawn"]
    assert _changed_restart_only(old, Policy.model_validate({"sessions": {"keep_days": 1}})) == []


async def test_sighup_starts_a_crash_looped_toolbox_at_once_once_fixed(sandbox_tmp: Path, start: Any) -> None:
    """Issue 27 item 5: a bash tool whose script ends its worker (``kill $PPID``) crash-loops its toolbox; while it
    rests, tools/list says why and until when, and so does a call; the script is fixed on disk and the service gets
    SIGHUP with the policy unchanged: the toolbox is started again at once, not after the 300 s cool-down."""
    tools = sandbox_tmp / "tools"
    tools.mkdir(mode=0o755)
    write_script(tools, "flaky.sh", describe_json("flaky"), 'kill -TERM "$PPID"; sleep 5')
    write_policy(
        sandbox_tmp,
        {"tester": agent("tester", bashToolboxes=[{"tag": "FileSystemDirectory", "contents": {"Path": str(tools)}}])},
        supervision={"restart_backoff_initial_s": 0.01, "restart_backoff_max_s": 0.05, "crash_loop_max_restarts": 2},
    )
    service = await start("--agent", "tester")
    client = StdioClient(service.process)
    with trio.fail_after(180):
        await client.initialize()
        assert await client.names() == {"bash_flaky"}
        for _ in range(10):  # each call ends the worker; the third death within the window is a crash loop
            answer = await client.call("bash_flaky")
            assert answer.get("isError"), answer
            refusal = answer["content"][0]["text"]
            if "is disabled for 300 s, until " in refusal:
                break
        assert "is disabled for 300 s, until " in refusal and "died 3 times within 60 s" in refusal, refusal
        assert "at once by a policy reload (SIGHUP)" in refusal
        await client.notification("notifications/tools/list_changed")  # its tools now say why
        [listed] = (await client.request("tools/list"))["tools"]
        assert listed["description"].startswith("Not available now: toolbox tools is disabled for 300 s, until ")
        assert listed["description"].endswith("the flaky tool")
        assert len(service.spawns("tools")) == 3

        write_script(tools, "flaky.sh", describe_json("flaky"), "echo fixed")
        client.notifications.clear()
        line = await service.wait_line("the policy was", service.hup())
        assert "the policy was reloaded: restarted tester/tools" in line, line
        assert len(service.spawns("tools")) == 4
        fixed = await client.call("bash_flaky")
        assert not fixed.get("isError") and "fixed" in fixed["content"][0]["text"], fixed
        await client.notification("notifications/tools/list_changed")
        [listed] = (await client.request("tools/list"))["tools"]
        assert listed["description"] == "the flaky tool"
