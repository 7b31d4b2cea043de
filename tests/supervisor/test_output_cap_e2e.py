"""``limits.output_bytes`` holds for every kind, as an MCP client sees it (issue 24 item 6): a real WASM component and
a real bash tool each return 64 MiB; the official SDK client over stdio gets the limit (plus the kind's own note
where a kind cuts itself), marked truncated, with words saying what was cut. (The supervisor's own cut, for a worker
that ignores the limit, is attacked in ``tests/supervisor/workers/test_hostile_worker.py``.)"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import mcp.types as mcp_types
import pytest
import trio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from labkit import Spec, build_components, describe_json, write_script
from tests._policies import agent, write_policy
from toolboxes._output_cap import ENVELOPE_BYTES

if TYPE_CHECKING:
    from collections.abc import Sequence

pytestmark = pytest.mark.root

REPO = str(Path(__file__).resolve().parents[2])
CAP = 256 * 1024
HUGE = 64 << 20


async def _call_all(policy: Path, tools: Sequence[str]) -> dict[str, mcp_types.CallToolResult]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "supervisor", "--policy", str(policy)],
        env={**os.environ, "PYTHONPATH": REPO},
        cwd=REPO,
    )
    out = {}
    with trio.fail_after(120):
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            for tool in tools:
                out[tool] = await session.call_tool(tool, {})
    return out


@pytest.mark.slow
async def test_a_64_mib_result_of_any_kind_reaches_the_client_cut_to_the_limit(sandbox_tmp: Path) -> None:
    build_components([Spec("huge", behaviour="huge", size=HUGE)], sandbox_tmp / "components")
    tools = sandbox_tmp / "tools"
    tools.mkdir()
    write_script(tools, "huge", describe_json("huge"), f"head -c {HUGE} /dev/zero | tr '\\0' x")
    wasm = {
        "tag": "WasmToolbox",
        "contents": {
            "Name": "big",
            "Description": "a component that returns 64 MiB",
            "Path": "./components",
            "MaxMemoryMB": 128,
            "MaxExecutionTimeSeconds": 30,
        },
    }
    policy = write_policy(
        sandbox_tmp,
        {
            "tester": agent(
                builtinToolboxes=[wasm],
                bashToolboxes=[{"tag": "FileSystemDirectory", "contents": {"Path": "./tools"}}],
            )
        },
        limits={"output_bytes": CAP},
        trace={"path": str(sandbox_tmp / "t.jsonl")},
    )
    results = await _call_all(policy, ["wasm_big_huge", "bash_huge"])
    texts = {}
    for tool, result in results.items():
        texts[tool] = [c.text for c in result.content if isinstance(c, mcp_types.TextContent)]
        assert not result.is_error, (tool, texts[tool][:1])
        assert texts[tool][-1] == "[output truncated]", tool  # the frontend's word for ``truncated``
        assert texts[tool][0].startswith("x" * 1000), tool
    # the WASM kind has no cut of its own: the common one holds it to the limit, note included
    assert sum(len(t.encode()) for t in texts["wasm_big_huge"][:-1]) <= CAP
    assert texts["wasm_big_huge"][0].endswith(
        f"[output cut at {CAP} bytes by limits.output_bytes: data was {HUGE} bytes]"
    )
    # the bash kind cuts its output at the limit itself and adds its own note (within the 16 KiB the common cut
    # leaves a kind for that)
    (bash_text,) = texts["bash_huge"][:-1]
    assert bash_text.startswith("x" * CAP) and len(bash_text.encode()) <= CAP + ENVELOPE_BYTES
    assert bash_text.endswith(f"[note: the output was truncated to the first {CAP} of {HUGE} bytes]")
    ends = {
        r["tool"]: r
        for r in map(json.loads, (sandbox_tmp / "t.jsonl").read_text().splitlines())
        if r["event"] == "call_end"
    }
    assert dict(map(tuple, ends["wasm_big_huge"]["metadata"]))["output_truncated"].startswith(f"data was {HUGE} bytes")
