"""The MCP toolbox through the supervisor: real confined workers running real MCP server processes.

Two servers: one written with the official SDK's ``MCPServer`` (what users run), and a hand-written JSON-RPC one for
what the SDK would never do (pagination, requests from the server, garbage on stdout, a silent handshake).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import trio

from supervisor._supervisor import Supervisor
from tests._policies import agent, mcp_script_server, system_toolbox, write_policy
from toolboxes._names import tool_name
from toolboxes.mcp._content import AttachmentSink, to_result
from toolboxes.mcp._jsonrpc import Garbage, LineSplitter, Notification, Request, Response, parse_line
from toolboxes.mcp._toolbox import CRASH_LOOP_MAX

if TYPE_CHECKING:
    from toolboxes import ToolResult

PNG_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="

SDK_SERVER = textwrap.dedent(f'''
    import base64, os
    import anyio
    from pydantic import BaseModel
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.server.mcpserver.utilities.types import Image

    server = MCPServer("demo")
    cancelled = anyio.Event()

    class Point(BaseModel):
        x: int
        y: int

    @server.tool(description="echo text")
    def echo(text: str, times: int = 1) -> str:
        return text * times

    @server.tool(description="a point")
    def point(x: int, y: int) -> Point:
        return Point(x=x, y=y)

    @server.tool(description="an image")
    def picture() -> Image:
        return Image(data=base64.b64decode("{PNG_B64}"), format="png")

    @server.tool(description="always fails")
    def boom(message: str) -> str:
        raise ToolError(message)

    @server.tool(description="sleeps")
    async def slow(seconds: float) -> str:
        try:
            await anyio.sleep(seconds)
        except anyio.get_cancelled_exc_class():
            cancelled.set()
            raise
        return "done"

    @server.tool(description="whether a slow call was cancelled")
    async def was_cancelled() -> str:
        with anyio.move_on_after(10):
            await cancelled.wait()
        return "yes" if cancelled.is_set() else "no"

    @server.tool(description="read a file")
    def read(path: str) -> str:
        try:
            with open(path) as f:
                return f.read()
        except OSError as exc:
            return f"refused: {{exc.strerror}}"

    class Facts(BaseModel):
        pid: int
        uid: int
        no_new_privs: str

    @server.tool(description="facts about the server process")
    def facts() -> Facts:
        status = open("/proc/self/status").read()
        nnp = [line.split()[1] for line in status.splitlines() if line.startswith("NoNewPrivs")]
        return Facts(pid=os.getpid(), uid=os.getuid(), no_new_privs=nnp[0] if nnp else "?")

    @server.tool(description="exits at once")
    def crash() -> str:
        os._exit(3)

    @server.tool(description="adds a tool")
    async def grow(ctx: Context) -> str:
        def extra(n: int) -> str:
            return f"extra {{n}}"
        server.add_tool(extra, name="extra", description="added later")
        await ctx.session.send_tool_list_changed()
        return "grown"

    server.run("stdio")
''')

#: A JSON-RPC server by hand: ``python raw.py MODE``. ``silent`` never answers initialize; otherwise two pages of
#: tools; ``probe`` sends the client a ping, a sampling and a roots request and returns the answers; ``garbage``
#: writes non-JSON-RPC lines and never answers; ``malformed`` answers with a result that is not an object;
#: ``crash`` exits with status 4.
RAW_SERVER = textwrap.dedent("""
    import json, sys
    mode = sys.argv[1]
    def send(m):
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", **m}) + "\\n"); sys.stdout.flush()
    def recv():
        line = sys.stdin.readline()
        if not line:
            sys.exit(0)
        return json.loads(line)
    tool = lambda name: {"name": name, "description": name,
                         "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}}}
    while True:
        msg = recv()
        method, mid = msg.get("method"), msg.get("id")
        if method == "initialize":
            if mode == "silent":
                continue
            send({"id": mid, "result": {"protocolVersion": msg["params"]["protocolVersion"],
                                        "capabilities": {"tools": {"listChanged": True}},
                                        "serverInfo": {"name": "raw", "version": "1"}}})
        elif method == "tools/list":
            if msg.get("params", {}).get("cursor") == "page2":
                page = [tool(n) for n in ("probe", "garbage", "malformed", "crash")]
                send({"id": mid, "result": {"tools": page}})
            else:
                send({"id": mid, "result": {"tools": [tool("first")], "nextCursor": "page2"}})
        elif method == "tools/call":
            name = msg["params"]["name"]
            if name == "probe":
                send({"id": "s1", "method": "ping"})
                send({"id": "s2", "method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5}})
                send({"id": "s3", "method": "roots/list"})
                answers = {}
                while len(answers) < 3:
                    reply = recv()
                    if "method" not in reply:
                        answers[reply["id"]] = reply
                send({"id": mid, "result": {"content": [{"type": "text", "text": json.dumps(answers)}]}})
            elif name == "crash":
                sys.stderr.write("crashing on purpose\\n"); sys.stderr.flush()
                sys.exit(4)
            elif name == "malformed":
                send({"id": mid, "result": 5})
            elif name == "garbage":
                sys.stdout.write("this is not json\\n[1, 2]\\n" + json.dumps({"id": 999, "result": {}}) + "\\n")
                sys.stdout.flush()
            else:
                send({"id": mid, "result": {"content": [{"type": "text", "text": "first " + str(msg["params"])}]}})
""")


def reads(path: Path, tag: str = "FileExactly") -> dict[str, Any]:
    """A FileSandbox granting ``path`` read-only to an MCP server: an argument naming a path grants nothing."""
    return {"fsbPredicate": {"tag": tag, "contents": str(path)}}


mcp_server = mcp_script_server


def write_server(root: Path, name: str, text: str) -> Path:
    path = root / name
    path.write_text(text)
    path.chmod(0o644)
    return path


def sdk_policy(root: Path, **policy: Any) -> Path:
    script = write_server(root, "server.py", SDK_SERVER)
    return write_policy(root, {"tester": agent(mcpServers=[mcp_server("demo", script)])}, **policy)


def text(result: ToolResult) -> str:
    return result.data or ""


# -- through the supervisor, the SDK server -------------------------------------------------------------------------


@pytest.mark.root
async def test_tools_are_listed_with_their_names_and_schemas_and_results_map(sandbox_tmp: Path) -> None:
    async with Supervisor.open(sdk_policy(sandbox_tmp)) as sup:
        assert sup.load_errors() == []
        tools = {t.name: t for t in sup.list_tools()}
        assert {"mcp_demo_echo", "mcp_demo_point", "mcp_demo_picture", "mcp_demo_boom"} <= set(tools)
        echo = tools["mcp_demo_echo"]
        assert echo.description == "echo text"
        # The server's schema as it sent it: titles, defaults, no descriptions demanded.
        assert echo.input_schema["properties"] == {
            "text": {"title": "Text", "type": "string"},
            "times": {"default": 1, "title": "Times", "type": "integer"},
        }
        assert echo.input_schema["required"] == ["text"]

        said = await sup.call("mcp_demo_echo", {"text": "ab", "times": 2})
        assert (said.status, said.data) == ("passed", "abab")
        point = await sup.call("mcp_demo_point", {"x": 1, "y": 2})
        assert point.status == "passed"
        assert point.structured == {"x": 1, "y": 2}
        picture = await sup.call("mcp_demo_picture", {})
        assert picture.status == "passed", picture.data
        [image] = picture.attachments
        assert image.media_type == "image/png" and image.sha256 and image.size
        failed = await sup.call("mcp_demo_boom", {"message": "the disk is on fire"})
        assert failed.status == "failed"
        assert "the disk is on fire" in text(failed)
        invalid = await sup.call("mcp_demo_echo", {"times": 2})
        assert invalid.status == "error" and "text" in text(invalid)


@pytest.mark.root
async def test_the_server_runs_confined_and_cannot_read_outside_its_grants(sandbox_tmp: Path) -> None:
    secret = sandbox_tmp / "secret.txt"
    secret.write_text("top secret")
    secret.chmod(0o644)  # world-readable: only Landlock stands in the way
    async with Supervisor.open(sdk_policy(sandbox_tmp)) as sup:
        facts = await sup.call("mcp_demo_facts", {})
        assert facts.status == "passed", facts.data
        assert facts.structured["uid"] == 65534
        assert facts.structured["no_new_privs"] == "1"
        peek = await sup.call("mcp_demo_read", {"path": str(secret)})
        assert peek.status == "passed"
        assert "top secret" not in text(peek)
        assert text(peek) == "refused: No such file or directory"  # the private view holds only its grants
        own = await sup.call("mcp_demo_read", {"path": str(sandbox_tmp / "server.py")})
        assert "MCPServer" in text(own)  # its own script is granted (an absolute path argument)


@pytest.mark.root
async def test_a_timeout_cancels_that_call_only(sandbox_tmp: Path) -> None:
    path = sdk_policy(sandbox_tmp, toolboxes={"demo": {"limits": {"wall_time_s": 2}}})
    async with Supervisor.open(path) as sup:
        before = await sup.call("mcp_demo_facts", {})
        slow = await sup.call("mcp_demo_slow", {"seconds": 60})
        assert slow.status == "error"
        assert "limit" in text(slow)
        cancelled = await sup.call("mcp_demo_was_cancelled", {})
        assert (cancelled.status, cancelled.data) == ("passed", "yes")  # notifications/cancelled reached it
        after = await sup.call("mcp_demo_facts", {})
        assert after.structured["pid"] == before.structured["pid"]  # the same server process serves on


@pytest.mark.root
async def test_a_crashing_server_ends_its_call_with_the_cause_then_recovers(sandbox_tmp: Path) -> None:
    async with Supervisor.open(sdk_policy(sandbox_tmp)) as sup:
        before = await sup.call("mcp_demo_facts", {})
        crash = await sup.call("mcp_demo_crash", {})
        assert crash.status == "error"
        assert "MCP server 'demo' exited with status 3" in text(crash)
        again = await sup.call("mcp_demo_echo", {"text": "back"})
        assert (again.status, again.data) == ("passed", "back")
        after = await sup.call("mcp_demo_facts", {})
        assert after.structured["pid"] != before.structured["pid"]
        assert sup.load_errors() == []


@pytest.mark.root
async def test_list_changed_reaches_the_supervisor(sandbox_tmp: Path) -> None:
    async with Supervisor.open(sdk_policy(sandbox_tmp)) as sup:
        assert "mcp_demo_extra" not in [t.name for t in sup.list_tools()]
        grown = await sup.call("mcp_demo_grow", {})
        assert grown.status == "passed", grown.data
        with trio.fail_after(10):
            while "mcp_demo_extra" not in [t.name for t in sup.list_tools()]:
                await sup.wait_tools_changed()
        extra = await sup.call("mcp_demo_extra", {"n": 7})
        assert (extra.status, extra.data) == ("passed", "extra 7")


# -- through the supervisor, the hand-written server ----------------------------------------------------------------
def raw_policy(root: Path, mode: str, **policy: Any) -> Path:
    script = write_server(root, "raw.py", RAW_SERVER)
    return write_policy(
        root,
        {"tester": agent(mcpServers=[mcp_server("raw", script, mode)], builtinToolboxes=[system_toolbox()])},
        **policy,
    )


@pytest.mark.root
async def test_pagination_and_requests_from_the_server(sandbox_tmp: Path) -> None:
    async with Supervisor.open(raw_policy(sandbox_tmp, "normal")) as sup:
        names = [t.name for t in sup.list_tools() if t.toolbox == "raw"]
        assert names == [
            "mcp_raw_first",
            "mcp_raw_probe",
            "mcp_raw_garbage",
            "mcp_raw_malformed",
            "mcp_raw_crash",
        ]  # both pages, in order
        first = await sup.call("mcp_raw_first", {"n": 1})
        assert first.data == "first {'name': 'first', 'arguments': {'n': 1}}"
        probe = await sup.call("mcp_raw_probe", {})
        assert probe.status == "passed", probe.data
        answers = json.loads(text(probe))
        assert answers["s1"]["result"] == {}
        for req in ("s2", "s3"):
            assert answers[req]["error"]["code"] == -32601
            assert "not supported" in answers[req]["error"]["message"]


@pytest.mark.root
async def test_garbage_on_stdout_ends_the_call_and_the_worker_survives(sandbox_tmp: Path) -> None:
    path = raw_policy(sandbox_tmp, "normal", toolboxes={"raw": {"limits": {"wall_time_s": 2}}})
    async with Supervisor.open(path) as sup:
        worker = sup.runner("raw").worker
        bad = await sup.call("mcp_raw_garbage", {})
        assert bad.status == "error"
        assert "limit" in text(bad)
        malformed = await sup.call("mcp_raw_malformed", {})
        assert malformed.status == "error"
        assert "answered tools/call with a result that is not an object" in text(malformed)
        fine = await sup.call("mcp_raw_first", {"n": 2})
        assert fine.status == "passed"
        assert sup.runner("raw").worker is worker


@pytest.mark.root
async def test_a_server_that_never_answers_initialize_is_a_load_error(sandbox_tmp: Path) -> None:
    path = raw_policy(sandbox_tmp, "silent", toolboxes={"raw": {"limits": {"wall_time_s": 1}}})
    with trio.fail_after(20):  # the handshake limit is 5 s here (wall_time_s, at least 5 s)
        async with Supervisor.open(path) as sup:
            errors = [e for e in sup.load_errors() if e["toolbox"] == "raw"]
            assert len(errors) == 1
            assert "gave no answer to initialize in time" in errors[0]["message"]
            assert [t.name for t in sup.list_tools() if t.toolbox == "raw"] == []
            date = await sup.call("system_system_date", {})
            assert date.status == "passed"


@pytest.mark.root
async def test_a_server_in_a_crash_loop_is_not_restarted_for_a_while(sandbox_tmp: Path) -> None:
    async with Supervisor.open(raw_policy(sandbox_tmp, "normal")) as sup:
        for _ in range(CRASH_LOOP_MAX + 1):
            crashed = await sup.call("mcp_raw_crash", {})
            assert crashed.status == "error"
            assert "exited with status 4; its stderr: crashing on purpose" in text(crashed)
        refused = await sup.call("mcp_raw_first", {"n": 1})
        assert refused.status == "error"
        assert f"died {CRASH_LOOP_MAX + 1} times within 60 s" in text(refused)
        assert "it is not started again for" in text(refused)
        assert (await sup.call("system_system_date", {})).status == "passed"


# -- pure parts ---------------------------------------------------------------------------------------------------
def test_lines_are_classified() -> None:
    assert parse_line(b'{"jsonrpc":"2.0","id":3,"result":{"a":1}}') == Response(3, result={"a": 1})
    err = parse_line(b'{"jsonrpc":"2.0","id":4,"error":{"code":-1,"message":"no"}}')
    assert isinstance(err, Response) and err.error == {"code": -1, "message": "no"}
    assert parse_line(b'{"jsonrpc":"2.0","id":"x","method":"ping"}') == Request("x", "ping", {})
    assert parse_line(b'{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}') == Notification(
        "notifications/tools/list_changed", {}
    )
    for bad, reason in (
        (b"hello", "not JSON"),
        (b"[1]", "not a JSON-RPC object"),
        (b'{"id":1}', "jsonrpc"),
        (b'{"jsonrpc":"2.0","id":"s","result":{}}', "not one of ours"),
    ):
        got = parse_line(bad)
        assert isinstance(got, Garbage) and reason in got.reason, (bad, got)
    # Our id but a bad shape: the request it answers fails at once, saying why.
    for bad, reason in (
        (b'{"jsonrpc":"2.0","id":1,"result":5}', "not an object"),
        (b'{"jsonrpc":"2.0","id":1,"error":"x"}', "code and message"),
    ):
        got = parse_line(bad)
        assert isinstance(got, Response) and got.id == 1 and reason in (got.malformed or ""), (bad, got)


def test_long_lines_are_dropped_whole_and_splitting_survives_any_chunking() -> None:
    splitter = LineSplitter(max_bytes=10)
    out = list(splitter.feed(b"short\n0123456789ABC")) + list(splitter.feed(b"DEF\nok\n\n"))
    assert out[0] == b"short" and isinstance(out[1], Garbage) and out[2] == b"ok" and len(out) == 3
    splitter = LineSplitter()
    stream = b'{"a":1}\n{"b":2}\n'
    assert [x for b in stream for x in splitter.feed(bytes([b]))] == [b'{"a":1}', b'{"b":2}']


def test_content_maps_to_a_result(tmp_path: Path) -> None:
    """Every kind of content is passed on: images, audio and embedded resources as attachments of their type (a
    resource keeps its uri), resource links as links; what cannot be used becomes a note."""
    sink = AttachmentSink(str(tmp_path))
    result = to_result(
        {
            "content": [
                {"type": "text", "text": "hello"},
                {"type": "image", "mimeType": "image/png", "data": PNG_B64},
                {"type": "image", "mimeType": "image/svg+xml", "data": "PHN2Zz4="},
                {"type": "resource_link", "uri": "file:///a.txt", "name": "a.txt", "mimeType": "text/plain"},
                {"type": "resource", "resource": {"uri": "mem://x", "text": "inside"}},
                {
                    "type": "resource",
                    "resource": {"uri": "mem://doc.pdf", "mimeType": "application/pdf", "blob": "JVBERi0xLjQ="},
                },
                {"type": "audio", "mimeType": "audio/wav", "data": "UklGRgAAAABXQVZF"},
                {"type": "audio", "mimeType": "audio/wav", "data": "not base64!"},
                {"type": "image", "data": PNG_B64},
            ],
            "isError": True,
        },
        tool="t",
        stem="t-1",
        sink=sink,
        output_cap=1 << 20,
    )
    assert result.status == "failed"
    lines = text(result).splitlines()
    assert lines[0] == "hello"
    assert lines[1:8] == [
        "[image/png attached]",
        "[image/svg+xml attached]",
        "[resource link a.txt: file:///a.txt]",
        "[text/plain attached: mem://x]",
        "[application/pdf attached: mem://doc.pdf]",
        "[audio/wav attached]",
        "[audio not attached: its data is not valid base64]",
    ]
    assert lines[8] == "[image not attached: it has no usable mimeType]"
    kinds = [(a.media_type, a.uri, (tmp_path / a.path).read_bytes()[:4]) for a in result.attachments]
    assert kinds == [
        ("image/png", None, b"\x89PNG"),
        ("image/svg+xml", None, b"<svg"),
        ("text/plain", "mem://x", b"insi"),
        ("application/pdf", "mem://doc.pdf", b"%PDF"),
        ("audio/wav", None, b"RIFF"),
    ]
    [link] = result.links
    assert (link.uri, link.name, link.mime_type) == ("file:///a.txt", "a.txt", "text/plain")
    only_structured = to_result(
        {"content": [], "structuredContent": {"k": [1]}}, tool="t", stem="s", sink=sink, output_cap=1 << 20
    )
    assert (only_structured.status, only_structured.data, only_structured.structured) == (
        "passed",
        '{"k": [1]}',
        {"k": [1]},
    )
    cut = to_result({"content": [{"type": "text", "text": "x" * 100}]}, tool="t", stem="s", sink=sink, output_cap=10)
    assert cut.truncated and cut.data == "x" * 10


def test_tool_names_follow_the_spec() -> None:
    assert tool_name("mcp", "files", "read.file") == "mcp_files_read_file"


# -- a real server from npm ------------------------------------------------------------------------------------------
FILESYSTEM_SERVER = "/usr/bin/mcp-server-filesystem"
EVERYTHING_SERVER = "/usr/bin/mcp-server-everything"
STRICT = Path(__file__).resolve().parents[2] / "policies" / "strict.yaml"


@pytest.mark.root
async def test_the_npm_everything_server_runs_under_the_shipped_strict_policy(sandbox_tmp: Path) -> None:
    # Issue 13 item 11: V8 reserves address space it never uses ("Failed to reserve virtual memory for CodeRange"
    # under the old 512 MiB RLIMIT_AS); with the cgroup bounding memory the shipped policy runs it unchanged.
    if not Path(EVERYTHING_SERVER).exists():
        pytest.skip(f"{EVERYTHING_SERVER} is missing: scripts/setup installs it (npm) when node is present")
    import yaml

    strict = yaml.safe_load(STRICT.read_text())
    settings = {k: v for k, v in strict.items() if k not in ("agents", "state_dir")}
    server = {
        "tag": "McpSimpleBinary",
        "contents": {"name": "everything", "executable": EVERYTHING_SERVER, "args": ["stdio"]},
    }
    path = write_policy(sandbox_tmp, {"tester": agent(mcpServers=[server])}, **settings)
    async with Supervisor.open(path) as sup:
        assert sup.load_errors() == []
        spec = sup.runner("everything").spec
        assert spec.cgroup is not None and spec.cgroup.memory_bytes == 2**30  # strict.yaml's memory_bytes
        assert spec.plan.rlimits.address_space_bytes is None
        names = {t.name for t in sup.list_tools()}
        assert "mcp_everything_echo" in names, names
        echoed = await sup.call("mcp_everything_echo", {"message": "hello from node"})
        assert echoed.status == "passed" and "hello from node" in text(echoed), echoed.data


@pytest.mark.root
async def test_the_npm_filesystem_server_serves_only_what_it_is_granted(sandbox_tmp: Path) -> None:
    if not Path(FILESYSTEM_SERVER).exists():
        pytest.skip(f"{FILESYSTEM_SERVER} is missing: scripts/setup installs it (npm) when node is present")
    project = sandbox_tmp / "project"
    project.mkdir()
    project.chmod(0o755)
    (project / "notes.txt").write_text("remember the milk")
    (project / "notes.txt").chmod(0o644)
    secret = sandbox_tmp / "secret.txt"
    secret.write_text("top secret")
    secret.chmod(0o644)
    server = {
        "tag": "McpSimpleBinary",
        "contents": {
            "name": "files",
            "executable": FILESYSTEM_SERVER,
            "args": [str(project)],
            "FileSandbox": reads(project, "DirectoryRecursive"),
        },
    }
    # The default limits, unchanged: the worker's cgroup bounds its memory, so Node gets no RLIMIT_AS to trip on.
    path = write_policy(sandbox_tmp, {"tester": agent(mcpServers=[server])})
    async with Supervisor.open(path) as sup:
        assert sup.load_errors() == []
        names = {t.name for t in sup.list_tools()}
        assert {"mcp_files_read_text_file", "mcp_files_write_file", "mcp_files_list_directory"} <= names
        read = await sup.call("mcp_files_read_text_file", {"path": str(project / "notes.txt")})
        assert (read.status, read.data) == ("passed", "remember the milk"), read.data
        listed = await sup.call("mcp_files_list_directory", {"path": str(project)})
        assert "notes.txt" in text(listed)
        outside = await sup.call("mcp_files_read_text_file", {"path": str(secret)})
        assert outside.status == "failed" and "top secret" not in text(outside)
        # The server would write inside its allowed directory; the kernel grants it read-only.
        wrote = await sup.call("mcp_files_write_file", {"path": str(project / "new.txt"), "content": "x"})
        assert wrote.status == "failed", wrote.data
        assert "EROFS: read-only file system" in text(wrote)  # a read-only grant is a read-only mount
        assert not (project / "new.txt").exists()  # Landlock, not the server, said no
