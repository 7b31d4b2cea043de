"""Many agents in one supervisor: the seed's ``coder`` and ``file-agent`` examples, both with a ``system`` toolbox
(and a ``dev`` and a ``lua`` one), load in ONE policy and are served side by side.

The agent files are the seed's text byte for byte (``examples/<slug>/agent.json``, as ``test_seed_examples.py`` checks)
among their stand-ins. Each agent's ``system`` toolbox is its own: its own worker (pid), its own uid (the policy
gives each worker a uid of its own), its own FileSandbox (coder's ``/tmp/scratch``, file-agent's ``./project``). A
frontend session is bound to one agent and sees that agent's names: over stdio one ``serve --agent SLUG`` process
per session, over HTTP ``/agents/<slug>/mcp``; both call ``system_system_attach_file``, each reaching its own
agent's worker, which attaches a file of its own sandbox and refuses the other agent's. A Lua toolbox's
``AllowedTools: ["system_system_attach_file"]`` reaches its own agent's tool.

file-agent's OpenAPI and PostgREST toolboxes try their hosts: the supervisor runs in a network namespace of its own
with only loopback (``unshare -n``), so nothing it tries leaves the machine; the test's HTTP client reaches the
server there through a Unix socket relay (``tests/_uds_relay.py``), its stdio client through the process's pipes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx2
import pytest
import trio
import yaml
from mcp import Client, ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from supervisor.frontends._http_auth import hash_token
from tests.supervisor.config.test_seed_examples import PERMISSIVE, _stand_ins, seed_file

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

pytestmark = pytest.mark.root

REPO = str(Path(__file__).resolve().parents[3])
TOKEN = "many-agents-token"
PORT = 8765  # the server's own network namespace has nothing else listening
SCRATCH = Path("/tmp/scratch")  # coder's "scratch" FileSandbox, an absolute path in the seed's text
FIRST_UID = 3_100_000_000


class Setup:
    """The two agents' folders, the policy, and a file in each system toolbox's sandbox."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.policy = root / "policy.yaml"
        self.state = root / "state"
        files = []
        for slug, fixture in (("coder", "coder.json"), ("file-agent", "file-agent.json")):
            folder = root / slug
            folder.mkdir()
            _stand_ins(folder)
            shutil.copy(seed_file(fixture), folder / "agent.json")  # byte for byte
            files.append(str(folder / "agent.json"))
        self.project_file = root / "file-agent" / "project" / "plan.txt"
        self.project_file.write_text("file-agent's plan\n")
        SCRATCH.mkdir(exist_ok=True)
        os.chmod(SCRATCH, 0o755)
        self.scratch_file = SCRATCH / f"note-{os.getpid()}-{os.urandom(4).hex()}.txt"
        self.scratch_file.write_text("coder's note\n")
        for f in (self.project_file, self.scratch_file):
            os.chmod(f, 0o644)
        settings = {k: v for k, v in yaml.safe_load(PERMISSIVE.read_text()).items() if k not in ("agents", "state_dir")}
        policy = {
            **settings,
            "agents": files,
            "state_dir": str(self.state),
            "worker_uids": {"first": FIRST_UID, "count": 64},
            "frontends": {"http": {"listen": f"127.0.0.1:{PORT}"}},
            "tenants": {"acme": {"tokens": [hash_token(TOKEN)], "agents": ["coder", "file-agent"]}},
        }
        self.policy.write_text(yaml.safe_dump(policy, sort_keys=False))

    def close(self) -> None:
        self.scratch_file.unlink(missing_ok=True)

    def trace(self, state: Path | None = None) -> list[dict[str, Any]]:
        path = (state or self.state) / "trace.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def setup() -> Iterator[Setup]:
    os.makedirs("/tmp/agents-supervise-tests", exist_ok=True)
    root = Path(tempfile.mkdtemp(dir="/tmp/agents-supervise-tests"))
    os.chmod(root, 0o755)
    made = Setup(root)
    try:
        yield made
    finally:
        made.close()
        shutil.rmtree(root, ignore_errors=True)


def _isolated(*command: str) -> list[str]:
    """``command`` in a network namespace of its own, with only loopback up."""
    return ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *command]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": REPO, "GITHUB_TOKEN": "stand-in-token"}  # file-agent's ${GITHUB_TOKEN}


def _text(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


async def _attach(call_tool: Any, path: Path) -> tuple[bool, str]:
    result = await call_tool("system_system_attach_file", {"filepath": str(path)})
    return not result.is_error, _text(result)


def _workers(records: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """(agent, toolbox) -> its worker as the trace tells: its planned uid and its first worker_spawn's pid."""
    [compiled] = [r for r in records if r["event"] == "policy_compiled"]
    out = {(w["agent"], w["toolbox"]): {"uid": w["uid"]} for w in compiled["workers"]}
    for r in records:
        if r["event"] == "worker_spawn":
            out[(r["agent"], r["toolbox"])].setdefault("pid", r["pid"])
    return out


def _uids_under(pid: int) -> set[int]:
    """The real uids of ``pid`` and its live descendants (the launcher confines the worker below itself)."""
    parents: dict[int, int] = {}
    uids: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        parents[int(entry)] = int(fields["PPid"])
        uids[int(entry)] = int(fields["Uid"].split()[0])
    tree, grew = {pid}, True
    while grew:
        more = {p for p, parent in parents.items() if parent in tree} - tree
        grew = bool(more)
        tree |= more
    return {uids[p] for p in tree if p in uids}


def _assert_two_system_workers(records: list[dict[str, Any]]) -> None:
    """Each agent's system toolbox has a worker of its own: another uid, another (live) process of that uid."""
    workers = _workers(records)
    coder, files = workers[("coder", "system")], workers[("file-agent", "system")]
    assert coder["uid"] != files["uid"] and min(coder["uid"], files["uid"]) >= FIRST_UID
    assert coder["pid"] != files["pid"]
    assert coder["uid"] in _uids_under(coder["pid"]) and files["uid"] in _uids_under(files["pid"])
    assert files["uid"] not in _uids_under(coder["pid"]) and coder["uid"] not in _uids_under(files["pid"])


def _calls(records: list[dict[str, Any]], tool: str) -> list[tuple[str, str]]:
    return [(r["agent"], r["toolbox"]) for r in records if r["event"] == "call_start" and r["tool"] == tool]


async def _check_session(setup: Setup, slug: str, list_tools: Any, call_tool: Any) -> None:
    """What a session bound to ``slug`` sees and reaches."""
    names = {t.name for t in (await list_tools()).tools}
    assert {"system_system_attach_file", "lua_lua_execute", "developer_dev_read_file_range"} <= names
    # coder's system toolbox has only attach-file; file-agent's has execute-command too: each sees its own list
    assert ("system_system_execute_command" in names) == (slug == "file-agent"), sorted(names)
    mine, other = (
        (setup.scratch_file, setup.project_file) if slug == "coder" else (setup.project_file, setup.scratch_file)
    )
    ok, text = await _attach(call_tool, mine)
    assert ok and f"attached {mine.name}" in text, text
    refused, text = await _attach(call_tool, other)
    assert not refused and "attached" not in text, text


async def test_two_agents_with_a_system_toolbox_over_stdio(setup: Setup) -> None:
    """Two stdio sessions, ``serve --agent coder`` and ``serve --serve-agent file-agent`` (each a supervisor of the
    one policy, with a state directory of its own), each reaching its own agent's system worker."""
    for slug in ("coder", "file-agent"):
        state = setup.root / f"state-{slug}"
        params = StdioServerParameters(
            command=_isolated(sys.executable)[0],
            args=[
                *_isolated(sys.executable)[1:],
                "-m",
                "supervisor",
                "serve",
                "--policy",
                str(setup.policy),
                "--state-dir",
                str(state),
                "--agent" if slug == "coder" else "--serve-agent",
                slug,
            ],
            env=_env(),
            cwd=REPO,
        )
        with trio.fail_after(180):
            async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                await _check_session(setup, slug, session.list_tools, session.call_tool)
                _assert_two_system_workers(setup.trace(state))  # both agents' workers run in each supervisor
        # call records are buffered for a moment: read once the supervisor stopped
        assert _calls(setup.trace(state), "system_system_attach_file") == [(slug, "system")] * 2


@asynccontextmanager
async def _http_server(setup: Setup) -> AsyncIterator[str]:
    """``serve --http`` in a namespace of its own; yields the Unix socket that reaches it."""
    process = await trio.lowlevel.open_process(
        _isolated(sys.executable, "-m", "supervisor", "serve", "--http", "--policy", str(setup.policy)),
        cwd=REPO,
        env=_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    relay = None
    try:
        assert process.stderr is not None
        seen = b""
        with trio.fail_after(180):
            while b"serving MCP over HTTP at " not in seen:
                chunk = await process.stderr.receive_some(4096)
                assert chunk, f"the server exited: {seen.decode(errors='replace')[-3000:]}"
                seen += chunk
        path = str(setup.root / "http.sock")
        relay = await trio.lowlevel.open_process(
            [
                "nsenter",
                f"--net=/proc/{process.pid}/ns/net",
                sys.executable,
                "-m",
                "tests._uds_relay",
                path,
                "127.0.0.1",
                str(PORT),
            ],
            cwd=REPO,
            env=_env(),
            stdout=subprocess.PIPE,
        )
        assert relay.stdout is not None
        with trio.fail_after(30):
            assert (await relay.stdout.receive_some(64)).startswith(b"ready")
        yield path
    finally:
        for p in (relay, process):
            if p is not None:
                p.terminate()
                await p.wait()


async def test_two_agents_with_a_system_toolbox_over_http(setup: Setup) -> None:
    """One supervisor, two endpoints: ``/agents/coder/mcp`` and ``/agents/file-agent/mcp`` each reach their own
    agent's system worker; file-agent's Lua toolbox reaches its own agent's ``system_system_attach_file``."""
    async with _http_server(setup) as path:
        base = f"http://127.0.0.1:{PORT}"
        with trio.fail_after(180):
            async with httpx2.AsyncClient(
                transport=httpx2.AsyncHTTPTransport(uds=path), timeout=60, headers={"Authorization": f"Bearer {TOKEN}"}
            ) as http:
                for slug in ("coder", "file-agent"):
                    async with Client(
                        streamable_http_client(f"{base}/agents/{slug}/mcp", http_client=http), mode="legacy"
                    ) as client:
                        await _check_session(setup, slug, client.list_tools, client.call_tool)
                async with Client(
                    streamable_http_client(f"{base}/agents/file-agent/mcp", http_client=http), mode="legacy"
                ) as client:
                    script = (  # the seed's attach-file answer: a MediaAttachment, its bytes in base64
                        f'local r = tools.call("system_system_attach_file", {{filepath = '
                        f'"{setup.project_file}"}})\nreturn r.data.mediaFilename'
                    )
                    result = await client.call_tool("lua_lua_execute", {"script": script})
                    assert not result.is_error and f'["{setup.project_file.name}"]' in _text(result), _text(result)
                _assert_two_system_workers(setup.trace())
    records = setup.trace()  # the server stopped: every call record is written
    assert _calls(records, "system_system_attach_file") == [
        ("coder", "system"),
        ("coder", "system"),
        ("file-agent", "system"),
        ("file-agent", "system"),
        ("file-agent", "system"),
    ]  # the last one is the Lua toolbox's, made through the portal
    starts = [(r["agent"], r["tenant"]) for r in records if r["event"] == "http_session_start"]
    assert starts == [("coder", "acme"), ("file-agent", "acme"), ("file-agent", "acme")]


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _isolated(sys.executable, "-m", "supervisor", *args),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env=_env(),
    )


@pytest.mark.slow
def test_tools_check_and_call_take_the_agent(setup: Setup) -> None:
    """``tools``, ``check`` and ``call`` take ``--agent SLUG``: that agent's tools, toolboxes and tool."""
    policy = ["--policy", str(setup.policy)]
    check = _cli("check", *policy, "--agent", "coder", "--json")
    assert check.returncode == 0, check.stderr
    assert {(t["agent"], t["toolbox"]) for t in json.loads(check.stdout)["toolboxes"]} == {
        ("coder", "dev"),
        ("coder", "lua"),
        ("coder", "system"),
    }
    everything = _cli("check", *policy, "--json")
    assert {("coder", "system"), ("file-agent", "system")} <= {
        (t["agent"], t["toolbox"]) for t in json.loads(everything.stdout)["toolboxes"]
    }

    tools = _cli("tools", *policy, "--agent", "file-agent", "--json")
    assert tools.returncode == 0, tools.stderr
    listed = json.loads(tools.stdout)["tools"]
    assert {t["namespace"] for t in listed} == {"file-agent"}
    assert {"system_system_execute_command", "system_system_attach_file", "io_prompt_agent_helper"} <= {
        t["name"] for t in listed
    }

    mine = _cli(
        "call",
        *policy,
        "--agent",
        "coder",
        "system_system_attach_file",
        json.dumps({"filepath": str(setup.scratch_file)}),
    )
    assert mine.returncode == 0 and json.loads(mine.stdout)["status"] == "passed", mine.stdout + mine.stderr
    theirs = _cli(
        "call",
        *policy,
        "--agent",
        "file-agent",
        "system_system_attach_file",
        json.dumps({"filepath": str(setup.project_file)}),
    )
    assert theirs.returncode == 0, theirs.stdout + theirs.stderr

    http = _cli("serve", "--http", *policy, "--serve-agent", "coder")  # over HTTP the endpoint picks the agent
    assert http.returncode == 2 and "/agents/<slug>/mcp" in http.stderr, http.stderr
    two = _cli("call", *policy, "--agent", "coder", "--agent", "file-agent", "system_system_attach_file")
    assert two.returncode == 2 and "one agent at a time" in two.stderr, two.stderr
    unknown = _cli("tools", *policy, "--agent", "nobody")
    assert unknown.returncode == 2 and "no agent 'nobody' is loaded" in unknown.stderr
    assert "coder, file-agent" in unknown.stderr and "Traceback" not in unknown.stderr


async def test_the_python_api_finds_a_name_in_its_one_agent_or_the_one_asked(sandbox_tmp: Path) -> None:
    """Two small agents with a ``system`` toolbox each: without ``agent_scope`` a name one agent has is that agent's,
    a name both have is refused as ambiguous (naming them); with it that agent's; each lists its own; each toolbox is
    its own runner and worker."""
    from supervisor import Supervisor
    from tests._policies import agent, system_toolbox, write_policy

    policy = write_policy(
        sandbox_tmp,
        {
            "one": agent("one", builtinToolboxes=[system_toolbox("system", ["date", "working-directory"])]),
            "two": agent("two", builtinToolboxes=[system_toolbox("system", ["date"])]),
        },
    )
    async with Supervisor.open(policy) as sup:
        assert sup.runner("system", "one") is not sup.runner("system", "two")
        assert sup.runner("system", "one").worker.pid != sup.runner("system", "two").worker.pid
        assert {t.name for t in sup.list_tools(agent="two")} == {"system_system_date"}
        assert {t.name for t in sup.list_tools(agent="one")} == {
            "system_system_date",
            "system_system_working_directory",
        }
        assert [t.namespace for t in sup.list_tools() if t.name == "system_system_date"] == ["one", "two"]
        cwd = await sup.call("system_system_working_directory", {})  # only agent one has it
        assert cwd.status == "passed" and cwd.structured["data"]["path"] == str(sandbox_tmp), cwd.data  # one.json's
        ambiguous = await sup.call("system_system_date", {})  # both have it: never whichever comes first
        assert ambiguous.status == "error" and ambiguous.meta("ambiguous_tool") == "one, two"
        assert ambiguous.data.startswith(
            "Tool 'system_system_date' is ambiguous: the agents one, two each have a tool of that name."
        )
        refused = await sup.call("system_system_working_directory", {}, agent_scope="two")
        assert refused.status == "error" and "Tool not found" in refused.data
        for slug in ("one", "two"):
            assert (await sup.call("system_system_date", {}, agent_scope=slug)).status == "passed"
        sup.trace.flush()
    starts = [json.loads(line) for line in (sandbox_tmp / "state" / "trace.jsonl").read_text().splitlines()]
    assert [(r["agent"], r["tool"]) for r in starts if r["event"] == "call_start"] == [
        ("one", "system_system_working_directory"),
        ("one", "system_system_date"),
        ("two", "system_system_date"),
    ]
