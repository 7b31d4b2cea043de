"""A minimal MCP Streamable HTTP client (the 2025-11-25 session revision) on httpx: one POST per message, the
answer read as JSON or from an SSE stream. Light enough to hold a thousand sessions in one process, and the same
for every server it drives (the load test, ``scripts/bench_http.py``)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

__all__ = ["REVISION", "RawSession", "answer_of"]

REVISION = "2025-11-25"
_ACCEPT = "application/json, text/event-stream"


def answer_of(response: httpx.Response, req_id: Any) -> dict[str, Any]:
    """The JSON-RPC answer to ``req_id`` in a POST's response (a JSON body or SSE ``data:`` events)."""
    if response.status_code != 200:
        raise RuntimeError(f"HTTP {response.status_code}: {response.text[:300]}")
    kind = response.headers.get("content-type", "").split(";")[0].strip()
    if kind == "application/json":
        return response.json()
    for event in response.text.split("\n\n"):
        data = "".join(line[5:].strip() for line in event.splitlines() if line.startswith("data:"))
        if data:
            message = json.loads(data)
            if message.get("id") == req_id:
                return message
    raise RuntimeError(f"no answer to request {req_id} in the event stream")


class RawSession:
    """One MCP session: ``open`` (initialize, initialized), then ``request``."""

    def __init__(self, client: httpx.AsyncClient, url: str, headers: dict[str, str] | None = None) -> None:
        self.client = client
        self.url = url
        self.headers = {"accept": _ACCEPT, "content-type": "application/json", **(headers or {})}
        self.session_id: str | None = None
        self._next = 1

    async def open(self) -> dict[str, Any]:
        """Initialize the session; returns the initialize result."""
        init = await self.request(
            "initialize",
            {"protocolVersion": REVISION, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
        )
        headers = {**self.headers, "mcp-protocol-version": REVISION}
        if self.session_id:
            headers["mcp-session-id"] = self.session_id
        note = await self.client.post(
            self.url, headers=headers, content=b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
        )
        if note.status_code != 202:
            raise RuntimeError(f"notifications/initialized: HTTP {note.status_code}")
        return init

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """One request; returns its ``result`` (raises ``RuntimeError`` on a JSON-RPC or HTTP error)."""
        req_id = self._next
        self._next += 1
        headers = dict(self.headers)
        if self.session_id:
            headers["mcp-session-id"] = self.session_id
            headers["mcp-protocol-version"] = REVISION
        body = json.dumps({"jsonrpc": "2.0", "id": req_id, "method": method, "params": params or {}})
        response = await self.client.post(self.url, headers=headers, content=body.encode())
        if method == "initialize":
            self.session_id = response.headers.get("mcp-session-id")
        answer = answer_of(response, req_id)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer["result"]
