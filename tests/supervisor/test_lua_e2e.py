"""The Lua toolbox in real confined workers, through ``Supervisor.open``.

The agent file sits in its own folder (``<tmp>/team``), away from the policy, so a relative path in a script can
only work if the toolbox joins it to ``policy.base_dir`` (the agent file's folder, which the supervisor passes).
Its FileSandbox is ``./repro-cases`` (owned by the sandbox uid, so the worker may write there); ``secret.txt`` beside
it is world-readable, so only the sandbox (the in-worker check, then Landlock) stands between the worker and it.
``tools.call`` reaches a real SQLite toolbox in its own worker, through the portal.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import os
import sqlite3
import textwrap
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import trio

from supervisor._supervisor import Supervisor
from supervisor.workers._launch import plan_frame
from tests._policies import agent, write_policy
from tests._workers import pid_one

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from toolboxes import ToolResult

pytestmark = pytest.mark.root

NOBODY = 65534
SECRET = "top-secret-value"
ADDRESS_SPACE = 1024**3


def _owned_dir(path: Path) -> Path:
    path.mkdir(parents=True)
    os.chown(path, NOBODY, NOBODY)
    return path


def _lua(**contents: Any) -> dict[str, Any]:
    return {
        "tag": "LuaToolbox",
        "contents": {
            "Name": "lua",
            "Description": "scripts",
            "MaxMemoryMB": 32,
            "MaxExecutionTimeSeconds": 1,
            "AllowedTools": ["sqlite_shared_working_memory_query"],
            "AllowedHosts": ["api.example.test"],
            "FileSandbox": {
                "fsbPredicate": {"tag": "DirectoryRecursive", "contents": "./repro-cases"},
                "fsbMaxFileSize": 4096,
                "fsbName": "repro",
            },
            **contents,
        },
    }


@pytest.fixture
def team(sandbox_tmp: Path) -> Path:
    team = sandbox_tmp / "team"
    cases = _owned_dir(team / "repro-cases")
    (cases / "input.json").write_text('{"case": 7, "summary": "split module Foo"}')
    (team / "secret.txt").write_text(SECRET)
    os.chmod(team / "secret.txt", 0o644)
    memory = _owned_dir(team / "memory")
    with sqlite3.connect(memory / "memory.db") as db:
        db.execute("CREATE TABLE analysis_results (content TEXT)")
    os.chown(memory / "memory.db", NOBODY, NOBODY)
    return team


@contextlib.asynccontextmanager
async def _open(sandbox_tmp: Path, lua: dict[str, Any]) -> AsyncIterator[Supervisor]:
    sqlite = {
        "tag": "SqliteToolbox",
        "contents": {
            "Name": "shared_working_memory",
            "Description": "memory",
            "Versioning": {"tag": "SqliteReadWrite", "path": "./memory/memory.db"},
        },
    }
    # No cgroup memory limit, so the worker gets the RLIMIT_AS the memory tests below put behind MaxMemoryMB.
    policy = write_policy(
        sandbox_tmp,
        {"team/tester": agent(builtinToolboxes=[lua, sqlite])},
        landlock_min_abi=6,
        limits={"address_space_bytes": ADDRESS_SPACE, "memory_bytes": None},
    )
    async with Supervisor.open(policy) as sup:
        yield sup


@pytest.fixture
async def sup(sandbox_tmp: Path, team: Path) -> AsyncIterator[Supervisor]:
    async with _open(sandbox_tmp, _lua()) as s:
        yield s


async def _run(sup: Supervisor, script: str, **args: Any) -> ToolResult:
    return await sup.call("lua_lua_execute", {"script": script, **args})


def _values(result: ToolResult) -> list[Any]:
    assert result.status == "passed", result.data
    return result.structured["values"]


def _error(result: ToolResult) -> dict[str, Any]:
    assert result.status != "passed", result.data
    assert isinstance(result.structured, dict), result.data
    return result.structured["error"]


def _worker_pid(sup: Supervisor, toolbox: str = "lua") -> int:
    """The worker process proper: PID 1 of its namespace (``tests._workers.pid_one``)."""
    worker = sup.runner(toolbox).worker
    assert worker is not None and worker.pid is not None
    return pid_one(worker.pid)


# --- the seed's example, with a real SQLite toolbox behind tools.call


SEED_SCRIPT = """
local content = fs.read("./repro-cases/input.json")
if not content then
    return {error = "Failed to read file"}
end
local analysis = json.decode(content)
local db_result = tools.call("sqlite_shared_working_memory_query", {
    sql = "INSERT INTO analysis_results (content) VALUES ('" .. analysis.summary .. "')"
})
local read_back = tools.call("sqlite_shared_working_memory_query", {sql = "SELECT content FROM analysis_results"})
fs.write("./repro-cases/output.json", json.encode(analysis))
return {
    success = db_result.status == "ok",
    stored = read_back.result_txt,
    input = analysis,
    listed = fs.list("./repro-cases"),
}
"""


async def test_seed_example_script_runs_in_a_confined_worker(sup: Supervisor, team: Path) -> None:
    [value] = _values(await _run(sup, SEED_SCRIPT))
    assert value["success"] is True, value
    assert "split module Foo" in value["stored"]
    assert value["input"] == {"case": 7, "summary": "split module Foo"}
    assert sorted(value["listed"]) == ["input.json", "output.json"]
    output = team / "repro-cases" / "output.json"
    assert json.loads(output.read_text()) == {"case": 7, "summary": "split module Foo"}
    assert output.stat().st_uid == NOBODY  # written by the confined worker, not by the test
    with sqlite3.connect(team / "memory" / "memory.db") as db:
        assert db.execute("SELECT content FROM analysis_results").fetchall() == [("split module Foo",)]


async def test_tools_call_result_has_the_seeds_tool_result_fields(sup: Supervisor, team: Path) -> None:
    # the seed's ToolResult {resultData, resultDuration, resultTraceId}: data decoded when JSON, the call's trace id
    [value] = _values(
        await _run(
            sup,
            """
        local r = tools.call("sqlite_shared_working_memory_query", {sql = "SELECT 'split' AS word, 7 AS n"})
        local refused = tools.call("sqlite_shared_working_memory_query", {nope = 1})
        return {data = r.data, text = r.result_txt, duration = r.duration, trace_id = r.trace_id,
                refused_trace = refused.trace_id, refused_data = refused.data}
    """,
        )
    )
    assert isinstance(value["data"], dict) and value["data"] == json.loads(value["text"])
    assert "split" in json.dumps(value["data"])
    assert isinstance(value["duration"], float) and 0 < value["duration"] < 30
    sup.trace.flush()
    records = [json.loads(line) for line in Path(sup.compiled.trace_path).read_text().splitlines()]
    sqlite_calls = [
        r["call_id"]
        for r in records
        if r.get("event") == "call_start" and r.get("tool") == "sqlite_shared_working_memory_query"
    ]
    assert value["trace_id"] in sqlite_calls and value["trace_id"].startswith("c")
    # refused by the portal's schema check before dispatch: no call record, so no trace id; the message is the data
    assert value["refused_trace"] == "" and "validation failed" in value["refused_data"]


async def test_relative_paths_start_at_the_agent_files_folder(sup: Supervisor, team: Path) -> None:
    config = sup.runner("lua").spec.plan.payload["config"]
    assert config["policy"]["base_dir"] == str(team)
    assert config["FileSandbox"]["fsbPredicate"] == {"tag": "DirectoryRecursive", "contents": str(team / "repro-cases")}
    same = _values(
        await _run(
            sup,
            f"return fs.read('repro-cases/input.json') == fs.read('{team}/repro-cases/"
            "input.json'), fs.isfile('./repro-cases/input.json')",
        )
    )
    assert same == [True, True]


# --- files outside the sandbox: the in-worker check, and the kernel behind it


async def test_fs_outside_the_sandbox_is_refused_by_the_check(sup: Supervisor, team: Path) -> None:
    for script in (
        "return fs.read('./secret.txt')",
        "return fs.read('repro-cases/../secret.txt')",
        f"return fs.read('{team}/secret.txt')",
        "return fs.write('./planted.txt', 'x')",
        "return fs.read('/etc/passwd')",
    ):
        result = await _run(sup, script)
        err = _error(result)
        assert err["kind"] == "sandbox" and "is not allowed by the file sandbox 'repro'" in err["message"], err
        assert SECRET not in json.dumps(result.structured)
    assert not (team / "planted.txt").exists()


_PROBE = textwrap.dedent("""
    import json, sys
    import lupa.lua54 as lua54
    secret, inside = sys.argv[1], sys.argv[2]
    out = {}
    def attempt(name, fn):
        try:
            out[name] = "allowed: " + repr(fn())[:80]
        except Exception as exc:
            out[name] = type(exc).__name__ + ": " + str(exc)
    lua = lua54.LuaRuntime()  # a raw state: io.open, no prelude, no path check
    attempt("python_read_secret", lambda: open(secret).read())
    attempt("python_write_beside", lambda: open(secret + ".new", "w").close())
    attempt("lua_read_secret", lambda: lua.execute("local f = assert(io.open(...)) return f:read('a')", secret))
    attempt("lua_read_inside", lambda: lua.execute("local f = assert(io.open(...)) return f:read('a')", inside))
    print(json.dumps(out))
""")


async def test_landlock_refuses_the_same_paths_with_the_check_bypassed(sup: Supervisor, team: Path) -> None:
    """The Lua worker's exact plan with a plain Python and a raw Lua state as its entry: the kernel alone."""
    spec = sup.runner("lua").spec
    secret = str(team / "secret.txt")
    for rule in spec.plan.fs_rules:  # no compiled rule reaches the secret or its folder
        assert not (secret + "/").startswith(rule.path.rstrip("/") + "/"), f"{rule} covers {secret}"
    assert str(team / "repro-cases") in {r.path for r in spec.plan.fs_rules}
    # Same file rules, uid, rlimits and Landlock ABI; no network bridge (the probe needs none, and the bridge's
    # descriptor belongs to the running worker).
    plan = dataclasses.replace(
        spec.plan,
        entry="sandbox._launcher:exec_argv",
        bridge=False,
        tcp_connect_ports=(),
        payload={"argv": [spec.argv[0], "-I", "-c", _PROBE, secret, str(team / "repro-cases" / "input.json")]},
    )
    proc = await trio.run_process(
        spec.argv,
        stdin=plan_frame(plan),
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env=spec.env,
        cwd=spec.cwd,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    out = json.loads(proc.stdout)
    assert out["lua_read_inside"].startswith("allowed: ") and "split module Foo" in out["lua_read_inside"]
    unseen, why = (
        ("FileNotFoundError", "No such file or directory")
        if plan.view is not None  # not in the view
        else ("PermissionError", "Permission denied")
    )
    assert out["python_read_secret"].startswith(unseen), f"BREACH: {out['python_read_secret']}"
    assert out["python_write_beside"].startswith("PermissionError"), f"BREACH: {out['python_write_beside']}"
    assert why in out["lua_read_secret"], f"BREACH: lua_read_secret: {out['lua_read_secret']}"
    assert not (team / "secret.txt.new").exists()


# --- limits, and the same worker serving the next call


async def test_a_busy_loop_times_out_and_the_same_worker_serves_the_next_call(sup: Supervisor) -> None:
    await _run(sup, "return 1")
    pid = _worker_pid(sup)
    started = time.monotonic()
    result = await _run(sup, "while true do end")
    elapsed = time.monotonic() - started
    err = _error(result)
    assert err["kind"] == "timeout" and "time limit of 1 s" in err["message"], err
    assert result.status == "error"
    assert 1.0 <= elapsed < 2.0
    started = time.monotonic()
    err = _error(await _run(sup, "local function f() pcall(f) return f() end\nf()", timeout=0.3))
    assert err["kind"] == "timeout" and time.monotonic() - started < 1.0
    assert _values(await _run(sup, "return 6 * 7")) == [42]
    assert _worker_pid(sup) == pid
    assert sup.runner("lua").restarts == 0


async def test_max_memory_mb_with_the_worker_rlimit_behind_it(sandbox_tmp: Path, team: Path) -> None:
    # MaxMemoryMB (32) is the allocator limit; the policy's address space (1 GiB) is the rlimit behind it. The time
    # limit is generous: filling 32 MB takes seconds on a loaded machine, and this test is about memory.
    async with _open(sandbox_tmp, _lua(MaxExecutionTimeSeconds=10)) as sup:
        pid = _worker_pid(sup)
        limits = Path(f"/proc/{pid}/limits").read_text()
        assert f"Max address space         {ADDRESS_SPACE}" in limits, limits
        err = _error(await _run(sup, "local t = {}\nfor i = 1, 1e9 do t[i] = string.rep('x', 1000) .. i end"))
        assert err["kind"] == "memory" and "32 MB" in err["message"], err
        assert _values(await _run(sup, "return #string.rep('x', 2^20)")) == [2**20]
        assert _worker_pid(sup) == pid
    # A MaxMemoryMB above the rlimit: the rlimit refuses the allocation and it is still a memory error, not a crash.
    async with _open(sandbox_tmp, _lua(MaxMemoryMB=8192, MaxExecutionTimeSeconds=10)) as sup:
        pid = _worker_pid(sup)
        err = _error(await _run(sup, "local s = string.rep('x', 3 * 2^29)\nreturn #s"))
        assert err["kind"] == "memory", err
        assert "address space is limited to 1024 MB" in err["message"], err
        assert _values(await _run(sup, "return #string.rep('x', 2^20)")) == [2**20]
        assert _worker_pid(sup) == pid


# --- network


async def test_http_to_a_host_not_allowed_is_refused_and_sends_nothing(sandbox_tmp: Path, team: Path) -> None:
    async with _open(sandbox_tmp, _lua()) as sup:
        assert sup.runner("lua").spec.plan.bridge  # the worker has a way out: the proxy, for api.example.test only
        for url in (
            "http://evil.example.test/",
            "http://127.0.0.1:1/",
            "http://169.254.169.254/latest/meta-data/",
            "http://api.example.test.evil.test/",
        ):
            err = _error(await _run(sup, f"return http.get('{url}')"))
            assert err["kind"] == "sandbox" and "AllowedHosts" in err["message"], err
    records = [json.loads(line) for line in (sandbox_tmp / "state" / "trace.jsonl").read_text().splitlines()]
    assert [r for r in records if r["event"] == "call_end"], "the trace was written"
    assert [r for r in records if r["event"] == "egress"] == []  # refused before any packet reached the proxy


async def test_a_lua_orchestrator_that_calls_attach_file_gets_the_bytes(sandbox_tmp: Path, team: Path) -> None:
    """The seed's file-agent lets its Lua toolbox call ``system_system_attach_file``; the seed's attach-file returns
    a MediaAttachment with base64-encoded content, and that is what ``tools.call`` gives the script."""
    from tests.sandbox.test_escapes import _png

    charts = team / "charts"
    charts.mkdir()
    (charts / "chart.png").write_bytes(_png(3, 2))
    (charts / "notes.md").write_text("# Notes\n")
    system = {
        "tag": "SystemToolbox",
        "contents": {
            "Name": "system",
            "Description": "files",
            "Capabilities": ["attach-file"],
            "FileSandbox": {"fsbPredicate": {"tag": "DirectoryRecursive", "contents": "./charts"}},
        },
    }
    lua = _lua(AllowedTools=["system_system_attach_file"], AllowedHosts=[])
    policy = write_policy(sandbox_tmp, {"team/tester": agent(builtinToolboxes=[lua, system])}, landlock_min_abi=6)
    async with Supervisor.open(policy) as sup:
        [chart, notes] = _values(
            await _run(
                sup,
                """
            local png = tools.call("system_system_attach_file", {filepath = "./charts/chart.png"})
            local md = tools.call("system_system_attach_file", {filepath = "./charts/notes.md"})
            return png.data, md.data
        """,
            )
        )
        # the MCP frontend's view of the same call is unchanged: an image, with the summary as its text
        direct = await sup.call("system_system_attach_file", {"filepath": "./charts/chart.png"})
    assert chart["mediaMimeType"] == "image/png" and chart["mediaFilename"] == "chart.png"
    assert base64.b64decode(chart["mediaBase64Data"]) == _png(3, 2)
    assert notes["mediaMimeType"] == "text/markdown" and base64.b64decode(notes["mediaBase64Data"]) == b"# Notes\n"
    assert direct.data is None and direct.summary.startswith("attached chart.png (image/png, ")
    assert [a.media_type for a in direct.attachments] == ["image/png"]
