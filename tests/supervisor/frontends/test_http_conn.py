"""The HTTP/1.1 connection on h11 (``supervisor/frontends/_http_conn.py``): a whole response to a keep-alive request
goes out past h11's writer and the connection goes on with a fresh parser; everything else is h11's. The client
side of every exchange is a real h11 client connection, so each response is checked by an HTTP parser, not by
comparing bytes."""

from __future__ import annotations

import json
from typing import Any

import h11
import trio
import trio.testing

from supervisor.frontends._http_conn import serve_connection, whole_response


async def _echo_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers each request with JSON naming its method, path and body."""
    body = b""
    while True:
        event = await receive()
        if event["type"] != "http.request":
            return
        body += event.get("body", b"")
        if not event.get("more_body"):
            break
    out = json.dumps({"method": scope["method"], "path": scope["path"], "body": body.decode()}).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": out, "more_body": False})


def _request(method: str, path: str, body: bytes = b"", headers: list[tuple[str, str]] | None = None) -> bytes:
    client = h11.Connection(h11.CLIENT)
    head = [("host", "test"), ("content-length", str(len(body))), *(headers or [])]
    return (
        client.send(h11.Request(method=method, target=path, headers=head))
        + client.send(h11.Data(data=body))
        + client.send(h11.EndOfMessage())
    )


class _Client:
    """The test's end: writes raw requests, parses every response with an h11 client connection."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.conn = h11.Connection(h11.CLIENT)

    async def response(self, method: bytes = b"POST") -> tuple[h11.Response, bytes]:
        # The client's own state machine must have "sent" a request for h11 to parse a response.
        self.conn.send(h11.Request(method=method, target="/", headers=[("host", "test"), ("content-length", "0")]))
        self.conn.send(h11.EndOfMessage())
        head: h11.Response | None = None
        body = b""
        while True:
            event = self.conn.next_event()
            if event is h11.NEED_DATA:
                data = await self.stream.receive_some(65536)
                self.conn.receive_data(data)
                continue
            if isinstance(event, h11.Response):
                head = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert head is not None
                if self.conn.our_state is h11.DONE and self.conn.their_state is h11.DONE:
                    self.conn.start_next_cycle()
                return head, body


async def _serve(nursery: trio.Nursery, app: Any = _echo_app) -> tuple[_Client, list[BaseException]]:
    client, server = trio.testing.memory_stream_pair()
    errors: list[BaseException] = []
    nursery.start_soon(
        lambda: serve_connection(
            server, app, scheme="http", max_head_bytes=16384, read_timeout_s=30, on_error=errors.append
        )
    )
    return _Client(client), errors


async def test_keep_alive_requests_are_answered_in_order_on_one_connection() -> None:
    async with trio.open_nursery() as nursery:
        client, errors = await _serve(nursery)
        await client.stream.send_all(_request("POST", "/one", b"first"))
        head, body = await client.response()
        assert head.status_code == 200 and json.loads(body) == {"method": "POST", "path": "/one", "body": "first"}
        assert dict(head.headers)[b"content-length"] == str(len(body)).encode()
        # Two more in one write (pipelined): the bytes after the first belong to the next request's parser.
        await client.stream.send_all(_request("POST", "/two", b"2") + _request("POST", "/three", b"3"))
        assert json.loads((await client.response())[1])["path"] == "/two"
        assert json.loads((await client.response())[1])["path"] == "/three"
        # A request split across writes after a whole response is still read.
        data = _request("POST", "/four", b"split body")
        await client.stream.send_all(data[:20])
        await trio.testing.wait_all_tasks_blocked()
        await client.stream.send_all(data[20:])
        assert json.loads((await client.response())[1])["body"] == "split body"
        assert not errors
        nursery.cancel_scope.cancel()


async def test_connection_close_and_head_are_written_by_h11() -> None:
    async with trio.open_nursery() as nursery:
        client, _ = await _serve(nursery)
        await client.stream.send_all(_request("HEAD", "/h"))
        head, body = await client.response(b"HEAD")
        assert head.status_code == 200 and body == b""  # no body after a HEAD's head
        await client.stream.send_all(_request("POST", "/bye", headers=[("connection", "close")]))
        head, _ = await client.response()
        assert (b"connection", b"close") in list(head.headers)
        assert await client.stream.receive_some(100) == b""  # and the server closed the connection
        nursery.cancel_scope.cancel()


async def test_a_header_value_with_a_line_break_is_never_written() -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"x-bad", b"a\r\nset-cookie: x=1")]})
        await send({"type": "http.response.body", "body": b"{}", "more_body": False})

    async with trio.open_nursery() as nursery:
        client, errors = await _serve(nursery, app)
        await client.stream.send_all(_request("POST", "/"))
        received = b""
        while chunk := await client.stream.receive_some(65536):
            received += chunk
        assert b"set-cookie" not in received.lower()  # h11 refused the header: the app's error, no response
        assert errors and isinstance(errors[0], h11.LocalProtocolError)
        nursery.cancel_scope.cancel()


def test_whole_response_is_a_response_h11_parses_or_none() -> None:
    raw = whole_response(201, [(b"Content-Type", b"application/json"), (b"content-length", b"2")], b"{}")
    assert raw is not None
    parser = h11.Connection(h11.CLIENT)
    parser.send(h11.Request(method="POST", target="/", headers=[("host", "t"), ("content-length", "0")]))
    parser.send(h11.EndOfMessage())
    parser.receive_data(raw)
    head = parser.next_event()
    assert isinstance(head, h11.Response) and head.status_code == 201 and head.reason == b"Created"
    assert list(head.headers) == [(b"content-type", b"application/json"), (b"content-length", b"2")]
    assert parser.next_event() == h11.Data(data=b"{}")
    # What h11 must write (or refuse): bodiless statuses, framing headers, bad names and values, a wrong length.
    assert whole_response(204, [], b"") is None
    assert whole_response(101, [], b"") is None
    assert whole_response(200, [(b"transfer-encoding", b"chunked")], b"") is None
    assert whole_response(200, [(b"connection", b"close")], b"") is None
    assert whole_response(200, [(b"content-length", b"3")], b"{}") is None
    assert whole_response(200, [(b"bad name", b"x")], b"") is None
    for value in (b"a\rb", b"a\nb", b"a\x00b", b" lead", b"trail ", "é".encode()):
        assert whole_response(200, [(b"x", value)], b"") is None, value
    assert whole_response(200, [(b"x", b"inner  space\tand tab")], b"") is not None


async def test_a_client_that_resets_its_connection_costs_that_connection_only() -> None:
    """A real TCP connection closed with a reset (SO_LINGER 0) after its answer, while the server waits for the next
    request: the server's read fails with a reset, which must end this connection quietly (before, it escaped and
    took the whole HTTP server down with it)."""
    import socket
    import struct

    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    errors: list[BaseException] = []
    served: list[str] = []

    async def serve_one() -> None:
        stream = await listener.accept()
        await serve_connection(
            stream, _echo_app, scheme="http", max_head_bytes=16384, read_timeout_s=30, on_error=errors.append
        )
        served.append("returned")

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve_one)
            client = trio.socket.socket()
            await client.connect(("127.0.0.1", port))
            await client.send(_request("POST", "/x", b"hello"))
            answer = b""
            while b"hello" not in answer:
                answer += await client.recv(65536)
            assert answer.startswith(b"HTTP/1.1 200")
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.close()  # RST, not FIN
    await listener.aclose()
    assert served == ["returned"] and not errors


async def _served(app: Any = _echo_app) -> tuple[trio.testing.MemoryStapledStream, list[str], Any]:
    """A connection served with ``read_timeout_s=30`` in the background: the client's stream, what the server did
    (``"returned"`` once it ended), and the nursery's task to start it."""
    client, server = trio.testing.memory_stream_pair()
    ended: list[str] = []

    async def run() -> None:
        await serve_connection(server, app, scheme="http", max_head_bytes=16384, read_timeout_s=30, on_error=print)
        ended.append("returned")

    return client, ended, run


async def _read_all(stream: trio.abc.Stream) -> bytes:
    data = b""
    while chunk := await stream.receive_some(65536):
        data += chunk
    return data


async def test_a_request_that_stalls_half_way_is_answered_408_at_the_read_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    client, ended, run = await _served()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        start = trio.current_time()
        await client.send_all(_request("POST", "/x", b"body")[:20])  # half a head, then nothing
        answer = await _read_all(client)
    assert answer.startswith(b"HTTP/1.1 408") and b"did not arrive in time" in answer
    assert trio.current_time() - start == 30 and ended == ["returned"]


async def test_an_idle_keep_alive_connection_is_closed_at_the_read_timeout_without_an_answer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    client, ended, run = await _served()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        await client.send_all(_request("POST", "/one", b"1"))
        first = await client.receive_some(65536)
        start = trio.current_time()
        assert first.startswith(b"HTTP/1.1 200")
        assert await _read_all(client) == b""  # closed, no 408: no request was begun
    assert trio.current_time() - start == 30 and ended == ["returned"]


async def test_the_read_timeout_bounds_reads_only_never_a_slow_answer(autojump_clock: trio.testing.MockClock) -> None:
    async def slow_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await trio.sleep(100)  # past the read timeout, while the connection has nothing to read
        await _echo_app(scope, receive, send)

    client, _, run = await _served(slow_app)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run)
        for path in ("/one", "/two"):  # the second: after a read whose deadline was lifted
            start = trio.current_time()
            await client.send_all(_request("POST", path, b"x"))
            answer = await client.receive_some(65536)
            assert answer.startswith(b"HTTP/1.1 200") and path.encode() in answer
            assert trio.current_time() - start == 100
        nursery.cancel_scope.cancel()
