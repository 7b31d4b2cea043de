"""One HTTP/1.1 connection served with h11: requests read one after another (keep-alive), each handed to an ASGI app
in this connection's own task, its response written with as few writes as it takes.

A response whose first body message ends it (every JSON answer, every refusal) goes out in **one** write: head
(with ``content-length``) and body together. A streamed one (SSE) is chunked, its head written with its first chunk.
h11 parses every request; a whole response to a keep-alive HTTP/1.1 request that is not ``HEAD`` (the answer of
every call) is written by :func:`whole_response` instead of h11's writer (h11's event and state bookkeeping was a
tenth of a call's CPU), with the header checks h11 makes (names are tokens, values visible ASCII with inner spaces, one
``content-length`` that is the body's), and the next request is parsed by a fresh h11 connection fed the bytes
that followed; any other response is written by h11.
The app's ``receive`` gives the request body, then waits for the client to go away (``http.disconnect``): bytes a
client sends meanwhile (a pipelined request) are kept for the next cycle, at most :data:`MAX_PIPELINED` of them.

A ``screen`` may answer a request at its head instead of the app (``_http_head``: the server's load shedding).

Bounds: the request head at most ``max_head_bytes``; each read of a request waits at most ``read_timeout_s`` (a
slow client is dropped, its request answered 408 when it has not started one); an idle connection is closed after
``read_timeout_s``. An app that raises answers 500 (when nothing was sent yet) and ``on_error`` is told.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

import h11
import trio

from ._http_admission import ConnectionState, head_deadline
from ._http_head import Screen, answer_at_head, keeps_alive, rest_read
from ._http_response import simple_response, whole_response
from ._http_wire import Receive, Send

__all__ = ["CONNECTION_EXTENSION", "MAX_PIPELINED", "App", "serve_connection", "simple_response", "whole_response"]

App = Callable[[dict[str, Any], Receive, Send], Any]
#: Bytes of a following request kept while the current one is answered; past it the connection stops reading.
MAX_PIPELINED = 64 * 1024
#: the ASGI scope's ``extensions`` key holding the connection's :class:`ConnectionState`
CONNECTION_EXTENSION = "agents_supervise.connection"
_READ = 64 * 1024


async def _receive(stream: trio.abc.Stream) -> bytes:
    """What the client sent next; ``b""`` once it closed the connection or reset it (a reset is the client going
    away, like a close: it must cost this connection only, never the server)."""
    try:
        return bytes(await stream.receive_some(_READ))
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return b""


class _ClientGone(Exception):
    """The client closed the connection or stopped sending within the read timeout."""


class _Exchange:
    """One request and its response on one connection."""

    def __init__(
        self, conn: h11.Connection, stream: trio.abc.Stream, read_timeout_s: float, request: h11.Request
    ) -> None:
        self.conn = conn
        self.stream = stream
        self.read_timeout_s = read_timeout_s
        self.body_done = False
        self.gone = False
        self.started: dict[str, Any] | None = None
        self.head_sent = False
        self.finished = False
        #: the response went out whole past h11 (:func:`whole_response`): h11 still waits to send one
        self.raw = False
        #: whether a whole response may go past h11: not for HEAD (no body) or a connection that closes after
        self._raw_ok = request.method != b"HEAD" and keeps_alive(request)
        self._head = request.method == b"HEAD"  # its response has the head only (h11 refuses body bytes)
        self._done: trio.Event | None = None  # made when a receive() waits for the response to complete

    @property
    def done(self) -> trio.Event:
        """Set once the response is complete: a waiting receive() may return."""
        if self._done is None:
            self._done = trio.Event()
            if self.finished:
                self._done.set()
        return self._done

    async def _read_into_conn(self) -> None:
        with trio.move_on_after(self.read_timeout_s) as waited:
            data = await _receive(self.stream)
        if waited.cancelled_caught:
            raise _ClientGone("no bytes within the read timeout")
        if not data:
            self.gone = True
        self.conn.receive_data(bytes(data))  # b"" tells h11 the client closed

    async def receive(self) -> dict[str, Any]:
        if self.gone or self.finished:
            return {"type": "http.disconnect"}
        if not self.body_done:
            if self.conn.they_are_waiting_for_100_continue:
                await self._write(self.conn.send(h11.InformationalResponse(status_code=100, headers=[])) or b"")
            while True:
                try:
                    event = self.conn.next_event()
                except h11.RemoteProtocolError:
                    self.gone = True
                    return {"type": "http.disconnect"}
                if event is h11.NEED_DATA:
                    try:
                        await self._read_into_conn()
                    except _ClientGone:
                        self.gone = True
                        return {"type": "http.disconnect"}
                    continue
                if isinstance(event, h11.Data):
                    return {"type": "http.request", "body": bytes(event.data), "more_body": True}
                if isinstance(event, h11.EndOfMessage):
                    self.body_done = True
                    return {"type": "http.request", "body": b"", "more_body": False}
                self.gone = True  # ConnectionClosed, or anything h11 should not give here
                return {"type": "http.disconnect"}
        # The body is read: wait for the client to go away, keeping what it sends for the next request.
        while not self.gone and not self.finished:
            if len(self.conn.trailing_data[0]) >= MAX_PIPELINED:
                await self.done.wait()
                break
            with trio.move_on_after(self.read_timeout_s):
                data = await _receive(self.stream)
                if not data:
                    self.gone = True
                    break
                self.conn.receive_data(bytes(data))
        return {"type": "http.disconnect"}

    def _write_now(self, data: bytes) -> bytes:
        """Write what the socket takes of ``data`` at once, without a trip through the scheduler (the response's
        only write, so no other is under way); what is left for :meth:`_write`. A stream that is not a plain socket
        (TLS) takes it all there."""
        sock = getattr(self.stream, "socket", None)
        if sock is None or self.gone:
            return data
        try:
            written = os.write(sock.fileno(), data)
        except BlockingIOError:
            return data
        except OSError:  # reset, closed: the client went away, as _write would find
            self.gone = True
            return b""
        return data[written:]

    async def _write(self, data: bytes) -> None:
        if self.gone or not data:
            return
        try:
            await self.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.gone = True

    async def send(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            if self.started is not None:
                raise RuntimeError("http.response.start sent twice")
            self.started = message
            return
        if kind != "http.response.body" or self.started is None or self.finished:
            raise RuntimeError(f"unexpected ASGI message {kind!r} at this point of the response")
        body = bytes(message.get("body", b""))
        more = bool(message.get("more_body", False))
        if not self.head_sent and not more and self._raw_ok and self.conn.our_state is h11.SEND_RESPONSE:
            whole = whole_response(int(self.started["status"]), list(self.started.get("headers", [])), body)
            if whole is not None:
                self.head_sent = self.finished = self.raw = True
                await self._write(self._write_now(whole))
                if self._done is not None:
                    self._done.set()
                return
        out = bytearray()
        if not self.head_sent:
            headers = [(bytes(k).lower(), bytes(v)) for k, v in self.started.get("headers", [])]
            if not more and not any(k == b"content-length" for k, _ in headers):
                headers.append((b"content-length", str(len(body)).encode()))
            out += self.conn.send(h11.Response(status_code=int(self.started["status"]), headers=headers)) or b""
            self.head_sent = True
        if body and not self._head:
            out += self.conn.send(h11.Data(data=body)) or b""
        if not more:
            out += self.conn.send(h11.EndOfMessage()) or b""
            self.finished = True
        if out:
            await self._write(bytes(out))
        if self.finished and self._done is not None:
            self._done.set()


def _scope(
    request: h11.Request,
    scheme: str,
    server: tuple[str, int] | None,
    client: tuple[str, int] | None,
    state: ConnectionState | None,
) -> dict[str, Any]:
    target = request.target.decode("latin-1")
    path, _, query = target.partition("?")
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": request.method.decode("ascii"),
        "scheme": scheme,
        "path": unquote(path),
        "raw_path": path.encode("latin-1"),
        "query_string": query.encode("latin-1"),
        "root_path": "",
        "headers": [(k.lower(), v) for k, v in request.headers.raw_items()],
        "server": server,
        "client": client,
        "extensions": {CONNECTION_EXTENSION: state},
    }


async def _simple(stream: trio.abc.Stream, status: int, reason: str) -> None:
    """Answer ``status`` with a plain-text ``reason`` (a broken or slow request); the connection then closes."""
    try:
        await stream.send_all(simple_response(status, reason))
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass


async def serve_connection(
    stream: trio.abc.Stream,
    app: App,
    *,
    scheme: str,
    max_head_bytes: int,
    read_timeout_s: float,
    on_error: Callable[[BaseException], None],
    server: tuple[str, int] | None = None,
    client: tuple[str, int] | None = None,
    head_timeout_s: float | None = None,
    state: ConnectionState | None = None,
    screen: Screen | None = None,
) -> None:
    """Serve requests on ``stream`` until the client closes it, stays idle past ``read_timeout_s``, takes longer
    than :func:`head_deadline` allows for a request head, or a response cannot be followed by another
    (``Connection: close``, a body the app did not read, an app error).

    ``state``: the gate's record of the connection (``reading_head`` kept up to date; given to the app as the
    scope's ``extensions[CONNECTION_EXTENSION]``); ``head_timeout_s``: the bound on a whole head (default
    ``read_timeout_s``); ``screen``: looks at each request head before the app is called, and may answer it
    instead (``_http_head``: load shedding before a body is read)."""
    state = state if state is not None else ConnectionState(peer=client[0] if client else "", authenticated=True)
    head_s = read_timeout_s if head_timeout_s is None else head_timeout_s
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=max_head_bytes)
    # One timer for the connection's reads of request heads instead of a cancel scope per read (one cost about what a
    # tenth of h11's parsing of a call does): its deadline is set before each such read and lifted after it, so it
    # ends nothing but a read. The deadline is the whole head's, never moved by the bytes that trickle in.
    timer = trio.CancelScope()
    try:
        with timer:
            while True:
                try:
                    event = conn.next_event()
                except h11.RemoteProtocolError as exc:
                    await _simple(stream, exc.error_status_hint, f"bad request: {exc}")
                    return
                if event is h11.NEED_DATA:
                    if state.head_begun_at is None and conn.trailing_data[0]:
                        state.head_begun_at = trio.current_time()
                    timer.deadline = head_deadline(
                        authenticated=state.authenticated,
                        waiting_since=state.waiting_since,
                        first_byte_at=state.head_begun_at,
                        keepalive_s=read_timeout_s,
                        head_timeout_s=head_s,
                    )
                    data = await _receive(stream)
                    if timer.cancel_called:  # the deadline came as the bytes did: late all the same
                        break
                    timer.deadline = math.inf
                    if data and state.head_begun_at is None:
                        state.head_begun_at = trio.current_time()
                    conn.receive_data(bytes(data))
                    continue
                if not isinstance(event, h11.Request):
                    return  # ConnectionClosed (or a protocol state we do not continue from)
                state.reading_head = False
                early = None
                if screen is not None and screen.active():
                    early = await screen.answer(event, conn, stream, read_timeout_s)
                if early is not None:  # answered at its head: the app never sees it
                    following = await answer_at_head(stream, conn, event, early, max_head_bytes)
                    if following is None:
                        return
                    conn = following
                    state.reading_head, state.waiting_since, state.head_begun_at = True, trio.current_time(), None
                    continue
                exchange = _Exchange(conn, stream, read_timeout_s, event)
                try:
                    await app(_scope(event, scheme, server, client, state), exchange.receive, exchange.send)
                except Exception as exc:  # a bug of the app: this request is answered 500, the server goes on
                    on_error(exc)
                    if exchange.started is None:
                        await _simple(stream, 500, "internal error; see the trace")
                    return
                state.reading_head, state.waiting_since, state.head_begun_at = True, trio.current_time(), None
                if exchange.raw:  # answered past h11: the next request is a fresh h11 connection's first
                    if exchange.gone or not rest_read(conn):
                        return
                    rest, closed = conn.trailing_data
                    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=max_head_bytes)
                    if rest:
                        conn.receive_data(rest)
                    if closed:
                        conn.receive_data(b"")  # to h11, no bytes is the end of the stream
                    continue
                if not exchange.finished or exchange.gone or conn.our_state is not h11.DONE or not rest_read(conn):
                    return
                try:
                    conn.start_next_cycle()  # raises when the request's body was not read to its end
                except h11.LocalProtocolError:
                    return
        # The timer ended a read: the client was too slow.
        if conn.their_state is h11.SEND_BODY or conn.trailing_data[0]:  # a request was begun
            await _simple(stream, 408, "the request did not arrive in time")
    finally:
        with trio.move_on_after(1) as cleanup:
            cleanup.shield = True
            try:
                await stream.aclose()
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
