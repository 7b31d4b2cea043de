"""The Lua toolbox, in-process against its toolbox object (the worker-process integration is tested with the worker).

Calls go through ``LuaToolbox.call`` exactly as the worker loop makes them, with real Lua states, real files, real
SQLite and a real HTTP proxy on loopback. ``tools.call`` reaches :class:`StandInPortal`, a small channel that answers
portal requests itself: it stands in for the supervisor's portal, whose checks (allowed tools, depth, schema) are
tested in the supervisor's own suite; here it only has to answer the way the portal answers.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import sqlite3
import threading
import time
from typing import TYPE_CHECKING, Any

import pytest

from toolboxes import CallContext, ToolResult, WorkerEnv
from toolboxes._unified_diff import PatchError, apply_patch
from toolboxes.lua import KINDS, LuaConfigError, LuaToolbox, open_toolbox

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

#: How far past its limit a stopped script may end (a noisy 2-core machine shared with other test runs).
MARGIN_S = 0.35


class StandInPortal:
    """Answers ``tools.call`` like the supervisor's portal: an agent tool with canned JSON, a SQLite tool on a
    real database, and the portal's refusal (metadata ``portal_error``) for anything else."""

    def __init__(self, db_path: str) -> None:
        self.db_path = db_path
        self.calls: list[tuple[str, dict[str, Any], int]] = []

    def portal(self, ctx: CallContext, tool: str, args: dict[str, Any]) -> ToolResult:
        self.calls.append((tool, args, ctx.call_id))
        if tool == "io_prompt_agent_local_lrmlua":
            answer = {"summary": "split module Foo", "question": args.get("what")}
            return ToolResult.passed(json.dumps(answer)).with_meta("trace_id", "trace-1")
        if tool == "sqlite_shared_working_memory_query":
            with sqlite3.connect(self.db_path) as db:
                try:
                    rows = db.execute(args["sql"]).fetchall()
                except sqlite3.Error as exc:
                    return ToolResult.failed(str(exc))
            return ToolResult.json(rows)
        refusal = ToolResult("error", summary="PortalToolNotAllowed", data=f"Tool '{tool}' is not allowed")
        return refusal.with_meta("portal_error", "PortalToolNotAllowed")

    def host(self, ctx: CallContext, op: str, args: dict[str, Any]) -> Any:
        raise RuntimeError("no host operations in these tests")

    def event(self, event: dict[str, Any]) -> None:
        pass

    def tools_changed(self) -> None:
        pass


@pytest.fixture
def tree(sandbox_tmp: Path) -> Path:
    """An agent folder: a sandboxed ``repro-cases`` tree, a README, and a secret outside the sandbox."""
    (sandbox_tmp / "repro-cases").mkdir()
    (sandbox_tmp / "repro-cases" / "input.json").write_text('{"case": 7}')
    (sandbox_tmp / "README.md").write_text("# readme\n")
    (sandbox_tmp / "secret.txt").write_text("top secret")
    (sandbox_tmp / "repro-cases" / "escape").symlink_to(sandbox_tmp / "secret.txt")
    with sqlite3.connect(sandbox_tmp / "memory.db") as db:
        db.execute("CREATE TABLE analysis_results (content TEXT)")
    return sandbox_tmp


def make_toolbox(tree: Path, portal: StandInPortal | None = None, **overrides: Any) -> LuaToolbox:
    config: dict[str, Any] = {
        "Name": "lua",
        "Description": "Sandboxed Lua interpreter",
        "MaxMemoryMB": 16,
        "MaxExecutionTimeSeconds": 1,
        "AllowedTools": ["io_prompt_agent_local_lrmlua", "sqlite_shared_working_memory_query", "bash_ask_user"],
        "AllowedHosts": [],
        "FileSandbox": {
            "fsbPredicate": {
                "tag": "Any",
                "contents": [
                    {"tag": "DirectoryRecursive", "contents": str(tree / "repro-cases")},
                    {"tag": "FileExactly", "contents": str(tree / "README.md")},
                ],
            },
            "fsbMaxFileSize": 4096,
            "fsbName": "lua-fs-sandbox",
        },
        "policy": {"base_dir": str(tree)},
    }
    config.update(overrides)
    env = WorkerEnv("lua", str(tree), str(tree), channel=portal or StandInPortal(str(tree / "memory.db")))
    return open_toolbox(config, env)


def run(tb: LuaToolbox, script: str, **args: Any) -> ToolResult:
    return tb.call("lua_lua_execute", {"script": script, **args}, CallContext(call_id=1, tool="lua_lua_execute"))


def error_of(result: ToolResult) -> dict[str, Any]:
    assert result.status != "passed", result.data
    assert isinstance(result.structured, dict) and "error" in result.structured, result.data
    return result.structured["error"]


def values_of(result: ToolResult) -> list[Any]:
    assert result.status == "passed", result.summary
    return result.structured["values"]


# --- the tool and its results


def test_tool_is_named_in_public_form_with_a_script_schema(tree: Path) -> None:
    [spec] = make_toolbox(tree).tools()
    assert spec.name == "lua_lua_execute"
    assert spec.input_schema["required"] == ["script"]
    assert set(spec.input_schema["properties"]) == {"script", "timeout"}


def test_values_come_back_in_return_order_as_json(tree: Path) -> None:
    result = run(make_toolbox(tree), "return 1, 'two', {1, 2, 3}, {a = {b = true}}, nil, 2.5, {}, json.null")
    assert values_of(result) == [1, "two", [1, 2, 3], {"a": {"b": True}}, None, 2.5, {}, None]
    assert isinstance(result.structured["executionTime"], float)
    assert json.loads(result.data or "") == result.structured


def test_sparse_and_mixed_tables_become_objects(tree: Path) -> None:
    assert values_of(run(make_toolbox(tree), "return {[1] = 'a', [3] = 'c'}, {1, x = 2}")) == [
        {"1": "a", "3": "c"},
        {"1": 1, "x": 2},
    ]


def test_a_function_value_is_a_runtime_error_not_a_crash(tree: Path) -> None:
    err = error_of(run(make_toolbox(tree), "return print"))
    assert err["kind"] == "runtime" and "function" in err["message"]


def test_runtime_error_carries_the_line(tree: Path) -> None:
    result = run(make_toolbox(tree), "local a = 1\nlocal b = nil\nlocal c = b.x\nreturn c")
    err = error_of(result)
    assert (err["kind"], err["line"]) == ("runtime", 3)
    assert result.status == "failed"
    assert "line 3" in (result.summary or "")


def test_syntax_error_is_a_runtime_error_with_the_line(tree: Path) -> None:
    err = error_of(run(make_toolbox(tree), "local x = 1\nreturn x +"))
    assert err["kind"] == "runtime" and err["line"] == 2


def test_error_with_a_table_value_has_a_message(tree: Path) -> None:
    err = error_of(run(make_toolbox(tree), "error({code = 1})"))
    assert err["kind"] == "runtime" and "table" in err["message"]


def test_print_output_is_returned(tree: Path) -> None:
    result = run(make_toolbox(tree), "print('hello', 42) return true")
    assert result.structured["output"] == "hello\t42\n"


# --- the seed's example


SEED_SCRIPT = """
local content = fs.read("./repro-cases/input.json")
if not content then
    return {error = "Failed to read file"}
end
local reasoning_result = tools.call("io_prompt_agent_local_lrmlua", {
    what = "Analyze this codebase structure and identify potential refactoring opportunities"
})
if reasoning_result.status == "ok" then
    local analysis = json.decode(reasoning_result.result_txt)
    local db_result = tools.call("sqlite_shared_working_memory_query", {
        sql = "INSERT INTO analysis_results (content) VALUES ('" .. analysis.summary .. "')"
    })
    fs.write("./repro-cases/output.json", json.encode(analysis))
    return {
        success = true,
        analysis = analysis,
        stored = db_result.status == "ok",
        input = json.decode(content),
        trace = reasoning_result.trace_id,
    }
else
    return {success = false, error = reasoning_result.error}
end
"""


def test_seed_example_script_runs(tree: Path) -> None:
    portal = StandInPortal(str(tree / "memory.db"))
    [value] = values_of(run(make_toolbox(tree, portal), SEED_SCRIPT))
    assert value["success"] is True and value["stored"] is True
    assert value["input"] == {"case": 7}
    assert value["analysis"]["summary"] == "split module Foo"
    assert value["trace"] == "trace-1"
    assert json.loads((tree / "repro-cases" / "output.json").read_text())["summary"] == "split module Foo"
    with sqlite3.connect(tree / "memory.db") as db:
        assert db.execute("SELECT content FROM analysis_results").fetchall() == [("split module Foo",)]
    assert [c[0] for c in portal.calls] == ["io_prompt_agent_local_lrmlua", "sqlite_shared_working_memory_query"]


def test_tools_call_result_data_is_decoded_json_or_the_text(tree: Path) -> None:
    portal = StandInPortal(str(tree / "memory.db"))
    script = """
    local r = tools.call("io_prompt_agent_local_lrmlua", {what = "x"})
    local t = tools.call("sqlite_shared_working_memory_query", {sql = "SELECT nope FROM missing_table"})
    return r.data.summary, r.data.question, r.trace_id, type(r.duration), t.data == t.result_txt, type(t.data)
    """
    assert values_of(run(make_toolbox(tree, portal), script)) == [
        "split module Foo",
        "x",
        "trace-1",
        "number",
        True,
        "string",
    ]


def test_tools_call_refusals_and_list(tree: Path) -> None:
    portal = StandInPortal(str(tree / "memory.db"))
    script = """
    local a = tools.call("system_other_date", {})
    local b = tools.call("bash_ask_user", {question = "?"})
    local c = tools.call("sqlite_shared_working_memory_query", {sql = "SELECT nope FROM missing_table"})
    return a.status, b.status, c.status, c.error, tools.list()
    """
    a, b, c, c_err, listed = values_of(run(make_toolbox(tree, portal), script))
    assert a == "not-allowed"  # refused in-process: not in AllowedTools, never sent
    assert b == "not-allowed"  # refused by the portal
    assert c == "error" and "no such table" in c_err
    assert [t for t, _, _ in portal.calls] == ["bash_ask_user", "sqlite_shared_working_memory_query"]
    assert listed == ["io_prompt_agent_local_lrmlua", "sqlite_shared_working_memory_query", "bash_ask_user"]


def test_tools_call_with_bad_arguments_is_a_tool_invocation_error(tree: Path) -> None:
    result = run(make_toolbox(tree), "local x = tools.call('bash_ask_user', {f = print})\nreturn x")
    err = error_of(result)
    assert err["kind"] == "tool_invocation" and err["line"] is not None if "line" in err else True
    assert result.status == "failed"


# --- escapes: each must fail


@pytest.mark.parametrize(
    ("script", "kind"),
    [
        ("local p = python\nreturn p.builtins", "sandbox"),
        ("local f = load('\\27Lua\\x54\\0')\nreturn f", "sandbox"),
        ("local f = load('return 1', 'x', 'b')\nreturn f", "sandbox"),
        ("local f = load('return x', 'x', 't', {x = 1})\nreturn f", "sandbox"),
        ("local d = string.dump(function() end)\nreturn d", "sandbox"),
        ("local d = ('').dump\nreturn d", "sandbox"),
        ("local f = io.open('/etc/passwd')\nreturn f", "sandbox"),
        ("local r = os.execute('id')\nreturn r", "sandbox"),
        ("local r = os.getenv('HOME')\nreturn r", "sandbox"),
        ("local m = require('socket')\nreturn m", "sandbox"),
        ("local m = require('lfs')\nreturn m", "sandbox"),
        ("local m = package.loadlib('libc.so.6', 'system')\nreturn m", "sandbox"),
        ("local i = debug.getinfo(1)\nreturn i", "sandbox"),
        ("local r = dofile('/etc/passwd')\nreturn r", "sandbox"),
        ("local r = loadfile('/etc/passwd')\nreturn r", "sandbox"),
        ("local r = collectgarbage('stop')\nreturn r", "sandbox"),
        ("local t = setmetatable({}, {__gc = function() end})\nreturn t", "sandbox"),
    ],
)
def test_escape_attempt_is_refused(tree: Path, script: str, kind: str) -> None:
    result = run(make_toolbox(tree), script)
    err = error_of(result)
    assert err["kind"] == kind, err
    assert err["message"].startswith("script:1: sandbox: "), err
    assert result.status == "error"


def test_host_functions_are_lua_closures_without_python_attributes(tree: Path) -> None:
    script = """
    local seen = {}
    for _, m in ipairs({fs, http, tools, json, text, time}) do
      for name, f in pairs(m) do seen[#seen + 1] = type(f) end
    end
    local ok, err = pcall(function() return fs.read.__globals__ end)
    return seen, ok, getmetatable(fs.read), collectgarbage('count') > 0
    """
    seen, ok, mt, counted = values_of(run(make_toolbox(tree), script))
    assert set(seen) <= {"function", "table"}
    assert ok is False and mt is None and counted is True


def test_load_of_text_still_works_in_the_script_environment(tree: Path) -> None:
    assert values_of(run(make_toolbox(tree), "x = 41\nlocal f = load('return x + 1')\nreturn f()")) == [42]


# --- fs


@pytest.mark.parametrize(
    "path", ["/etc/passwd", "../secret.txt", "./secret.txt", "./repro-cases/../secret.txt", "./repro-cases/escape"]
)
def test_fs_read_outside_the_sandbox_is_refused(tree: Path, path: str) -> None:
    err = error_of(run(make_toolbox(tree), f"local s = fs.read({path!r})\nreturn s"))
    assert err["kind"] == "sandbox" and "not allowed" in err["message"]
    assert "top secret" not in json.dumps(err)


def test_fs_write_outside_the_sandbox_creates_nothing(tree: Path) -> None:
    err = error_of(run(make_toolbox(tree), "fs.write('./stolen.txt', 'x')"))
    assert err["kind"] == "sandbox"
    assert not (tree / "stolen.txt").exists()


def test_fs_write_larger_than_fsb_max_file_size_is_refused(tree: Path) -> None:
    err = error_of(run(make_toolbox(tree), "fs.write('./repro-cases/big.txt', string.rep('x', 5000))"))
    assert err["kind"] == "sandbox" and "fsbMaxFileSize" in err["message"]
    assert not (tree / "repro-cases" / "big.txt").exists()


def test_fs_operations_inside_the_sandbox(tree: Path) -> None:
    script = """
    assert(fs.mkdir('./repro-cases/out/deep'))
    assert(fs.write('./repro-cases/out/deep/a.txt', 'one\\ntwo\\nthree\\n'))
    local patched = fs.patch('./repro-cases/out/deep/a.txt', '@@ -2,1 +2,1 @@\\n-two\\n+TWO\\n')
    local missing, err = fs.read('./repro-cases/none.txt')
    return fs.read('./repro-cases/out/deep/a.txt'), patched, fs.list('./repro-cases'),
      fs.isdir('./repro-cases/out'), fs.isfile('./repro-cases/out'), fs.exists('./README.md'), missing, err
    """
    content, patched, listing, isdir, isfile, exists, missing, err = values_of(run(make_toolbox(tree), script))
    assert content == "one\nTWO\nthree\n"
    assert patched == {"hunks_applied": 1, "lines_changed": 2}
    assert listing == ["escape", "input.json", "out"] or listing == ["input.json", "out"]
    assert (isdir, isfile, exists, missing) == (True, False, True, None)
    assert "No such file" in err


def test_patch_rejects_a_hunk_that_does_not_match() -> None:
    assert apply_patch("a\nb\nc\n", "@@ -1,2 +1,2 @@\n a\n-b\n+B\n", fuzzy=True).text == "a\nB\nc\n"
    with pytest.raises(PatchError, match="hunk 1 does not apply"):
        apply_patch("a\nb\n", "@@ -1,1 +1,1 @@\n-zzz\n+y\n", fuzzy=True)
    with pytest.raises(PatchError, match="no hunks"):
        apply_patch("a\n", "--- a/x\n+++ b/x\n", fuzzy=True)


# --- http


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    """Stands in for the supervisor's egress proxy: answers absolute-form requests itself, recording them."""

    seen: list[str] = []

    def do_GET(self) -> None:
        self.seen.append(self.requestline)
        body = b'{"hello": "from the proxy"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def proxy() -> Iterator[tuple[str, list[str]]]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ProxyHandler)
    seen: list[str] = []
    server.RequestHandlerClass = type("H", (_ProxyHandler,), {"seen": seen})
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_http_to_an_allowed_host_goes_through_the_proxy(
    tree: Path, proxy: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, seen = proxy
    monkeypatch.setenv("HTTP_PROXY", url)
    tb = make_toolbox(tree, AllowedHosts=["api.example.test"])
    script = "local r = http.get('http://api.example.test/v1?q=1')\nreturn r.status, json.decode(r.body), r.ok"
    assert values_of(run(tb, script)) == [200, {"hello": "from the proxy"}, True]
    assert seen == ["GET http://api.example.test/v1?q=1 HTTP/1.1"]


def test_http_to_a_host_not_allowed_sends_nothing(
    tree: Path, proxy: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, seen = proxy
    monkeypatch.setenv("HTTP_PROXY", url)
    target = socket.socket()
    target.bind(("127.0.0.1", 0))
    target.listen()
    target.setblocking(False)
    port = target.getsockname()[1]
    tb = make_toolbox(tree, AllowedHosts=["api.example.test"])
    for host in [f"127.0.0.1:{port}", "169.254.169.254", "evil.example.test", "api.example.test.evil.test"]:
        err = error_of(run(tb, f"local r = http.get('http://{host}/')\nreturn r"))
        assert err["kind"] == "sandbox" and "AllowedHosts" in err["message"], err
    with pytest.raises(BlockingIOError):
        target.accept()
    target.close()
    assert seen == []


def test_http_honours_ports_and_port_ranges_of_allowed_hosts(
    tree: Path, proxy: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, seen = proxy
    monkeypatch.setenv("HTTP_PROXY", url)
    tb = make_toolbox(tree, AllowedHosts=["api.example.test:8000-8100", "web.example.test:80"])
    for target in ["http://api.example.test:8000/", "http://api.example.test:8100/", "http://web.example.test/"]:
        assert values_of(run(tb, f"local r = http.get('{target}')\nreturn r.status"))[0] == 200, target
    for target in ["http://api.example.test:8101/", "http://api.example.test/", "http://web.example.test:8080/"]:
        err = error_of(run(tb, f"local r = http.get('{target}')\nreturn r"))
        assert err["kind"] == "sandbox" and "not allowed on port" in err["message"], (target, err)
    assert len(seen) == 3


def test_http_without_a_proxy_is_refused(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HTTP_PROXY", "http_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    err = error_of(
        run(
            make_toolbox(tree, AllowedHosts=["api.example.test"]),
            "local r = http.get('http://api.example.test/')\nreturn r",
        )
    )
    assert err["kind"] == "sandbox" and "proxy" in err["message"]


# --- limits: each ends with the right error within the limit plus a margin, and the next call works


LIMIT_CASES = [
    ("while true do end", "timeout"),
    ("while true do pcall(function() while true do end end) end", "timeout"),
    ("while true do pcall(error, 'x') end", "timeout"),
    ("local f = coroutine.wrap(function() while true do end end)\nf()", "timeout"),
    (
        "while true do\n local co = coroutine.create(function() while true do end end)\n"
        " pcall(coroutine.resume, co)\nend",
        "timeout",
    ),
    ("local function f(n) return f(n + 1) end\nreturn f(1)", "timeout"),
    ("return string.find(string.rep('a', 3000), string.rep('a*', 20) .. 'b')", "timeout"),
    ("local s = string.rep('a', 200000)\nreturn s:match('.-.-.-b')", "timeout"),
    ("local s = string.rep('a', 200000)\nreturn s:gsub('(a-)(a-)$x', '%2%1')", "timeout"),
    ("local s = string.rep('x', 2^28)\nreturn #s", "memory"),
    ("local t = {}\nfor i = 1, 1e9 do t[i] = i end", "memory"),
    ("local t, s = {}, 'x'\nwhile true do s = s .. s\nt[#t + 1] = s end", "memory"),
    ("local function f(n) return 1 + f(n + 1) end\nreturn f(1)", "memory"),
    # The two scripts that once defeated the hook (docs/LUA.md, "Time"), and their variants.
    # pcall on itself at the C-stack limit: the hook's own call fails there with "C stack overflow".
    ("local function f() pcall(f) return f() end\nf()", "timeout"),
    ("local function f() pcall(f) while true do end end\nf()", "timeout"),
    ("local function f() xpcall(f, function(e) return e end) return f() end\nf()", "timeout"),
    ("local function f() coroutine.resume(coroutine.create(f)) return f() end\nf()", "timeout"),
    ("local function f() pcall(string.gsub, 'a', '.', f) return f() end\nf()", "timeout"),
    ("local function f() load(f) return f() end\nf()", "timeout"),
    # the same inside a coroutine, where a yieldable pcall takes no C frame and nests until memory runs out
    ("coroutine.wrap(function() local function f() pcall(f) return f() end f() end)()", "timeout"),
    (
        "local co = coroutine.create(function() local function f() pcall(f) return f() end f() end)\n"
        "while true do coroutine.resume(co) end",
        "timeout",
    ),
    # a message handler that loops: it used to run with hooks off once the hook's error reached it
    ("xpcall(function() while true do end end, function() while true do end end)", "timeout"),
    ("xpcall(function() error('x') end, function() while true do end end)", "timeout"),
    ("local function f() xpcall(f, function() while true do end end) return f() end\nf()", "timeout"),
    (
        "coroutine.wrap(function() xpcall(function() while true do end end, function() while true do end end) end)()",
        "timeout",
    ),
    # error objects whose __tostring loops, caught and uncaught
    ("local e = setmetatable({}, {__tostring = function() while true do end end})\nerror(e)", "timeout"),
    (
        "local e = setmetatable({}, {__tostring = function() while true do end end})\n"
        "while true do pcall(error, e) end",
        "timeout",
    ),
    (
        "local e = setmetatable({}, {__tostring = function() while true do end end})\n"
        "return xpcall(error, tostring, e)",
        "timeout",
    ),
    # string.gsub with a function replacement that loops, alone and under pcall
    ("return string.gsub('aaa', 'a', function() while true do end end)", "timeout"),
    ("while true do pcall(string.gsub, 'aaa', 'a', function() while true do end end) end", "timeout"),
    # to-be-closed variables whose __close loops, and load with a reader that loops
    ("do local x <close> = setmetatable({}, {__close = function() while true do end end})\nerror('x') end", "timeout"),
    ("while true do load(function() while true do end end) end", "timeout"),
]


def run_bounded(tb: LuaToolbox, script: str, **args: Any) -> ToolResult:
    """``run`` on a thread, failing (instead of hanging the suite) when the script escaped its limit: a Lua state
    cannot be stopped from outside, so the escaped thread is left spinning, as a worker would until its wall time."""
    results: list[ToolResult] = []
    thread = threading.Thread(target=lambda: results.append(run(tb, script, **args)), daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), f"the script escaped the time limit and still runs after 10 s: {script!r}"
    return results[0]


@pytest.mark.parametrize(("script", "kind"), LIMIT_CASES)
def test_limit_holds_and_the_next_call_works(tree: Path, script: str, kind: str) -> None:
    tb = make_toolbox(tree)
    started = time.monotonic()
    result = run_bounded(tb, script, timeout=0.4)
    elapsed = time.monotonic() - started
    err = error_of(result)
    assert err["kind"] == kind, err
    assert elapsed < 0.4 + MARGIN_S
    if kind == "timeout":
        assert elapsed >= 0.4
        assert "0.4 s" in err["message"]
    assert values_of(run(tb, "return 1 + 1")) == [2]


def test_protected_calls_still_behave_like_lua(tree: Path) -> None:
    script = """
    local r = {}
    r[1] = json.array({pcall(error, 'x')})
    r[2] = json.array({pcall(function(a, b) return a + b, 'two' end, 1, 2)})
    r[3] = json.array({xpcall(function() error('boom', 0) end, function(e) return 'handled ' .. e end)})
    r[4] = json.array({xpcall(function(a) return a * 2 end, print, 21)})
    r[5] = json.array({pcall(pcall, error, 'inner')})
    local co = coroutine.create(function(a) local b = coroutine.yield(a + 1) error('co ' .. b, 0) end)
    r[6] = json.array({coroutine.resume(co, 1)})
    r[7] = json.array({coroutine.resume(co, 'done')})
    r[8] = type(load(function() return nil end))
    r[9] = select(2, load(function() error('reader', 0) end))
    return r
    """
    assert values_of(run(make_toolbox(tree), script)) == [
        [
            [False, "x"],
            [True, 3, "two"],
            [False, "handled boom"],
            [True, 42],
            [True, False, "inner"],
            [True, 2],
            [False, "co done"],
            "function",
            "reader",
        ]
    ]


def test_protected_calls_nest_to_a_bound_with_a_clear_error(tree: Path) -> None:
    script = """
    local depth = 0
    local function f() depth = depth + 1 local ok, e = pcall(f) if not ok then error(e, 0) end end
    local ok, e = pcall(f)
    return depth, e
    """
    for wrapped in (script, f"return coroutine.wrap(function() {script} end)()"):
        depth, message = values_of(run(make_toolbox(tree), wrapped))
        assert depth == 100  # the outer pcall and 99 of f's
        assert "pcall: protected calls nested deeper than 100 levels" in message
    # the count is per thread: coroutines suspended inside pcalls do not use up the main thread's levels
    script = """
    local cos = {}
    for i = 1, 150 do
      local co = coroutine.create(function() pcall(coroutine.yield, i) return pcall(error, 'late ' .. i, 0) end)
      assert(coroutine.resume(co))
      cos[i] = co
    end
    local inner = {pcall(pcall, pcall, function() return 'deep enough' end)}
    return inner[4], select(3, coroutine.resume(cos[150]))
    """
    assert values_of(run(make_toolbox(tree), script)) == ["deep enough", "late 150"]
    err = error_of(run(make_toolbox(tree), "xpcall(print, 42)"))
    assert err["kind"] == "runtime" and "bad argument #2 to 'xpcall' (function expected, got number)" in err["message"]


def test_the_call_timeout_only_lowers_the_toolbox_limit(tree: Path) -> None:
    tb = make_toolbox(tree, MaxExecutionTimeSeconds=0.3)
    started = time.monotonic()
    err = error_of(run(tb, "while true do end", timeout=60))
    assert err["kind"] == "timeout"
    assert 0.3 <= time.monotonic() - started < 0.3 + MARGIN_S


def test_a_cancelled_call_ends_promptly(tree: Path) -> None:
    tb = make_toolbox(tree, MaxExecutionTimeSeconds=30)
    ctx = CallContext(call_id=2, tool="lua_lua_execute")
    timer = threading.Timer(0.2, ctx.cancel)
    timer.start()
    started = time.monotonic()
    result = tb.call("lua_lua_execute", {"script": "while true do end"}, ctx)
    assert time.monotonic() - started < 0.2 + MARGIN_S
    assert error_of(result)["kind"] == "timeout" and "cancelled" in error_of(result)["message"]
    timer.join()


def test_memory_errors_swallowed_by_pcall_still_end_the_script(tree: Path) -> None:
    script = "local t = {}\nwhile true do pcall(function() t[#t + 1] = string.rep('x', 1e6) .. #t end) end"
    started = time.monotonic()
    err = error_of(run(make_toolbox(tree), script, timeout=0.4))
    assert err["kind"] == "timeout"
    assert time.monotonic() - started < 0.4 + MARGIN_S


def test_fast_patterns_still_match_like_lua(tree: Path) -> None:
    script = r"""
    local big = string.rep('ab ', 20000)
    local n = select(2, big:gsub('%s+', ''))
    local words = {}
    for w in ('one two  three'):gmatch('%a+') do words[#words + 1] = w end
    local k, v = ('key = value'):match('^(%w+)%s*=%s*(%w+)$')
    local b1, b2 = ('x(a(b)c)y'):find('%b()')
    return n, words, k, v, b1, b2, ('THE (quick) fox'):find('%f[%a]%a+', 5)
    """
    assert values_of(run(make_toolbox(tree), script)) == [20000, ["one", "two", "three"], "key", "value", 2, 8, 6, 10]


def test_the_lua_pattern_matcher_agrees_with_lua_on_costly_patterns(tree: Path) -> None:
    # Subjects of 20000 bytes with two backtracking items go to the Lua port of the matcher.
    script = r"""
    local s = string.rep('a', 20000) .. 'key=val; other=thing'
    local a, b, k, v = s:find('(%w+)=(%w+)', 1)
    local subst, n = s:gsub('(%w+)=(%w+)', '%2:%1')
    local tail = s:match('.-;%s*(.*)$')
    local pos = {s:find('()t()h', 1)}
    local count = 0
    for x, y in s:gmatch('(%a+)=(%a+)') do count = count + 1 end
    return a, b, #k, v, subst:sub(-22), n, tail, pos, count
    """
    a, b, klen, v, subst, n, tail, pos, count = values_of(run(make_toolbox(tree), script))
    assert (a, b, klen, v) == (1, 20007, 20003, "val")
    assert (subst, n) == ("val:aaa; thing:other", 2) or subst.endswith("; thing:other")
    assert n == 2 and tail == "other=thing" and count == 2
    assert pos == [20012, 20013, 20012, 20013] or len(pos) == 4


# --- modules


def test_json_module(tree: Path) -> None:
    script = r"""
    local ok, err = pcall(json.decode, '{"a": [1, 2')
    local v = json.decode([==[{"s": "\u00e9\n", "n": -1.5e3, "i": 12, "l": [true, null, false], "o": {}}]==])
    return ok, err, v.s, v.n, math.type(v.i), v.l[2] == json.null, json.encode_pretty({b = 1, a = {}}),
      json.encode('x"\n')
    """
    ok, err, s, n, itype, isnull, pretty, enc = values_of(run(make_toolbox(tree), script))
    assert ok is False and "json.decode" in err and "position" in err
    assert (s, n, itype, isnull) == ("é\n", -1500.0, "integer", True)
    assert pretty == '{\n  "a": {},\n  "b": 1\n}'
    assert enc == '"x\\"\\n"'


def test_json_decode_error_uncaught_is_a_runtime_error_at_the_line(tree: Path) -> None:
    err = error_of(run(make_toolbox(tree), "local a = 1\nlocal v = json.decode('[1,')\nreturn v"))
    assert err["kind"] == "runtime" and err["line"] == 2 and "json.decode" in err["message"]


def test_text_and_time_modules(tree: Path) -> None:
    script = """
    local t0 = time.monotonic()
    time.sleep(0.05)
    return text.split('a,b,,c', ','), text.trim('  x y \\n'), text.lines('l1\\r\\nl2\\n'),
      text.replace('a.b.c', '.', '-'), text.startswith('hello', 'he'), text.endswith('hello', 'lo'),
      text.contains('a+b', '+'), time.monotonic() - t0 >= 0.05, time.iso8601(0), require('text') == text
    """
    assert values_of(run(make_toolbox(tree), script)) == [
        ["a", "b", "", "c"],
        "x y",
        ["l1", "l2"],
        "a-b-c",
        True,
        True,
        True,
        True,
        "1970-01-01T00:00:00Z",
        True,
    ]


def test_states_do_not_leak_between_calls(tree: Path) -> None:
    tb = make_toolbox(tree)
    assert values_of(run(tb, "leaked = 42\nstring.upper = nil\nreturn true")) == [True]
    assert values_of(run(tb, "return leaked, string.upper('a')")) == [None, "A"]


def test_concurrent_calls_run_side_by_side(tree: Path) -> None:
    tb = make_toolbox(tree)
    results: list[ToolResult] = []
    threads = [
        threading.Thread(
            target=lambda i=i: results.append(run(tb, f"local s = 0\nfor k = 1, 1e5 do s = s + k end\nreturn s + {i}"))
        )
        for i in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(values_of(r)[0] for r in results) == [5000050000 + i for i in range(4)]


# --- configuration


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ({"MaxMemoryMB": -1}, "MaxMemoryMB"),
        ({"MaxExecutionTimeSeconds": "soon"}, "MaxExecutionTimeSeconds"),
        ({"AllowedTools": "all"}, "AllowedTools"),
        ({"FileSandbox": {"fsbPredicate": {"tag": "Nope"}}}, "FileSandbox"),
        ({"Name": ""}, "Name"),
    ],
)
def test_bad_config_is_refused_with_the_key(tree: Path, override: dict[str, Any], key: str) -> None:
    with pytest.raises(LuaConfigError, match=key):
        make_toolbox(tree, **override)


def test_without_a_file_sandbox_every_path_is_refused(tree: Path) -> None:
    tb = make_toolbox(tree, FileSandbox=None)
    err = error_of(run(tb, "local s = fs.read('./README.md')\nreturn s"))
    assert err["kind"] == "sandbox"


def test_error_kinds_are_the_seeds() -> None:
    assert KINDS == ("runtime", "timeout", "memory", "sandbox", "tool_invocation", "initialization")
    assert os.path.exists(os.path.join(os.path.dirname(__file__), "test_lua.py"))
