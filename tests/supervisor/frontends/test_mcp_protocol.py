"""MCP protocol completeness for real: tool annotations and output schemas as the official SDK client sees them, on
stdio and over Streamable HTTP, from real confined workers (a System toolbox, and an MCP toolbox running the SDK's
own ``MCPServer`` and a hand-written server that lies about its output schema and sends malformed annotations)."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp import Client, ClientSession, MCPError, StdioServerParameters
from mcp import types as mcp_types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from labkit import make_skill, skill_md
from supervisor.frontends._http_auth import hash_token
from tests._policies import agent, system_toolbox, write_policy
from tests.supervisor.frontends.test_mcp_http import _start
from tests.toolboxes.test_mcp import mcp_server, write_server

pytestmark = pytest.mark.root

REPO = str(Path(__file__).resolve().parents[3])
TOKEN = "protocol-test-token"

#: The SDK's MCPServer with a read-only annotated tool and a tool with an output schema (a pydantic return type).
SDK_SERVER = textwrap.dedent("""
    from pydantic import BaseModel
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.resources import TextResource
    from mcp.types import ToolAnnotations

    server = MCPServer("docs")

    class Point(BaseModel):
        x: int
        y: int

    @server.tool(description="a point", annotations=ToolAnnotations(readOnlyHint=True, idempotentHint=True,
                                                                    title="Make a point"))
    def point(x: int, y: int) -> Point:
        return Point(x=x, y=y)

    @server.resource("note://welcome", description="the welcome note", mime_type="text/plain")
    def welcome() -> str:
        return "hello from the docs server"

    @server.resource("note://{id}", description="a note by id")
    def note(id: str) -> str:
        return f"note {id}"

    @server.prompt(description="review some code")
    def review(code: str) -> str:
        return f"Please review: {code}"

    @server.tool(description="adds a note resource and says so")
    async def add_note(ctx: Context) -> str:
        server.add_resource(TextResource(uri="note://added", name="added", text="added later"))
        await ctx.session.send_resource_list_changed()
        return "added"

    server.run("stdio")
""")

#: A hand-written server: one tool whose annotations are partly malformed and whose result breaks its outputSchema.
LIAR_SERVER = textwrap.dedent("""
    import json, sys
    def send(m):
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", **m}) + "\\n"); sys.stdout.flush()
    tool = {"name": "liar", "description": "lies", "inputSchema": {"type": "object"},
            "annotations": {"readOnlyHint": "yes", "destructiveHint": True, "evil": {"x": 1}, "title": "T" * 500},
            "outputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}
    for line in sys.stdin:
        msg = json.loads(line)
        method, mid = msg.get("method"), msg.get("id")
        if method == "initialize":
            send({"id": mid, "result": {"protocolVersion": msg["params"]["protocolVersion"], "capabilities":
                  {"tools": {}}, "serverInfo": {"name": "liar", "version": "1"}}})
        elif method == "tools/list":
            send({"id": mid, "result": {"tools": [tool]}})
        elif method == "tools/call":
            send({"id": mid, "result": {"content": [{"type": "text", "text": "n is x"}],
                                        "structuredContent": {"n": "x"}}})
        elif mid is not None:
            send({"id": mid, "error": {"code": -32601, "message": "no"}})
""")


def _policy(root: Path) -> Path:
    docs = write_server(root, "docs.py", SDK_SERVER)
    liar = write_server(root, "liar.py", LIAR_SERVER)
    make_skill(
        root / "skills",
        "pdf",
        skill_md("pdf-tools", "reads PDFs"),
        references={"references/forms.md": "# Forms\nFill them in.\n"},
    )
    return write_policy(
        root,
        {
            "alpha": agent(
                "alpha",
                builtinToolboxes=[system_toolbox("system", ["date", "execute-command"])],
                mcpServers=[mcp_server("docs", docs), mcp_server("liar", liar)],
                skillSources=[{"tag": "SkillDirectory", "contents": "./skills"}],
            ),
            "beta": agent("beta", builtinToolboxes=[system_toolbox("sys2", ["date"])]),
        },
        frontends={"http": {"listen": "127.0.0.1:0"}},
        tenants={"acme": {"tokens": [hash_token(TOKEN)], "agents": ["alpha", "beta"]}},
    )


def _annotations(tools: Any) -> dict[str, dict[str, Any]]:
    return {
        t.name: (t.annotations.model_dump(exclude_none=True, by_alias=True) if t.annotations else {}) for t in tools
    }


async def _check_tools(list_tools: Any, call_tool: Any) -> None:
    """What every frontend must show: annotations derived per toolbox, a server's own passed through when they are
    well-formed, its outputSchema, structuredContent that matches it, and a lie about it refused."""
    tools = (await list_tools()).tools
    hints = _annotations(tools)
    # System info capabilities read only; a worker with no network and no portal access is not open-world.
    assert hints["system_system_date"] == {
        "readOnlyHint": True,
        "destructiveHint": False,
        "idempotentHint": True,
        "openWorldHint": False,
    }
    # A shell command may do anything the sandbox allows: MCP's defaults (destructive) are left to hold.
    assert hints["system_system_execute_command"] == {"openWorldHint": False}
    # The server's own annotations, with what the supervisor enforces (no network: not open-world).
    assert hints["mcp_docs_point"] == {
        "readOnlyHint": True,
        "idempotentHint": True,
        "title": "Make a point",
        "openWorldHint": False,
    }
    # Malformed hints (a string for a boolean, an unknown key, a 500-character title) are left out.
    assert hints["mcp_liar_liar"] == {"destructiveHint": True, "openWorldHint": False}
    by_name = {t.name: t for t in tools}
    assert by_name["mcp_docs_point"].output_schema["properties"]["x"]["type"] == "integer"
    assert by_name["system_system_date"].output_schema is None

    point = await call_tool("mcp_docs_point", {"x": 3, "y": 4})
    assert not point.is_error and point.structured_content == {"x": 3, "y": 4}  # the SDK client validated it
    lie = await call_tool("mcp_liar_liar", {})
    assert lie.is_error
    assert "does not match its output schema" in lie.content[0].text and "n" in lie.content[0].text


async def test_annotations_and_output_schemas_on_stdio(sandbox_tmp: Path) -> None:
    import os

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "supervisor", "--policy", str(_policy(sandbox_tmp))],
        env={**os.environ, "PYTHONPATH": REPO},
        cwd=REPO,
    )
    with trio.fail_after(90):
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await _check_tools(session.list_tools, session.call_tool)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_annotations_and_output_schemas_over_http(sandbox_tmp: Path, mode: str) -> None:
    async with _start(_policy(sandbox_tmp)) as server:
        with trio.fail_after(90):
            async with (
                create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"}) as http,
                Client(streamable_http_client(server.url("alpha"), http_client=http), mode=mode) as client,
            ):
                await _check_tools(client.list_tools, client.call_tool)


def test_old_revisions_get_neither(sandbox_tmp: Path) -> None:
    """2024-11-05 has no annotations, outputSchema or structuredContent: a session of it gets none of them."""
    import os
    import subprocess

    lines = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2024-11-05",
                "capabilities": {},
                "clientInfo": {"name": "old", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "mcp_docs_point", "arguments": {"x": 1, "y": 2}},
        },
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "supervisor", "--policy", str(_policy(sandbox_tmp))],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": REPO},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        replies: dict[int, Any] = {}
        for message in lines:
            proc.stdin.write(json.dumps(message).encode() + b"\n")
            proc.stdin.flush()
            if "id" in message:
                while message["id"] not in replies:
                    reply = json.loads(proc.stdout.readline())
                    if "id" in reply:
                        replies[reply["id"]] = reply
        assert replies[1]["result"]["protocolVersion"] == "2024-11-05"
        listed = {t["name"]: t for t in replies[2]["result"]["tools"]}
        assert "annotations" not in listed["mcp_docs_point"] and "outputSchema" not in listed["mcp_docs_point"]
        assert "structuredContent" not in replies[3]["result"]
        assert json.loads(replies[3]["result"]["content"][0]["text"]) == {"x": 1, "y": 2}
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
        proc.stdout.close()


class _Changes:
    """Counts the list_changed notifications of one client session, by kind."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self._event = trio.Event()

    async def handler(self, message: Any) -> None:
        for kind, cls in (
            ("tools", mcp_types.ToolListChangedNotification),
            ("resources", mcp_types.ResourceListChangedNotification),
            ("prompts", mcp_types.PromptListChangedNotification),
        ):
            if isinstance(message, cls):
                self.seen.append(kind)
                self._event.set()
                self._event = trio.Event()

    async def wait_for(self, kind: str) -> None:
        while kind not in self.seen:
            await self._event.wait()


async def _check_resources_and_prompts(client: Any, changes: _Changes, *, bound: bool) -> None:
    """Skills' files and an MCP server's resources, templates and prompts, each under a namespaced name; a read
    and a prompt round trip through the confined worker; the server adding a resource reaches the client."""
    listed = {str(r.uri): r for r in (await client.list_resources()).resources}
    skill_md_uri = "agents-supervise://alpha/skills/pdf-tools/SKILL.md"
    forms_uri = "agents-supervise://alpha/skills/pdf-tools/references/forms.md"
    welcome_uri = "agents-supervise://alpha/docs/note%3A//welcome"
    assert set(listed) == {skill_md_uri, forms_uri, welcome_uri}  # beta's (none) and nobody else's
    assert listed[welcome_uri].description == "the welcome note"
    assert listed[forms_uri].mime_type == "text/markdown"

    read = await client.read_resource(skill_md_uri)
    assert "Use pdf-tools well." in read.contents[0].text and str(read.contents[0].uri) == skill_md_uri
    assert (await client.read_resource(forms_uri)).contents[0].text == "# Forms\nFill them in.\n"
    welcome = await client.read_resource(welcome_uri)
    assert welcome.contents[0].text == "hello from the docs server" and str(welcome.contents[0].uri) == welcome_uri

    templates = (await client.list_resource_templates()).resource_templates
    assert [t.uri_template for t in templates] == ["agents-supervise://alpha/docs/note%3A//{id}"]
    by_template = await client.read_resource("agents-supervise://alpha/docs/note%3A//42")
    assert by_template.contents[0].text == "note 42"

    # Another agent's toolbox: a session bound to alpha (HTTP's endpoint, stdio's first agent) does not see it at
    # all; an unbound one (the Python API) does, but that toolbox lists nothing.
    with pytest.raises(MCPError, match="no toolbox 'sys2' of agent 'beta' here" if bound else "does not list it"):
        await client.read_resource("agents-supervise://beta/sys2/x")
    with pytest.raises(MCPError, match="does not list it"):
        await client.read_resource("agents-supervise://alpha/skills/pdf-tools/scripts/../../etc/passwd")

    prompts = (await client.list_prompts()).prompts
    assert [(p.name, [a.name for a in p.arguments or []]) for p in prompts] == [("mcp_docs_review", ["code"])]
    got = await client.get_prompt("mcp_docs_review", {"code": "x = 1"})
    assert got.messages[0].role == "user" and got.messages[0].content.text == "Please review: x = 1"
    with pytest.raises(MCPError, match="unknown prompt"):
        await client.get_prompt("review", {"code": "x"})

    assert (await client.call_tool("mcp_docs_add_note", {})).content[0].text == "added"
    await changes.wait_for("resources")
    uris = {str(r.uri) for r in (await client.list_resources()).resources}
    assert "agents-supervise://alpha/docs/note%3A//added" in uris


async def test_resources_and_prompts_on_stdio(sandbox_tmp: Path) -> None:
    import os

    changes = _Changes()
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "supervisor", "--policy", str(_policy(sandbox_tmp))],
        env={**os.environ, "PYTHONPATH": REPO},
        cwd=REPO,
    )
    with trio.fail_after(90):
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write, message_handler=changes.handler) as session,
        ):
            init = await session.initialize()
            caps = init.capabilities
            assert caps.resources is not None and caps.resources.list_changed and not caps.resources.subscribe
            assert caps.prompts is not None and caps.prompts.list_changed
            await _check_resources_and_prompts(session, changes, bound=True)  # to the policy's first agent
    # Every read and prompt is traced with its outcome: a read's count of contents, a refusal's reason.
    records = [json.loads(line) for line in (sandbox_tmp / "state" / "trace.jsonl").read_text().splitlines()]
    reads = [r for r in records if r["event"] == "resource_read"]
    assert {"uri": "agents-supervise://alpha/skills/pdf-tools/SKILL.md", "status": "passed", "contents": 1}.items() <= (
        reads[0].items()
    )
    refused = [r for r in reads if r["status"] == "error"]
    assert len(refused) == 2 and "does not list it" in refused[1]["message"]
    prompts = [(r["prompt"], r["status"]) for r in records if r["event"] == "prompt_get"]
    assert prompts == [("mcp_docs_review", "passed"), ("review", "error")]


async def test_resources_and_prompts_over_http_are_the_agents_own(sandbox_tmp: Path) -> None:
    changes = _Changes()
    async with _start(_policy(sandbox_tmp)) as server:
        with trio.fail_after(90):
            async with create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
                async with Client(
                    streamable_http_client(server.url("alpha"), http_client=http),
                    mode="legacy",
                    message_handler=changes.handler,
                ) as client:
                    await _check_resources_and_prompts(client, changes, bound=True)
                async with Client(streamable_http_client(server.url("beta"), http_client=http), mode="legacy") as beta:
                    # beta has only a System toolbox: no resources or prompts are offered, so none are served.
                    assert beta.server_capabilities.resources is None and beta.server_capabilities.prompts is None
                    with pytest.raises(MCPError, match="method not found"):
                        await beta.read_resource("agents-supervise://alpha/skills/pdf-tools/SKILL.md")
