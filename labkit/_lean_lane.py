"""A lean MCP HTTP client lane: one keep-alive connection sending the same ``tools/call`` POST again and again
(encoded once), reading each answer by its ``content-length``: a client that costs little CPU, so that on two cores
the server, not the client, sets the pace (``scripts/bench_http.py``, ``scripts/load_http curve``)."""

from __future__ import annotations

import json

import httpx
import trio

from ._mcp_raw_http import REVISION

__all__ = ["LeanLane"]


class LeanLane:
    """Calls ``tool`` (no arguments) on session ``session_id`` of the server at ``url``, ``headers`` (a token) on each
    request. :meth:`exchange` gives the answer's head and body, :meth:`answer` its status and ``Retry-After``,
    :meth:`call` checks it is HTTP 200 with a result that is not an error."""

    def __init__(self, url: str, headers: dict[str, str], session_id: str | None, tool: str) -> None:
        parsed = httpx.URL(url)
        self.host, self.port = parsed.host, parsed.port or 80
        body = json.dumps(
            {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": tool, "arguments": {}}}
        )
        head = {
            "host": f"{self.host}:{self.port}",
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
            "mcp-protocol-version": REVISION,
            **({"mcp-session-id": session_id} if session_id else {}),
            **headers,
            "content-length": str(len(body)),
        }
        lines = "".join(f"{k}: {v}\r\n" for k, v in head.items())
        self.request = f"POST {parsed.raw_path.decode()} HTTP/1.1\r\n{lines}\r\n{body}".encode()
        self.buffer = b""
        self.stream: trio.SocketStream | None = None

    async def open(self) -> None:
        self.stream = await trio.open_tcp_stream(self.host, self.port)
        self.buffer = b""

    async def aclose(self) -> None:
        if self.stream is not None:
            await trio.aclose_forcefully(self.stream)
            self.stream = None

    async def exchange(self) -> tuple[bytes, bytes]:
        """Send the request and read its answer: ``(head, lower-cased; body)``. Raises ``RuntimeError`` when the
        server closed the connection first."""
        if self.stream is None:
            await self.open()
        assert self.stream is not None
        await self.stream.send_all(self.request)
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end >= 0:
                head = self.buffer[:end].lower()
                at = head.find(b"content-length:")
                length = int(head[at + 15 :].split(b"\r\n", 1)[0]) if at >= 0 else -1
                if length >= 0 and len(self.buffer) >= end + 4 + length:
                    body, self.buffer = self.buffer[end + 4 : end + 4 + length], self.buffer[end + 4 + length :]
                    return head, body
            data = await self.stream.receive_some(65536)
            if not data:
                raise RuntimeError(f"the server closed the connection ({self.buffer[:200]!r})")
            self.buffer += data

    async def answer(self) -> tuple[int, float | None]:
        """One call: ``(HTTP status, Retry-After or None)``; a 200 whose result is an error is status ``0``. A
        connection the server closes (or says it will) is opened again at the next call."""
        try:
            head, body = await self.exchange()
        except (RuntimeError, OSError, trio.BrokenResourceError):
            await self.aclose()
            raise
        status = int(head.split(b" ", 2)[1])
        at = head.find(b"retry-after:")
        retry = float(head[at + 12 :].split(b"\r\n", 1)[0]) if at >= 0 else None
        if b"connection: close" in head:
            await self.aclose()
        if status == 200 and json.loads(body).get("result", {}).get("isError"):
            return 0, None
        return status, retry

    async def call(self) -> None:
        """One call that must succeed: ``RuntimeError`` unless HTTP 200 with a result that is not an error."""
        head, body = await self.exchange()
        if not head.startswith(b"http/1.1 200") or json.loads(body).get("result", {}).get("isError"):
            raise RuntimeError(f"the call failed: {head[:80]!r} {body[:300]!r}")
