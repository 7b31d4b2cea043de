"""The frontends for real: the MCP stdio server driven by the official MCP SDK client, the CLI, and the
no-survivor guarantee after ``kill -9`` of the supervisor."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests._policies import agent, system_toolbox, write_policy
from tests._workers import nspid

pytestmark = pytest.mark.root

CLI = [sys.executable, "-m", "supervisor"]
REPO = str(Path(__file__).resolve().parents[3])


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": REPO}


@pytest.fixture
def policy(sandbox_tmp: Path) -> Path:
    return write_policy(
        sandbox_tmp, {"tester": agent(builtinToolboxes=[system_toolbox()])}, sessions={"max_concurrent_calls": 32}
    )


async def test_mcp_round_trip_with_the_official_sdk_client(policy: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "supervisor", "--policy", str(policy)], env=_env(), cwd=REPO
    )
    with trio.fail_after(60):
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            init = await session.initialize()
            assert init.server_info.name == "agents-supervise"
            assert init.capabilities.tools is not None and init.capabilities.tools.list_changed
            await session.send_ping()
            listed = await session.list_tools()
            names = {t.name for t in listed.tools}
            assert "system_system_date" in names and "system_system_running_user" in names
            date = next(t for t in listed.tools if t.name == "system_system_date")
            assert date.input_schema["type"] == "object"

            ok = await session.call_tool("system_system_running_user", {})
            assert not ok.is_error
            assert ok.structured_content["data"]["uid"] == 65534
            assert json.loads(ok.content[0].text)["capability"] == "running-user"

            bad = await session.call_tool("system_system_date", {"nope": True})
            assert bad.is_error
            assert "Tool call validation failed for 'system_system_date'" in bad.content[0].text

            missing = await session.call_tool("does_not_exist", {})
            assert missing.is_error and "Tool not found" in missing.content[0].text

            # Many calls in flight at once over one session all come back right.
            results: list[bool] = []

            async def one() -> None:
                r = await session.call_tool("system_system_hostname", {})
                results.append(not r.is_error and "hostname" in r.structured_content["data"])

            async with trio.open_nursery() as nursery:
                for _ in range(20):
                    nursery.start_soon(one)
            assert results == [True] * 20


def _children(pid: int) -> list[int]:
    out = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            out += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
        except OSError:
            pass
    return out


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c in _children(p):
            found.append(c)
            todo.append(c)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


async def test_no_process_survives_sigkill_of_the_supervisor(sandbox_tmp: Path) -> None:
    policy = write_policy(sandbox_tmp, {"tester": agent(builtinToolboxes=[system_toolbox(), system_toolbox("b")])})
    proc = subprocess.Popen(  # noqa: ASYNC220
        [*CLI, "--policy", str(policy)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
        cwd=REPO,
    )
    try:
        assert proc.stdin and proc.stdout
        proc.stdin.write(
            b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",'
            b'"capabilities":{},"clientInfo":{"name":"t","version":"1"}}}\n'
        )
        proc.stdin.flush()
        line = await trio.to_thread.run_sync(proc.stdout.readline)
        assert json.loads(line)["result"]["serverInfo"]["name"] == "agents-supervise"
        family = _descendants(proc.pid)
        workers = [p for p in family if nspid(p)[1:] == [1]]  # PID 1 of their own namespaces
        assert len(workers) == 2, family  # the two toolboxes' workers (and the zygote or launchers that made them)
        assert len(family) >= 3, family
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        with trio.fail_after(10):
            while any(_alive(p) for p in family):  # noqa: ASYNC110 (kernel state: no event to wait on)
                await trio.sleep(0.02)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def _cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=_env(), cwd=REPO, timeout=60, input=stdin)


def test_cli_call_prints_the_result_and_exit_codes(policy: Path) -> None:
    ok = _cli("call", "--policy", str(policy), "system_system_date", "{}")
    assert ok.returncode == 0, ok.stderr
    result = json.loads(ok.stdout)
    assert result["status"] == "passed" and result["structured"]["capability"] == "date"
    bad = _cli("call", "--policy", str(policy), "system_system_date", '{"x": 1}')
    assert bad.returncode == 2 and json.loads(bad.stdout)["status"] == "error"
    not_json = _cli("call", "--policy", str(policy), "system_system_date", "{oops")
    assert not_json.returncode == 2
    assert "the arguments are not valid JSON" in not_json.stderr and "Traceback" not in not_json.stderr


def test_cli_tools_and_check(policy: Path) -> None:
    tools = _cli("tools", "--policy", str(policy), "--json")
    assert tools.returncode == 0, tools.stderr
    listed = json.loads(tools.stdout)
    assert {t["name"] for t in listed["tools"]} >= {"system_system_date", "system_system_uptime"}
    check = _cli("check", "--policy", str(policy), "--json")
    assert check.returncode == 0, check.stderr
    report = json.loads(check.stdout)
    (tb,) = report["toolboxes"]
    assert tb["uid"] == 65534 and tb["network"].startswith("own namespace")
    assert any(p.endswith("/work/tester/system") for p in tb["read_write"])
    summary = _cli("check", "--policy", str(policy)).stdout  # the default: one line per worker
    assert "1 worker(s) of 1 agent(s):\n  tester/system (system): uid 65534; no network; " in summary, summary
    assert "check --detail" in summary and "read-only:" not in summary
    human = _cli("check", "--detail", "--policy", str(policy))
    assert "toolbox system (system, agent tester)" in human.stdout and "uid/gid: 65534/65534" in human.stdout
    assert "cgroup v1 (pids.max=" in human.stdout or "cgroup v2 (pids.max=" in human.stdout
    assert tb["xattrs"] is False and "extended attributes: refused (EOPNOTSUPP)" in human.stdout


def test_cli_bad_input_gets_one_clear_line(sandbox_tmp: Path) -> None:
    broken = sandbox_tmp / "broken.yaml"
    broken.write_text("agents: [missing.json]\nstate_dir: /tmp/x\n")
    out = _cli("tools", "--policy", str(broken))
    assert out.returncode == 2
    assert "missing.json" in out.stderr and "Traceback" not in out.stderr
    garbage = sandbox_tmp / "garbage.yaml"
    garbage.write_text("agents: [\n")
    out = _cli("check", "--policy", str(garbage))
    assert out.returncode == 2 and "Traceback" not in out.stderr and "garbage.yaml" in out.stderr
    schema = _cli("schema")
    assert schema.returncode == 0 and "properties" in json.loads(schema.stdout)
    toolbox_keys = json.loads(schema.stdout)["$defs"]["ToolboxPolicy"]["properties"]
    assert {"allowed_hosts", "cname_targets", "xattrs"} <= set(toolbox_keys)
    assert "':port'" in toolbox_keys["allowed_hosts"]["description"]


class _RawMcp:
    """The supervisor's MCP server driven line by line (for what the SDK client does not expose directly)."""

    def __init__(self, policy: Path) -> None:
        self.proc = subprocess.Popen(
            [*CLI, "--policy", str(policy)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_env(),
            cwd=REPO,
        )

    def send(self, message: dict) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    async def receive(self) -> dict:
        assert self.proc.stdout is not None
        line = await trio.to_thread.run_sync(self.proc.stdout.readline)
        assert line, "the server closed stdout"
        return json.loads(line)

    async def initialize(self) -> None:
        self.send(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            }
        )
        assert (await self.receive())["id"] == 0
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        self.proc.wait()


def _trace(policy: Path) -> list[dict]:
    return [json.loads(line) for line in (policy.parent / "state" / "trace.jsonl").read_text().splitlines()]


async def test_cancelled_notification_stops_the_call_in_the_worker(sandbox_tmp: Path) -> None:
    toolbox = system_toolbox(capabilities=["execute-command", "date"])
    policy = write_policy(sandbox_tmp, {"tester": agent(builtinToolboxes=[toolbox])})
    mcp = _RawMcp(policy)
    try:
        with trio.fail_after(30):
            await mcp.initialize()
            mcp.send(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": {
                        "name": "system_system_execute_command",
                        "arguments": {"command": "echo started; sleep 60"},
                    },
                }
            )
            while not any(r["event"] == "call_start" for r in _trace(policy)):  # noqa: ASYNC110
                await trio.sleep(0.02)  # the trace file is the only sign the call began
            mcp.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})
            mcp.send(
                {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "tools/call",
                    "params": {"name": "system_system_date", "arguments": {}},
                }
            )
            reply = await mcp.receive()
            assert reply["id"] == 2  # no response is sent for the cancelled call (MCP's rule)
            assert not reply["result"]["isError"], reply
            while not any(  # noqa: ASYNC110
                r["event"] == "call_end" and r["tool"] == "system_system_execute_command" for r in _trace(policy)
            ):
                await trio.sleep(0.02)
        end = next(r for r in _trace(policy) if r["event"] == "call_end" and r["tool"].endswith("execute_command"))
        assert end["status"] == "error" and end["duration_s"] < 30
    finally:
        mcp.close()


async def test_sigterm_shuts_down_cleanly(policy: Path) -> None:
    mcp = _RawMcp(policy)
    try:
        with trio.fail_after(30):
            await mcp.initialize()
            family = _descendants(mcp.proc.pid)
            mcp.proc.send_signal(signal.SIGTERM)
            code = await trio.to_thread.run_sync(mcp.proc.wait)
        assert code == 0
        assert not any(_alive(p) for p in family)
        kinds = [r["event"] for r in _trace(policy)]
        assert "signal" in kinds and kinds[-1] == "supervisor_stop"
        assert kinds.count("worker_exit") == 1
    finally:
        mcp.close()


async def test_eof_from_the_frontend_shuts_down_cleanly(policy: Path) -> None:
    mcp = _RawMcp(policy)
    try:
        with trio.fail_after(30):
            await mcp.initialize()
            assert mcp.proc.stdin is not None
            mcp.proc.stdin.close()
            code = await trio.to_thread.run_sync(mcp.proc.wait)
        assert code == 0
        assert _trace(policy)[-1]["event"] == "supervisor_stop"
    finally:
        mcp.close()


async def test_an_image_attachment_reaches_the_sdk_client_as_image_content(sandbox_tmp: Path) -> None:
    import base64

    from tests.sandbox.test_escapes import _png

    pictures = sandbox_tmp / "pictures"
    pictures.mkdir()
    (pictures / "chart.bin").write_bytes(_png(2, 2))
    fsb = {"fsbPredicate": {"tag": "DirectoryRecursive", "contents": str(pictures)}}
    toolbox = system_toolbox(capabilities=["attach-file"], FileSandbox=fsb)
    policy = write_policy(sandbox_tmp, {"tester": agent(builtinToolboxes=[toolbox])})
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "supervisor", "--policy", str(policy)], env=_env(), cwd=REPO
    )
    with trio.fail_after(60):
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            result = await session.call_tool("system_system_attach_file", {"filepath": str(pictures / "chart.bin")})
    assert not result.is_error
    images = [c for c in result.content if c.type == "image"]
    assert len(images) == 1 and images[0].mime_type == "image/png"
    assert base64.b64decode(images[0].data) == _png(2, 2)


def test_call_says_on_stderr_what_did_not_load(sandbox_tmp: Path) -> None:
    """A tool of a toolbox (or script) that did not load is 'not found' to the portal; the CLI says why."""
    from labkit import write_script

    tools = sandbox_tmp / "tools"
    tools.mkdir()
    write_script(tools, "broken", "this is not JSON", "echo never")
    policy = write_policy(
        sandbox_tmp, {"tester": agent(bashToolboxes=[{"tag": "FileSystemDirectory", "contents": {"Path": "./tools"}}])}
    )
    done = subprocess.run(
        [*CLI, "call", "--policy", str(policy), "bash_broken", "{}"],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 2 and json.loads(done.stdout)["summary"] == "PortalToolNotFound"
    assert "agents-supervise: load error: tester/tools: " in done.stderr  # agent/toolbox
    assert "broken: describe printed invalid JSON" in done.stderr
