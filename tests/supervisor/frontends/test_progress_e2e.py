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

import anyio
import pytest
import trio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests._policies import agent, local_model, mcp_script_server, system_toolbox, write_policy
from tests.supervisor._model_server import Reply, answer, call, model_server

pytestmark = pytest.mark.root

REPO = str(Path(__file__).resolve().parents[3])

PROGRESS_SERVER = textwrap.dedent("""
    from mcp.server.mcpserver import Context, MCPServer

    server = MCPServer("render")

    @server.tool(description="renders in steps, reporting progress")
    async def render(frames: int, ctx: Context) -> str:
        for i in range(1, frames + 1):
            await ctx.report_progress(i, frames, f"frame {i} of {frames}")
        return f"rendered {frames} frames"

    server.run("stdio")
""")


def _policy(root: Path, url: str) -> Path:
    script = root / "render_server.py"
    script.write_text(PROGRESS_SERVER)
    script.chmod(0o644)
    mcp = mcp_script_server("render", script)
    helper = agent("helper", modelUrl=url, builtinToolboxes=[system_toolbox("helper_sys", ["hostname"])])
    (root / "helper.json").write_text(json.dumps(helper))
    main = agent("main", modelUrl=url, mcpServers=[mcp], extraAgents=[{"slug": "helper", "path": "helper.json"}])
    return write_policy(
        root,
        {"main": main},
        model_keys={"test": "AGENTS_TEST_KEY"},
        agent_loop=local_model({"max_steps": 5, "retries": 0, "request_timeout_s": 10}),
    )


def _script(req: dict[str, Any]) -> Reply:
    if req["messages"][-1]["role"] == "user":
        return call("system_helper_sys_hostname", {})
    return answer("the host has a name")


async def test_progress_of_mcp_servers_and_sub_agents_reaches_the_sdk_client(sandbox_tmp: Path) -> None:
    with model_server(_script) as server:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "supervisor", "--policy", str(_policy(sandbox_tmp, server.url))],
            env={**os.environ, "PYTHONPATH": REPO, "AGENTS_TEST_KEY": "sk-test"},
            cwd=REPO,
        )
        rendered: list[tuple[float, float | None, str | None]] = []
        steps: list[tuple[float, float | None, str | None]] = []

        # The SDK runs a progress callback on a task of its own and forgets a call's callback when its response
        # arrives, so the updates just before a response may never reach the callback: the wire (``seen``) is the
        # authority on what was sent; each callback must get at least the first update of its call.
        all_in = {id(rendered): (1, trio.Event()), id(steps): (1, trio.Event())}

        def into(log: list[tuple[float, float | None, str | None]]) -> Any:
            async def callback(progress: float, total: float | None, message: str | None) -> None:
                log.append((progress, total, message))
                expected, event = all_in[id(log)]
                if len(log) >= expected:
                    event.set()

            return callback

        seen: list[dict[str, Any]] = []  # every message from the server, in the order it came

        async def tap(source: Any, sink: Any) -> None:
            async with sink:
                async for item in source:
                    if not isinstance(item, Exception):
                        seen.append(item.message.model_dump(by_alias=True, exclude_none=True))
                    await sink.send(item)

        with trio.fail_after(120):
            async with stdio_client(params) as (read, write), trio.open_nursery() as nursery:
                tapped_send, tapped = anyio.create_memory_object_stream[Any](64)
                nursery.start_soon(tap, read, tapped_send)
                async with ClientSession(tapped, write) as session:
                    await session.initialize()
                    result = await session.call_tool(
                        "mcp_render_render", {"frames": 3}, progress_callback=into(rendered)
                    )
                    assert not result.is_error and result.content[0].text == "rendered 3 frames"
                    agent_result = await session.call_tool(
                        "io_prompt_agent_helper", {"what": "name the host"}, progress_callback=into(steps)
                    )
                    assert not agent_result.is_error and agent_result.content[0].text == "the host has a name"
                    # Without a token the same tool runs as before (the server's report_progress has no token).
                    quiet = await session.call_tool("mcp_render_render", {"frames": 2})
                    assert not quiet.is_error and quiet.content[0].text == "rendered 2 frames"
                    # Wait for the callbacks' tasks (bounded above).
                    for _, event in all_in.values():
                        await event.wait()
                nursery.cancel_scope.cancel()
    # On the wire, every notification of a call came before its response, and the call without a token got none.
    order = [
        ("progress", m["params"]["progressToken"])
        if m.get("method") == "notifications/progress"
        else ("response", m["id"])
        for m in seen
        if "content" in (m.get("result") or {}) or m.get("method") == "notifications/progress"
    ]
    calls = [key for kind, key in order if kind == "response"]  # the three tools/call responses
    tokens = [key for kind, key in order if kind == "progress"]
    assert len(calls) == 3 and len(tokens) == 5 and len(set(tokens)) == 2
    for call_id, token in zip(calls[:2], dict.fromkeys(tokens), strict=True):
        last_note = max(i for i, item in enumerate(order) if item == ("progress", token))
        assert last_note < order.index(("response", call_id))
    wire = {}
    for m in seen:
        if m.get("method") == "notifications/progress":
            p = m["params"]
            wire.setdefault(p["progressToken"], []).append((p["progress"], p.get("total"), p.get("message")))
    render_wire, steps_wire = wire.values()
    assert render_wire == [(1.0, 3.0, "frame 1 of 3"), (2.0, 3.0, "frame 2 of 3"), (3.0, 3.0, "frame 3 of 3")]
    assert steps_wire == [
        (1.0, 5.0, "agent helper: step 1: calls system_helper_sys_hostname"),
        (2.0, 5.0, "agent helper: step 2: answered"),
    ]
    assert rendered and rendered == render_wire[: len(rendered)]
    assert steps and steps == steps_wire[: len(steps)]
