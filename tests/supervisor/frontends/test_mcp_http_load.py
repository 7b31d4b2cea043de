"""Load: many MCP sessions held at once over Streamable HTTP by a real ``agents-supervise serve --http``, each calling
a tool in a real confined worker, driven by a raw httpx client (``labkit/_mcp_raw_http.py``; the SDK client is too
heavy for a thousand sessions in one process).

The suite holds :data:`SESSIONS` sessions, 200 (on this shared 2-core machine 1,000 take about four minutes);
``MCP_LOAD_SESSIONS`` sets another number and ``scripts/load_http`` runs the full 1,000 on its own. Every session
is opened first and stays open, then all of them call the tool at once, then each is used again (none was lost or
mixed up with another), while the supervisor's resident memory grows by less than :data:`RSS_GROWTH_LIMIT`.
"""

from __future__ import annotations

import json
import os
import resource
from pathlib import Path

import httpx
import pytest
import trio

from labkit import RawSession
from supervisor.frontends._http_auth import hash_token
from tests._policies import agent, system_toolbox, write_policy
from tests.supervisor.frontends.test_mcp_http import _start

pytestmark = pytest.mark.root

SESSIONS = int(os.environ.get("MCP_LOAD_SESSIONS", "200"))
RSS_GROWTH_LIMIT = 500 * 1024 * 1024
TOKEN = "load-test-token"


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def test_many_sessions_held_each_calling_a_tool(sandbox_tmp: Path) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 2 * SESSIONS + 256  # both ends of every connection live on this machine
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(need, soft), hard), hard))
    policy = write_policy(
        sandbox_tmp,
        {"alpha": agent("alpha", builtinToolboxes=[system_toolbox("system", ["date"])])},
        frontends={"http": {"listen": "127.0.0.1:0", "max_sessions": SESSIONS + 10}},
        tenants={
            "acme": {
                "tokens": [hash_token(TOKEN)],
                "agents": ["alpha"],
                "limits": {"sessions": SESSIONS + 10, "concurrent_calls": SESSIONS},
            }
        },
        sessions={"max_concurrent_calls": 64},
    )
    async with _start(policy) as server:
        with trio.fail_after(240):
            before, peak = await _hold_sessions(server.url("alpha"), server.process.pid)
        growth = peak - before
        assert growth < RSS_GROWTH_LIMIT, f"the supervisor grew by {growth / 2**20:.0f} MiB"
        assert len(server.records("http_session_start")) == SESSIONS
        print(f"\n{SESSIONS} sessions: supervisor RSS {before / 2**20:.0f} MiB -> {peak / 2**20:.0f} MiB")


async def _hold_sessions(url: str, pid: int) -> tuple[int, int]:
    """Open every session, then call the tool from all of them at once, twice; the supervisor's RSS after one warm
    session and at its peak."""
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
    async with httpx.AsyncClient(limits=limits, timeout=120) as client:
        sessions = [RawSession(client, url, {"authorization": f"Bearer {TOKEN}"}) for _ in range(SESSIONS)]
        warm = sessions[0]
        await warm.open()
        await warm.request("tools/call", {"name": "system_system_date", "arguments": {}})
        before = peak = _rss(pid)

        async def open_one(s: RawSession) -> None:
            if s is not warm:
                assert (await s.open())["protocolVersion"] == "2025-11-25"

        async def call_one(s: RawSession) -> None:
            result = await s.request("tools/call", {"name": "system_system_date", "arguments": {}})
            assert not result.get("isError"), result
            assert json.loads(result["content"][0]["text"])["capability"] == "date"

        for job in (open_one, call_one, call_one):  # all held, then all call at once, then again: none was lost
            async with trio.open_nursery() as nursery:
                for s in sessions:
                    nursery.start_soon(job, s)
            peak = max(peak, _rss(pid))
            if job is open_one:
                ids = {s.session_id for s in sessions}
                assert len(ids) == SESSIONS and None not in ids  # one session each, all held at once
    return before, peak
