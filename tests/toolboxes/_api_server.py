"""A real HTTP server on 127.0.0.1 for the OpenAPI and PostgREST tests: serves documents, answers with scripted
responses, and records every request exactly as it arrived (raw target, headers, body)."""

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
class Seen:
    """One request the server got: ``target`` is the raw request target (still percent-encoded)."""

    method: str
    target: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Answer:
    status: int = 200
    body: bytes | Any = b""
    content_type: str = "application/json"


@dataclass
class ApiServer:
    """``answer(seen)`` decides each response; ``documents`` maps a path to bytes served with GET."""

    answer: Callable[[Seen], Answer]
    documents: dict[str, bytes] = field(default_factory=dict)
    requests: list[Seen] = field(default_factory=list)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def api_requests(self) -> list[Seen]:
        return [r for r in self.requests if r.target not in self.documents]


def _handler(server: ApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            seen = Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            server.requests.append(seen)
            if self.command == "GET" and self.path in server.documents:
                answer = Answer(200, server.documents[self.path])
            else:
                answer = server.answer(seen)
            data = answer.body if isinstance(answer.body, bytes) else json.dumps(answer.body).encode()
            self.send_response(answer.status)
            self.send_header("Content-Type", answer.content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

    return Handler


@contextmanager
def serve_api(answer: Callable[[Seen], Answer], documents: dict[str, bytes] | None = None) -> Iterator[ApiServer]:
    """Run an :class:`ApiServer` on an ephemeral port of 127.0.0.1 for the ``with`` block."""
    api = ApiServer(answer, dict(documents or {}))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(api))
    api.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield api
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()
