"""Load shedding at the request head (``supervisor/frontends/_http_load.py``'s ``HeadShed`` and ``plan_head_shed``,
``_http_head.py``) and the pacing of its ``Retry-After`` (``_http_pacing.py``): the pure plans, then a real
``serve_connection`` with the screen, its client side an h11 client connection over an in-memory stream. Past the
bound a request is answered 503 from its head, its body never handed to the app (nor, when it is still to come,
read); notifications still reach the app; a connection whose request came whole goes on. The service end to end:
``test_http_load.py``."""

from __future__ import annotations

import json
from typing import Any

import h11
import pytest
import trio
import trio.testing

from supervisor.frontends._http_conn import serve_connection
from supervisor.frontends._http_load import (
    SMALL_BODY,
    HeadShed,
    RefusalLog,
    ServerLoad,
    ShedAtHead,
    plan_head_shed,
)
from supervisor.frontends._http_pacing import MAX_RETRY_AFTER_S, ShedPacing, plan_retry_after
from supervisor.traces import TraceRecorder
from tests.supervisor.frontends.test_http_conn import _Client

ENDPOINT = b"/agents/coder/mcp"
CALL = b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t","arguments":{}}}'
CANCEL = b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}'


def _full(requests: int = 4, bound: int = 4) -> ServerLoad:
    load = ServerLoad(max_requests=bound, max_body_bytes=1 << 26, max_body=1 << 22)
    load.requests = requests
    return load


@pytest.mark.parametrize(
    ("method", "target", "length", "body", "expects_continue", "shed"),
    [
        (b"POST", ENDPOINT, len(CALL), CALL, False, ShedAtHead(7)),
        (b"POST", ENDPOINT + b"?x=1", len(CALL), CALL, False, ShedAtHead(7)),
        (b"POST", ENDPOINT, len(CANCEL), CANCEL, False, None),  # a notification frees work: the app's
        (b"POST", ENDPOINT, 0, b'{"jsonrpc":"2.0","id":1,"result":{}}', False, None),  # a response
        (b"POST", ENDPOINT, 0, b'{"jsonrpc":"2.0","id":1,"method":"initialize"}', False, None),  # not counted
        (b"POST", ENDPOINT, 0, b'{"jsonrpc":"2.0","id":[1],"method":"ping"}', False, None),  # the app's 400
        (b"POST", ENDPOINT, 0, b"{not json", False, None),
        (b"POST", ENDPOINT, 0, b"[]", False, None),
        (b"POST", ENDPOINT, 4 << 20, None, False, ShedAtHead()),  # a large body still to come: never read
        (b"POST", ENDPOINT, 1 << 20, None, True, ShedAtHead()),
        (b"POST", ENDPOINT, None, None, False, None),  # chunked: read within the app's bounds
        (b"POST", ENDPOINT, None, None, True, ShedAtHead()),  # chunked, sent only once told to
        (b"POST", ENDPOINT, (4 << 20) + 1, None, False, None),  # past max_body_bytes: the app's 413, unread
        (b"POST", ENDPOINT, 300, None, True, ShedAtHead()),  # Expect: 100-continue: told before it is sent
        (b"POST", ENDPOINT, SMALL_BODY, None, False, None),  # small and still coming: read, then decided
        (b"GET", ENDPOINT, 0, b"", False, None),  # a session's event stream
        (b"DELETE", ENDPOINT, 0, b"", False, None),
        (b"GET", b"/healthz", 0, b"", False, None),
        (b"POST", b"/agents/a/b/mcp", len(CALL), CALL, False, None),
        (b"POST", b"/.well-known/oauth-protected-resource", len(CALL), CALL, False, None),
    ],
)
def test_what_is_shed_at_its_head(
    method: bytes, target: bytes, length: int | None, body: bytes | None, expects_continue: bool, shed: Any
) -> None:
    full = _full()
    planned = plan_head_shed(
        full, method=method, target=target, length=length, body=body, expects_continue=expects_continue
    )
    assert planned == shed
    # below the bound nothing is shed
    below = _full(requests=3)
    assert plan_head_shed(below, method=method, target=target, length=length, body=body) is None


def test_retry_after_is_paced_by_what_was_shed_against_what_was_admitted() -> None:
    assert plan_retry_after(1, shed=0, admitted=100) == 1
    assert plan_retry_after(8, shed=0, admitted=0) == 1  # a second without a refusal: back to 1 s
    assert plan_retry_after(1, shed=50, admitted=100) == 1  # half as many refusals as admissions: 1 s holds
    assert plan_retry_after(1, shed=900, admitted=300) == 2  # at most doubled in a second
    assert plan_retry_after(2, shed=150, admitted=250) == 3
    assert plan_retry_after(3, shed=100, admitted=250) == 3  # at the share: held
    assert plan_retry_after(4, shed=50, admitted=400) == 1
    assert plan_retry_after(4, shed=10, admitted=0) == 8  # nothing admitted: every place held by long calls
    assert plan_retry_after(MAX_RETRY_AFTER_S, shed=10**6, admitted=1) == MAX_RETRY_AFTER_S


def test_pacing_counts_per_second() -> None:
    pacing = ShedPacing()
    for _ in range(100):
        pacing.admit()
    assert [pacing.shed_one(0.1 * i) for i in range(5)] == [1] * 5  # the first window: 1 s
    for _ in range(300):
        assert pacing.shed_one(0.5) == 1
    pacing.admit()
    assert pacing.shed_one(1.2) == 2  # the window from 0 shed 305 against 1 admitted: doubled
    assert pacing.shed_one(5.0) == 1  # seconds without a refusal since


class _Trace(TraceRecorder):
    """A recorder that keeps its records in a list."""

    def __init__(self) -> None:
        super().__init__(None)
        self.records: list[dict[str, Any]] = []
        self.sink = lambda event, fields: self.records.append({"event": event, **fields})


def _request(body: bytes, headers: list[tuple[str, str]] | None = None, target: bytes = ENDPOINT) -> bytes:
    head = [("host", "test"), ("content-type", "application/json"), *(headers or [])]
    if not any(name == "content-length" for name, _ in head):
        head.append(("content-length", str(len(body))))
    client = h11.Connection(h11.CLIENT)
    return client.send(h11.Request(method="POST", target=target, headers=head)) + body


async def _answer(client: _Client) -> tuple[h11.Response, dict[str, Any]]:
    head, body = await client.response()
    return head, json.loads(body)


class _Served:
    """One connection served with a :class:`HeadShed` over a :class:`ServerLoad` the test fills and empties; the
    app answers 200 with the body it read, and counts what it saw."""

    def __init__(self) -> None:
        self.load = _full()
        self.trace = _Trace()
        self.seen: list[bytes] = []
        self.client, self.server = trio.testing.memory_stream_pair()
        self.reader = _Client(self.client)  # parses the server's responses with an h11 client connection

    async def app(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = b""
        while (event := await receive())["type"] == "http.request":
            body += event.get("body", b"")
            if not event.get("more_body"):
                break
        self.seen.append(body)
        out = json.dumps({"body": body.decode()}).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": out, "more_body": False})

    async def run(self) -> None:
        screen = HeadShed(self.load, RefusalLog(self.trace))
        await serve_connection(
            self.server, self.app, scheme="http", max_head_bytes=16384, read_timeout_s=30, on_error=print, screen=screen
        )


def _header(head: h11.Response, name: bytes) -> bytes | None:
    return dict(head.headers).get(name)


async def test_a_call_past_the_bound_is_answered_from_its_head_and_the_connection_goes_on() -> None:
    served = _Served()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(served.run)
        await served.client.send_all(_request(CALL))
        head, answer = await _answer(served.reader)
        assert head.status_code == 503 and int(_header(head, b"retry-after") or 0) >= 1
        assert _header(head, b"connection") is None  # kept: the body came with the head and was passed over
        assert answer["id"] == 7 and answer["error"]["data"]["limit"] == "max_requests_in_flight"
        assert "retry in 1 s" in answer["error"]["message"]
        assert served.seen == []  # the app never saw it
        # a notification past the bound reaches the app
        await served.client.send_all(_request(CANCEL))
        head, answer = await _answer(served.reader)
        assert head.status_code == 200 and served.seen == [CANCEL]
        # a body split from its head is waited for, then the call is shed with its id
        data = _request(CALL)
        await served.client.send_all(data[:-10])
        await trio.testing.wait_all_tasks_blocked()
        await served.client.send_all(data[-10:])
        head, answer = await _answer(served.reader)
        assert head.status_code == 503 and answer["id"] == 7 and served.seen == [CANCEL]
        # a place is free: the next call on the same connection is served
        served.load.requests = 3
        await served.client.send_all(_request(CALL))
        head, answer = await _answer(served.reader)
        assert head.status_code == 200 and answer == {"body": CALL.decode()}
        nursery.cancel_scope.cancel()
    traced = [r for r in served.trace.records if r["event"] == "http_refused"]
    assert traced and traced[0]["status"] == 503 and traced[0]["tenant"] is None
    assert traced[0]["path"] == ENDPOINT.decode() and "max_requests_in_flight" in traced[0]["why"]


@pytest.mark.parametrize(
    "headers",
    [
        [("content-length", str(4 << 20))],  # a large body the client is about to send
        [("content-length", "300"), ("expect", "100-continue")],  # a body sent only once told to
    ],
)
async def test_a_body_still_to_come_is_never_read(headers: list[tuple[str, str]]) -> None:
    """The answer comes from the head alone, says ``Connection: close`` (no 100 Continue first), and the server
    closes its side; the app never runs."""
    served = _Served()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(served.run)
        await served.client.send_all(_request(b"", headers))
        received = b""
        with trio.fail_after(10):
            while chunk := await served.client.receive_some(65536):
                received += chunk
        nursery.cancel_scope.cancel()
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 "), received[:200]
    assert b"\r\nconnection: close\r\n" in head + b"\r\n" and b"\r\nretry-after: 1" in head
    assert b"100 Continue" not in received
    assert json.loads(body)["error"]["data"]["limit"] == "max_requests_in_flight"
    assert served.seen == []


async def test_below_the_bound_the_screen_changes_nothing() -> None:
    served = _Served()
    served.load.requests = 0
    async with trio.open_nursery() as nursery:
        nursery.start_soon(served.run)
        await served.client.send_all(_request(CALL, [("content-length", str(len(CALL)))]))
        head, answer = await _answer(served.reader)
        assert head.status_code == 200 and answer == {"body": CALL.decode()}
        nursery.cancel_scope.cancel()
    assert served.trace.records == []
