"""Skills and bash tools end to end: git skill sources cloned confined, per-session tool lists (Python API and the
official MCP SDK client over two sessions of one supervisor), hot reload through MCP, the kimi example."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types
import pytest
import trio
import trio.testing
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.message import SessionMessage

from labkit import describe_json, make_skill, skill_md, write_script
from supervisor._supervisor import Supervisor
from supervisor.frontends._mcp_stdio import McpStdioServer
from supervisor.sessions._ids import Owner, root_session_id
from tests._policies import agent, write_policy

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

pytestmark = pytest.mark.root

REPO = str(Path(__file__).resolve().parents[2])
PDF_TOOL = "skill_pdf-tools_extract"
CORE_TOOL = "skill_core-utils_hello"


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
    )


def make_git_repo(root: Path) -> Path:
    """A real git repository with two skills under ``skills/`` (committed) and a note at the top."""
    repo = root / "skills-repo"
    repo.mkdir()
    make_skill(
        repo / "skills",
        "pdf",
        skill_md("pdf-tools"),
        scripts={"extract": "extract"},
        references={"references/guide.md": "read me"},
    )
    make_skill(repo / "skills", "core", skill_md("core-utils"), scripts={"hello": "hello"})
    (repo / "README").write_text("skills\n")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "skills")
    return repo


def read_trace(root: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (root / "state" / "trace.jsonl").read_text().splitlines()]


def names(tools: list[Any]) -> set[str]:
    return {t.name for t in tools}


# -- git skill sources -------------------------------------------------------------------------------------------
async def test_a_git_skill_source_is_cloned_confined_kept_and_loaded(sandbox_tmp: Path) -> None:
    repo = make_git_repo(sandbox_tmp)
    path = write_policy(
        sandbox_tmp,
        {
            "tester": agent(
                skillSources=[{"tag": "SkillGitRepo", "contents": {"url": f"file://{repo}", "subdir": "skills"}}]
            )
        },
    )
    async with Supervisor.open(path) as sup:
        assert sup.load_errors() == []
        assert {"skill_describe_pdf-tools", "skill_enable_core-utils", PDF_TOOL} <= names(sup.list_tools())
        assert (await sup.call("skill_enable_pdf-tools", {}, session_id="s")).status == "passed"
        ran = await sup.call(PDF_TOOL, {"file": "a.pdf"}, session_id="s")
        assert ran.status == "passed", ran.data
        described = json.loads((await sup.call("skill_describe_pdf-tools", {}, session_id="s")).data)
    clones = sandbox_tmp / "state" / "skills-git"
    [clone] = [p for p in clones.iterdir()]
    assert not clone.name.startswith(".")  # no partial clone left beside it
    assert described["path"].startswith(str(clone))
    assert described["references"] == ["references/guide.md"]
    assert ran.data.startswith(str(clone / "skills" / "pdf" / "scripts" / "extract"))
    # Cloned by the sandbox uid (confined), not by the supervisor's root.
    assert (clone / "skills" / "pdf" / "SKILL.md").stat().st_uid == 65534
    assert [e["action"] for e in read_trace(sandbox_tmp) if e.get("event") == "skill_source"] == ["cloned"]

    # Kept: the next start uses the clone as it is, even with the origin gone.
    subprocess.run(["rm", "-rf", str(repo)], check=True)
    async with Supervisor.open(path) as sup:
        assert sup.load_errors() == []
        assert (await sup.call("skill_enable_core-utils", {}, session_id="t")).status == "passed"
        assert (await sup.call(CORE_TOOL, {"file": "x"}, session_id="t")).status == "passed"
    assert [e["action"] for e in read_trace(sandbox_tmp) if e.get("event") == "skill_source"] == ["cloned", "kept"]


async def test_a_failing_clone_is_a_load_error_of_that_source_only(sandbox_tmp: Path) -> None:
    not_a_repo = sandbox_tmp / "plain"
    not_a_repo.mkdir()
    (not_a_repo / "file").write_text("x")
    make_skill(sandbox_tmp / "local", "core", skill_md("core-utils"), scripts={"hello": "hello"})
    path = write_policy(
        sandbox_tmp,
        {
            "tester": agent(
                skillSources=[
                    {"tag": "SkillGitRepo", "contents": {"url": f"file://{not_a_repo}"}},
                    {"tag": "SkillGitRepo", "contents": {"url": f"file://{sandbox_tmp}/missing.git"}},
                    {"tag": "SkillDirectory", "contents": "./local"},
                ]
            )
        },
    )
    async with Supervisor.open(path) as sup:
        assert "skill_enable_core-utils" in names(sup.list_tools())
        errors = sup.load_errors()
    assert [(e["toolbox"], e["source"]) for e in errors] == [
        ("skills", "skillSources[0]"),
        ("skills", "skillSources[1]"),
    ]
    assert errors[0]["message"].startswith(f"git clone of file://{not_a_repo} failed: ")
    assert "does not appear to be a git repository" in errors[0]["message"]
    assert errors[1]["message"] == (
        f"git source file://{sandbox_tmp}/missing.git: the repository {sandbox_tmp}/missing.git does not exist"
    )
    assert not (sandbox_tmp / "state" / "skills-git").exists() or not list(
        (sandbox_tmp / "state" / "skills-git").iterdir()
    )
    traced = [e for e in read_trace(sandbox_tmp) if e.get("event") == "load_error"]
    assert {e["source"] for e in traced} >= {"skillSources[0]", "skillSources[1]"}

    # `agents-supervise tools` shows them.
    out = subprocess.run(
        [sys.executable, "-m", "supervisor", "tools", "--policy", str(path)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": REPO},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "load error: tester/skills: skillSources[0]: git clone of file://" in out.stdout
    assert "load error: tester/skills: skillSources[1]: git source file://" in out.stdout


async def test_a_missing_subdir_is_a_load_error(sandbox_tmp: Path) -> None:
    repo = make_git_repo(sandbox_tmp)
    path = write_policy(
        sandbox_tmp,
        {
            "tester": agent(
                skillSources=[{"tag": "SkillGitRepo", "contents": {"url": f"file://{repo}", "subdir": "nope"}}]
            )
        },
    )
    async with Supervisor.open(path) as sup:
        [error] = sup.load_errors()
    assert error["message"] == f"git source file://{repo}: the repository has no folder 'nope' (subdir)"


# -- per-session tool lists, Python API --------------------------------------------------------------------------
def skills_policy(root: Path) -> Path:
    skills = root / "skills"
    make_skill(skills, "pdf", skill_md("pdf-tools"), scripts={"extract": "extract"})
    make_skill(skills, "core", skill_md("core-utils"), scripts={"hello": "hello"})
    return write_policy(
        root,
        {
            "tester": agent(
                skillSources=[{"tag": "SkillDirectory", "contents": "./skills"}], autoEnableSkills=["core-utils"]
            )
        },
    )


async def test_script_tools_are_listed_per_session_with_explicit_session_ids(sandbox_tmp: Path) -> None:
    async with Supervisor.open(skills_policy(sandbox_tmp)) as sup:
        assert {PDF_TOOL, CORE_TOOL} <= names(sup.list_tools())  # no session: everything
        for sid in ("a", "b"):
            listed = names(sup.list_tools(sid))
            assert CORE_TOOL in listed  # auto-enabled in every new session
            assert PDF_TOOL not in listed
            assert "skill_enable_pdf-tools" in listed and "skill_describe_pdf-tools" in listed

        woken: list[str] = []

        async def watch(sid: str) -> None:
            await sup.wait_tools_changed(sid)
            woken.append(sid)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch, "a")
            nursery.start_soon(watch, "b")
            await trio.testing.wait_all_tasks_blocked()
            assert (await sup.call("skill_enable_pdf-tools", {}, session_id="a")).status == "passed"
            await trio.testing.wait_all_tasks_blocked()
            assert woken == ["a"]
            assert PDF_TOOL in names(sup.list_tools("a"))
            assert PDF_TOOL not in names(sup.list_tools("b"))
            # Enabling again changes nothing and wakes nobody.
            nursery.start_soon(watch, "a")
            await trio.testing.wait_all_tasks_blocked()
            assert (await sup.call("skill_enable_pdf-tools", {}, session_id="a")).status == "passed"
            await trio.testing.wait_all_tasks_blocked()
            assert woken == ["a"]
            # Disabling an auto-enabled skill hides its tool in that session only.
            assert (await sup.call("skill_disable_core-utils", {}, session_id="b")).status == "passed"
            await trio.testing.wait_all_tasks_blocked()
            assert woken == ["a", "b"]
            nursery.cancel_scope.cancel()
        assert CORE_TOOL not in names(sup.list_tools("b"))
        assert CORE_TOOL in names(sup.list_tools("a"))
        # The worker still enforces: a hidden tool called anyway is refused.
        refused = await sup.call(PDF_TOOL, {"file": "x"}, session_id="b")
        assert refused.status == "error" and "call skill_enable_pdf-tools first" in refused.data


async def test_enabled_skills_survive_a_worker_restart(sandbox_tmp: Path) -> None:
    async with Supervisor.open(skills_policy(sandbox_tmp)) as sup:
        assert (await sup.call("skill_enable_pdf-tools", {}, session_id="a")).status == "passed"
        runner = sup.runner("skills")
        old = runner.worker
        assert old is not None and old.pid is not None
        os.kill(old.pid, 9)
        with trio.fail_after(20):
            await old.dead.wait()
            while runner.worker is old or runner.worker is None or runner.worker.state.value != "ready":  # noqa: ASYNC110
                await trio.sleep(0.02)  # the runner restarts on its own schedule
        assert PDF_TOOL in names(sup.list_tools("a"))
        again = await sup.call(PDF_TOOL, {"file": "x"}, session_id="a")
        assert "call skill_enable_pdf-tools first" not in (again.data or "")
        refused = await sup.call(PDF_TOOL, {"file": "x"}, session_id="b")
        assert refused.status == "error" and "call skill_enable_pdf-tools first" in refused.data
    # The session store is the one copy: the worker kept nothing of its own.
    assert not list((sandbox_tmp / "state" / "toolbox-state").rglob("*session*"))


async def test_enabled_skills_survive_a_supervisor_restart_in_a_named_session(sandbox_tmp: Path) -> None:
    policy = skills_policy(sandbox_tmp)
    async with Supervisor.open(policy) as sup:
        assert (await sup.call("skill_enable_pdf-tools", {}, session_id="work")).status == "passed"
        assert (await sup.call("skill_disable_core-utils", {}, session_id="work")).status == "passed"
    async with Supervisor.open(policy) as sup:
        listed = names(sup.list_tools("work"))
        assert PDF_TOOL in listed and CORE_TOOL not in listed
        ran = await sup.call(PDF_TOOL, {"file": "x"}, session_id="work")
        assert ran.status == "passed", ran.data
        assert (await sup.call(CORE_TOOL, {"file": "x"}, session_id="work")).status == "error"
        fresh = names(sup.list_tools("fresh"))
        assert CORE_TOOL in fresh and PDF_TOOL not in fresh


# -- skill folders watched ----------------------------------------------------------------------------------------
async def wait_listed(sup: Supervisor, done: Callable[[set[str]], bool]) -> None:
    """Wait on the supervisor's tool-list changes until ``done(names)`` (a change seen over two polls of the worker
    comes as two changes)."""
    with trio.fail_after(10):
        while not done(names(sup.list_tools())):
            await sup.wait_tools_changed()


async def test_a_skill_folder_added_and_removed_changes_the_supervisors_tools(sandbox_tmp: Path) -> None:
    async with Supervisor.open(skills_policy(sandbox_tmp)) as sup:
        assert (await sup.call("skill_enable_pdf-tools", {}, session_id="a")).status == "passed"
        assert "skill_describe_notes" not in names(sup.list_tools())
        built = make_skill(sandbox_tmp / "staging", "notes", skill_md("notes"), scripts={"jot": "jot"})
        shutil.move(str(built), str(sandbox_tmp / "skills" / "notes"))  # appears whole
        await wait_listed(sup, lambda listed: "skill_notes_jot" in listed)
        assert "skill_enable_notes" in names(sup.list_tools("a"))
        assert "skill_notes_jot" not in names(sup.list_tools("a"))
        assert PDF_TOOL in names(sup.list_tools("a"))  # the session kept its skill
        assert (await sup.call("skill_enable_notes", {}, session_id="a")).status == "passed"
        ran = await sup.call("skill_notes_jot", {"file": "n"}, session_id="a")
        assert ran.status == "passed", ran.data
        assert ran.data.endswith(f"jot on n in session {root_session_id(Owner('tester'), 'a')}\n")

        shutil.rmtree(sandbox_tmp / "skills" / "notes")
        await wait_listed(sup, lambda listed: not any("notes" in n for n in listed))
        assert PDF_TOOL in names(sup.list_tools("a"))
        # Back again: off in the session that had it (the supervisor forgot it as the worker did).
        built = make_skill(sandbox_tmp / "staging", "notes", skill_md("notes"), scripts={"jot": "jot"})
        shutil.move(str(built), str(sandbox_tmp / "skills" / "notes"))
        await wait_listed(sup, lambda listed: "skill_notes_jot" in listed)
        assert "skill_notes_jot" not in names(sup.list_tools("a"))
        refused = await sup.call("skill_notes_jot", {"file": "n"}, session_id="a")
        assert refused.status == "error" and "call skill_enable_notes first" in refused.data


async def test_a_kept_git_clone_is_watched(sandbox_tmp: Path) -> None:
    repo = make_git_repo(sandbox_tmp)
    path = write_policy(
        sandbox_tmp,
        {
            "tester": agent(
                skillSources=[{"tag": "SkillGitRepo", "contents": {"url": f"file://{repo}", "subdir": "skills"}}]
            )
        },
    )
    async with Supervisor.open(path) as sup:
        [clone] = list((sandbox_tmp / "state" / "skills-git").iterdir())
        built = make_skill(sandbox_tmp / "staging", "notes", skill_md("notes"), scripts={"jot": "jot"})
        shutil.move(str(built), str(clone / "skills" / "notes"))  # an operator edits the clone
        await wait_listed(sup, lambda listed: "skill_notes_jot" in listed)
        assert sup.load_errors() == []


# -- per-session tool lists, official MCP SDK client over two sessions --------------------------------------------
class Notifications:
    """Counts ``notifications/tools/list_changed`` of one MCP session; ``wait`` returns at the next one."""

    def __init__(self) -> None:
        self.count = 0
        self._event = trio.Event()

    async def handler(self, message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self.count += 1
            self._event.set()
            self._event = trio.Event()

    async def wait(self) -> None:
        await self._event.wait()

    async def wait_for(self, count: int) -> None:
        """Return once ``count`` notifications have come (at once if they already have: one may come before the
        reply to the call that caused it)."""
        while self.count < count:
            await self.wait()


@asynccontextmanager
async def mcp_session(
    sup: Supervisor, handler: Callable[[Any], Awaitable[None]]
) -> AsyncIterator[tuple[ClientSession, McpStdioServer]]:
    """An MCP session of the SDK client with the supervisor's MCP server, over in-memory byte streams (the same
    newline-delimited JSON-RPC the stdio transport carries)."""
    c2s_send, c2s_recv = trio.testing.memory_stream_one_way_pair()
    s2c_send, s2c_recv = trio.testing.memory_stream_one_way_pair()
    server = McpStdioServer(sup, c2s_recv, s2c_send)
    read_w, read_r = anyio.create_memory_object_stream[SessionMessage | Exception](64)
    write_w, write_r = anyio.create_memory_object_stream[SessionMessage](64)

    async def to_server() -> None:
        async with write_r:
            async for m in write_r:
                line = m.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n"
                await c2s_send.send_all(line.encode())

    async def from_server() -> None:
        buffer = b""
        async with read_w:
            while chunk := await s2c_recv.receive_some():
                *lines, buffer = (buffer + chunk).split(b"\n")
                for line in lines:
                    await read_w.send(SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.serve)
        nursery.start_soon(to_server)
        nursery.start_soon(from_server)
        async with ClientSession(read_r, write_w, message_handler=handler) as session:
            await session.initialize()
            yield session, server
        nursery.cancel_scope.cancel()


async def test_two_mcp_sessions_see_their_own_skills(sandbox_tmp: Path) -> None:
    async with Supervisor.open(skills_policy(sandbox_tmp)) as sup:
        one, two = Notifications(), Notifications()
        with trio.fail_after(30):
            async with mcp_session(sup, one.handler) as (a, server_a), mcp_session(sup, two.handler) as (b, _):
                assert PDF_TOOL not in names((await a.list_tools()).tools)
                assert PDF_TOOL not in names((await b.list_tools()).tools)
                enabled = await a.call_tool("skill_enable_pdf-tools", {})
                assert not enabled.is_error
                assert enabled.structured_content["enabled"] is True
                await one.wait_for(1)
                assert PDF_TOOL in names((await a.list_tools()).tools)
                ran = await a.call_tool(PDF_TOOL, {"file": "doc"})
                assert not ran.is_error
                session_a = root_session_id(Owner("tester"), server_a.session_id)  # the connection's, with tester
                assert ran.content[0].text.endswith(f"on doc in session {session_a}\n")
                # The other session was not told, and its list is unchanged: a round trip on it comes after any
                # notification the server would have sent it.
                assert PDF_TOOL not in names((await b.list_tools()).tools)
                assert two.count == 0
                refused = await b.call_tool(PDF_TOOL, {"file": "doc"})
                assert refused.is_error and "call skill_enable_pdf-tools first" in refused.content[0].text
                assert not (await a.call_tool("skill_disable_pdf-tools", {})).is_error
                await one.wait_for(2)
                assert PDF_TOOL not in names((await a.list_tools()).tools)
                assert (one.count, two.count) == (2, 0)


# -- hot reload through MCP, in a real agents-supervise process ----------------------------------------------------
async def test_hot_reload_sends_list_changed_to_an_sdk_client(sandbox_tmp: Path) -> None:
    tools = sandbox_tmp / "tools"
    tools.mkdir()
    write_script(tools, "old", describe_json("old"), "echo old")
    path = write_policy(
        sandbox_tmp, {"tester": agent(bashToolboxes=[{"tag": "FileSystemDirectory", "contents": {"Path": "./tools"}}])}
    )
    seen = Notifications()
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "supervisor", "--policy", str(path)],
        env={**os.environ, "PYTHONPATH": REPO},
        cwd=REPO,
    )
    with trio.fail_after(60):
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write, message_handler=seen.handler) as session,
        ):
            await session.initialize()
            assert names((await session.list_tools()).tools) == {"bash_old"}
            for change, expected in (
                (lambda: write_script(tools, "new", describe_json("new"), "echo fresh"), {"bash_old", "bash_new"}),
                (
                    lambda: write_script(tools, "new", describe_json("newer"), "echo fresher"),
                    {"bash_old", "bash_newer"},
                ),
                (lambda: (tools / "old").unlink(), {"bash_newer"}),
            ):
                change()
                with trio.fail_after(2):  # the bound: within 2 s of the change
                    await seen.wait()
                    while names((await session.list_tools()).tools) != expected:
                        await seen.wait()  # a change seen in two polls comes as two notifications
            ran = await session.call_tool("bash_newer", {})
            assert ran.content[0].text == "fresher\n"


# -- the kimi example ----------------------------------------------------------------------------------------------
async def test_the_kimi_example_registers_and_runs_bash_ask_user(sandbox_tmp: Path) -> None:
    policy = Path(REPO) / "policies" / "examples" / "kimi.yaml"
    async with Supervisor.open(policy, state_dir=str(sandbox_tmp / "state")) as sup:
        assert sup.load_errors() == []
        tools = {t.name: t for t in sup.list_tools()}
        assert tools["bash_ask_user"].toolbox == "ask-user"
        assert "lua_lua_execute" in tools
        result = await sup.call("bash_ask_user", {"question": "Proceed?"})
        assert result.status == "passed", result.data
        assert result.data.strip()


async def test_a_clone_made_under_one_uid_loads_for_another_agents_uid(sandbox_tmp: Path) -> None:
    """Clones are kept per URL in the state directory; with a uid per worker another agent's skills toolbox (another
    uid) may find the clone later, so clones are made readable by every uid."""
    repo = make_git_repo(sandbox_tmp)
    source = [{"tag": "SkillGitRepo", "contents": {"url": f"file://{repo}", "subdir": "skills"}}]
    uids = {"first": 3_000_000_000, "count": 1000}
    for slug in ("first", "second"):
        path = write_policy(sandbox_tmp, {slug: agent(slug, skillSources=source)}, worker_uids=uids)
        async with Supervisor.open(path) as sup:
            assert sup.load_errors() == [], (slug, sup.load_errors())
            assert (await sup.call("skill_enable_pdf-tools", {}, session_id="s")).status == "passed"
            ran = await sup.call(PDF_TOOL, {"file": "a.pdf"}, session_id="s")
            assert ran.status == "passed", (slug, ran.data)
    [clone] = (sandbox_tmp / "state" / "skills-git").iterdir()
    assert clone.stat().st_mode & 0o777 == 0o755
    assert [e["action"] for e in read_trace(sandbox_tmp) if e.get("event") == "skill_source"] == ["cloned", "kept"]
