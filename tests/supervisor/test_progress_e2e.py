"""Issue 13 item 7: live sub-call events. A client that sends a ``progressToken`` with ``tools/call`` gets
``notifications/progress`` for an MCP toolbox server's progress and for a sub-agent's steps; asserted with the
official MCP SDK client's progress callback, over stdio against ``python -m supervisor``.

The MCP toolbox server is a small Python server made with the SDK, run inside a real confined MCP toolbox; the
sub-agent's model is the project's real OpenAI-compatible test server on loopback.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests._policies import agent, system_toolbox, write_policy
from tests.supervisor._model_server import Reply, answer, call, model_server

pytestmark = pytest.mark.root

REPO = str(Path(__file__).resolve().parents[2])

PROGRESS_SERVER = textwrap.dedent('''
    from mcp.server.mcpserver import Context, MCPServer

    server = MCPServer("render")

    @server.tool(description="renders in steps, reporting progress")
    async def render(frames: int, ctx: Context) -> str:
        for i in range(1, frames + 1):
            await ctx.report_progress(i, frames, f"frame {i} of {frames}")
        return f"rendered {frames} frames"

    server.run("stdio")
''')


def _policy(root: Path, url: str) -> Path:
    script = root / "render_server.py"
    script.write_text(PROGRESS_SERVER)
    script.chmod(0o644)
    mcp = {"tag": "McpSimpleBinary", "contents": {"name": "render", "executable": sys.executable,
                                                  "args": [str(script)]}}
    helper = agent("helper", modelUrl=url, builtinToolboxes=[system_toolbox("helper_sys", ["hostname"])])
    (root / "helper.json").write_text(json.dumps(helper))
    main = agent("main", modelUrl=url, mcpServers=[mcp], extraAgents=[{"slug": "helper", "path": "helper.json"}])
    return write_policy(root, {"main": main}, model_keys={"test": "AGENTS_TEST_KEY"},
                        agent_loop={"max_steps": 5, "retries": 0, "request_timeout_s": 10})


def _script(req: dict[str, Any]) -> Reply:
    if req["messages"][-1]["role"] == "user":
        return call("system_helper_sys_hostname", {})
    return answer("the host has a name")


async def test_progress_of_mcp_servers_and_sub_agents_reaches_the_sdk_client(sandbox_tmp: Path) -> None:
    with model_server(_script) as server:
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "supervisor", "--policy", str(_policy(sandbox_tmp, server.url))],
            env={**os.environ, "PYTHONPATH": REPO, "AGENTS_TEST_KEY": "sk-test"}, cwd=REPO)
        rendered: list[tuple[float, float | None, str | None]] = []
        steps: list[tuple[float, float | None, str | None]] = []

        def into(log: list[tuple[float, float | None, str | None]]) -> Any:
            async def callback(progress: float, total: float | None, message: str | None) -> None:
                log.append((progress, total, message))
            return callback

        with trio.fail_after(120):
            async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                result = await session.call_tool("mcp_render_render", {"frames": 3}, progress_callback=into(rendered))
                assert not result.is_error and result.content[0].text == "rendered 3 frames"
                done = len(rendered)  # every notification came before the response
                agent_result = await session.call_tool("io_prompt_agent_helper", {"what": "name the host"},
                                                       progress_callback=into(steps))
                assert not agent_result.is_error and agent_result.content[0].text == "the host has a name"
                # Without a token the same tool runs as before (the server's report_progress has no token).
                quiet = await session.call_tool("mcp_render_render", {"frames": 2})
                assert not quiet.is_error and quiet.content[0].text == "rendered 2 frames"
    assert done == 3
    assert rendered == [(1.0, 3.0, "frame 1 of 3"), (2.0, 3.0, "frame 2 of 3"), (3.0, 3.0, "frame 3 of 3")]
    assert steps == [(1.0, 5.0, "agent helper: step 1: calls system_helper_sys_hostname"),
                     (2.0, 5.0, "agent helper: step 2: answered")]
