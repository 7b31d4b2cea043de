"""A real OpenAI-compatible chat-completions server on loopback, scripted turn by turn by the test.

The server runs ``http.server`` in a thread on ``127.0.0.1`` (an ephemeral port). Each POST to
``/v1/chat/completions`` is recorded (JSON body and headers) and answered by the test's ``script(request)``, which
returns a :class:`Reply`: a JSON completion, a streamed one (server-sent events), an HTTP error, an HTML page, a
stream or body that breaks off, a redirect, or a hang (held until the server closes, never a sleep).
"""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


@dataclass
class Reply:
    """What the server answers. ``kind``: json | sse | status | html | broken_json | broken_sse | hang | redirect
    (``status``, ``body`` the ``Location``)."""

    kind: str
    body: Any = None
    status: int = 200
    chunks: list[dict[str, Any]] = field(default_factory=list)


def message(content: str | None = None, tool_calls: list[tuple[str, str]] | None = None) -> dict[str, Any]:
    """A completion body: text and/or tool calls ``(name, arguments text)``."""
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        msg["tool_calls"] = [
            {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
            for i, (n, a) in enumerate(tool_calls)
        ]
    return {
        "id": "cmpl",
        "object": "chat.completion",
        "model": "test-model",
        "choices": [{"index": 0, "message": msg, "finish_reason": "tool_calls" if tool_calls else "stop"}],
    }


def answer(content: str) -> Reply:
    """A final answer, as a plain JSON completion."""
    return Reply("json", message(content))


def call(name: str, arguments: Any) -> Reply:
    """One tool call (``arguments`` text as is, anything else JSON-encoded), as a plain JSON completion."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return Reply("json", message(None, [(name, text)]))


def streamed(content: str, tool_calls: list[tuple[str, str]] | None = None) -> Reply:
    """The same answer as a stream of small chunks (content in pieces, tool-call arguments in pieces)."""
    chunks: list[dict[str, Any]] = [{"choices": [{"index": 0, "delta": {"role": "assistant"}}]}]
    for i in range(0, len(content), 3):
        chunks.append({"choices": [{"index": 0, "delta": {"content": content[i : i + 3]}}]})
    for n, (name, args) in enumerate(tool_calls or []):
        chunks.append(
            {
                "choices": [
                    {
                        "index": 0,
                        "delta": {
                            "tool_calls": [
                                {
                                    "index": n,
                                    "id": f"call_{n}",
                                    "type": "function",
                                    "function": {"name": name, "arguments": ""},
                                }
                            ]
                        },
                    }
                ]
            }
        )
        for i in range(0, len(args), 4):
            chunks.append(
                {
                    "choices": [
                        {
                            "index": 0,
                            "delta": {"tool_calls": [{"index": n, "function": {"arguments": args[i : i + 4]}}]},
                        }
                    ]
                }
            )
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls" if tool_calls else "stop"}]})
    return Reply("sse", chunks=chunks)


@dataclass
class ModelServer:
    """The running server: ``url`` (``modelUrl``), the ``requests`` it got, and the ``script`` answering them."""

    script: Callable[[dict[str, Any]], Reply]
    url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    released: threading.Event = field(default_factory=threading.Event)

    def last_tool_message(self, index: int = -1) -> str:
        """The content of the last tool message of request ``index``."""
        msgs = [m for m in self.requests[index]["messages"] if m["role"] == "tool"]
        return str(msgs[-1]["content"]) if msgs else ""


def _handler(server: ModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, status: int, ctype: str, data: bytes, length: int | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data) if length is None else length))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            server.requests.append(body)
            server.headers.append({k.lower(): v for k, v in self.headers.items()})
            reply = server.script(body)
            if reply.kind == "json":
                self._send(reply.status, "application/json", json.dumps(reply.body).encode())
            elif reply.kind == "status":
                self._send(reply.status, "application/json", json.dumps(reply.body or {}).encode())
            elif reply.kind == "html":
                self._send(
                    reply.status, "text/html; charset=utf-8", b"<html><body><h1>Welcome to nginx!</h1></body></html>"
                )
            elif reply.kind == "broken_json":
                data = json.dumps(reply.body).encode()
                self._send(200, "application/json", data[: len(data) // 2], length=len(data))
            elif reply.kind in ("sse", "broken_sse"):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()  # HTTP/1.0: the body ends when the connection closes
                chunks = reply.chunks if reply.kind == "sse" else reply.chunks[: max(1, len(reply.chunks) // 2)]
                for chunk in chunks:
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                if reply.kind == "sse":
                    self.wfile.write(b"data: [DONE]\n\n")
            elif reply.kind == "redirect":
                self.send_response(reply.status)
                self.send_header("Location", str(reply.body))
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif reply.kind == "hang":
                server.released.wait()
            self.close_connection = True

    return Handler


@contextmanager
def model_server(script: Callable[[dict[str, Any]], Reply]) -> Iterator[ModelServer]:
    """Run a scripted model server on loopback for the ``with`` block."""
    state = ModelServer(script)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    httpd.daemon_threads = True
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    thread = threading.Thread(target=httpd.serve_forever, name="model-server", daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.released.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join()
