"""A session's GET stream for real, against ``agents-supervise serve --http``: its head arrives at once, and it can
be opened again and again (clients reconnect after network blips, proxies, SSE retry) with the session's
notifications arriving on each."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import trio

from labkit import REVISION, RawSession
from supervisor.frontends._http_auth import hash_token
from tests._policies import agent, system_toolbox, write_policy
from tests.supervisor.frontends.test_mcp_http import _start

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.root

TOKEN = "stream-token"


class _RawStream:
    """A session's GET stream read off a plain socket: the head, then its events as they come (httpx's readers
    would leave generators behind when a test stops reading a stream mid-way)."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buffer = b""

    @classmethod
    async def open(cls, base: str, path: str, headers: dict[str, str]) -> tuple[_RawStream, bytes]:
        host, port = base.removeprefix("http://").rsplit(":", 1)
        raw = cls(await trio.open_tcp_stream(host, int(port)))
        lines = [f"GET {path} HTTP/1.1", f"host: {host}", *(f"{k}: {v}" for k, v in headers.items())]
        await raw.stream.send_all(("\r\n".join(lines) + "\r\n\r\n").encode())
        while b"\r\n\r\n" not in raw.buffer:
            raw.buffer += await raw.receive()
        head, _, raw.buffer = raw.buffer.partition(b"\r\n\r\n")
        return raw, head

    async def receive(self) -> bytes:
        chunk = await self.stream.receive_some(65536)
        assert chunk, "the server closed the stream"
        return chunk

    async def next_message(self) -> dict[str, Any]:
        """The next ``data:`` message (chunk sizes and comments skipped: a data line is whole in one chunk)."""
        while True:
            for line in self.buffer.split(b"\n"):
                if line.startswith(b"data:"):
                    self.buffer = self.buffer.split(line, 1)[1]
                    return json.loads(line[5:])
            self.buffer += await self.receive()


async def test_the_stream_reopens_and_its_head_comes_at_once(sandbox_tmp: Path) -> None:
    """Keep-alives every 60 s, so a head sent with the first event or keep-alive would not arrive within the test's
    10 s. Each of four streams, the last three reopened on the same session, gets the notification of what happened
    while it was open (a call of the session refused by its limit, told at level warning)."""
    policy = write_policy(
        sandbox_tmp,
        {"alpha": agent("alpha", builtinToolboxes=[system_toolbox("system", ["date"])])},
        sessions={"max_calls": 1},
        frontends={"http": {"listen": "127.0.0.1:0", "sse_keepalive_s": 60}},
        tenants={"acme": {"tokens": [hash_token(TOKEN)], "agents": ["alpha"]}},
    )
    async with _start(policy) as server:
        async with httpx.AsyncClient(headers={"authorization": f"Bearer {TOKEN}"}, timeout=30) as client:
            session = RawSession(client, server.url("alpha"))
            await session.open()
            await session.request("logging/setLevel", {"level": "warning"})
            assert not (await session.request("tools/call", {"name": "system_system_date", "arguments": {}}))["isError"]
            headers = {
                "accept": "text/event-stream",
                "mcp-session-id": session.session_id or "",
                "mcp-protocol-version": REVISION,
            }
            path = "/agents/alpha/mcp"
            for opening in range(4):
                with trio.fail_after(10):  # the head at once, not with the first event
                    stream, head = await _RawStream.open(
                        server.base, path, {"authorization": f"Bearer {TOKEN}", **headers}
                    )
                try:
                    assert head.startswith(b"HTTP/1.1 200 ") and b"text/event-stream" in head, (opening, head)
                    refused = await session.request("tools/call", {"name": "system_system_date", "arguments": {}})
                    assert refused["isError"] and "reached its limit of 1 tool calls" in refused["content"][0]["text"]
                    with trio.fail_after(10):
                        message = await stream.next_message()
                finally:
                    await stream.stream.aclose()
                assert message["method"] == "notifications/message", (opening, message)
                assert message["params"]["data"]["event"] == "portal_refusal", (opening, message)
        assert not [r for r in server.records("internal_error")], server.records("internal_error")
