"""A request answered at its head by the server itself, before the app is called or its body read (load shedding,
``_http_load.HeadShed``), and the h11 helpers that say whether a connection can go on after an answer.

A :class:`Screen` looks at each request head as it is parsed, while it is :meth:`~Screen.active`. It may wait for a
small body that did not come with its head (:func:`await_body`: into the parser's buffer, where the app finds it
as if nothing happened). When it answers (:class:`EarlyAnswer`), the app never
sees the request: :func:`answer_at_head` writes the answer in one write; when the request's body came whole with
its head (the usual case: a JSON-RPC message is small and sent with its head) and the client keeps the connection,
the body is passed over and the connection goes on with a fresh parser; else the answer says
``Connection: close`` and the connection closes after it (:func:`answer_and_close`: what the client still sends is
read and dropped for a while first, so that it reads the answer instead of a reset), its body never read into
memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import h11
import trio

from ._http_response import whole_response

__all__ = [
    "DRAIN_S",
    "EarlyAnswer",
    "Screen",
    "answer_and_close",
    "answer_at_head",
    "await_body",
    "buffered_body",
    "declared_length",
    "keeps_alive",
    "rest_read",
]

#: how long a connection closed after an answer reads and drops what its client still sends
DRAIN_S = 2.0


@dataclass(frozen=True)
class EarlyAnswer:
    """A whole response to a request, given at its head: status, headers, body."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes


class Screen(Protocol):
    """Looks at request heads before the app is called."""

    def active(self) -> bool:
        """Whether request heads are looked at now (when not, :meth:`answer` is not called)."""
        ...

    async def answer(
        self, request: h11.Request, conn: h11.Connection, stream: trio.abc.Stream, read_timeout_s: float
    ) -> EarlyAnswer | None:
        """The answer to give instead of calling the app, or ``None`` to serve it. ``conn`` is the connection's
        parser, its buffer holding what came after the head."""
        ...


def keeps_alive(request: h11.Request) -> bool:
    """Whether the connection stays open after this request's response (HTTP/1.1 without ``Connection: close``,
    as h11 decides it)."""
    if request.http_version != b"1.1":
        return False
    for name, value in request.headers:
        if name == b"connection" and b"close" in (v.strip().lower() for v in value.split(b",")):
            return False
    return True


def rest_read(conn: h11.Connection) -> bool:
    """Read what is left of a request the app did not read to its end (a GET's empty body, a body passed over),
    from what has arrived already; ``False`` when more would have to be waited for (the connection is then closed,
    not drained)."""
    while conn.their_state is h11.SEND_BODY:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError:
            return False
        if event is h11.NEED_DATA or not isinstance(event, h11.Data | h11.EndOfMessage):
            return False
    return True


def declared_length(request: h11.Request) -> int | None:
    """The request's ``Content-Length`` (``None``: chunked, or none given, which h11 reads as an empty body)."""
    for name, value in request.headers:
        if name == b"content-length":
            return int(value)  # h11 checked it is one decimal number
    chunked = any(name == b"transfer-encoding" for name, _ in request.headers)
    return None if chunked else 0


def buffered_body(request: h11.Request, conn: h11.Connection) -> bytes | None:
    """The request's body when it has come whole with its head (its ``Content-Length`` bytes are in ``conn``'s
    buffer, nothing read from the socket for it); ``None`` when it is chunked or more is to come."""
    length = declared_length(request)
    if length is None:
        return None
    buffered = conn.trailing_data[0]
    return buffered[:length] if len(buffered) >= length else None


async def await_body(stream: trio.abc.Stream, conn: h11.Connection, length: int, timeout_s: float) -> bool:
    """Read from ``stream`` into ``conn``'s buffer (nothing parsed, so the app reads the body as ever) until it holds
    the ``length`` bytes of the current request's body: ``True``, or ``False`` when the client closed first or
    ``timeout_s`` passed."""
    with trio.move_on_after(timeout_s):
        while len(conn.trailing_data[0]) < length:
            try:
                data = bytes(await stream.receive_some(65536))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            conn.receive_data(data)
            if not data:
                return False
        return True
    return False


async def answer_and_close(stream: trio.abc.Stream, data: bytes) -> None:
    """Write ``data`` (a response that says ``Connection: close``), then read and drop what the client still sends
    (a body, pipelined requests) for at most :data:`DRAIN_S` or until it closes, so that its answer is not lost to
    a reset. The caller closes the stream."""
    with trio.move_on_after(DRAIN_S):
        try:
            await stream.send_all(data)
            if isinstance(stream, trio.abc.HalfCloseableStream):
                await stream.send_eof()
            while await stream.receive_some(65536):
                pass
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass


async def answer_at_head(
    stream: trio.abc.Stream, conn: h11.Connection, request: h11.Request, answer: EarlyAnswer, max_head_bytes: int
) -> h11.Connection | None:
    """Answer ``request`` with ``answer`` in one write. Returns the parser of the connection's next request when it
    goes on (the body came whole and was passed over, the client keeps the connection), else ``None`` once the
    answer is written with ``Connection: close`` and the connection drained (:func:`answer_and_close`)."""
    if keeps_alive(request) and rest_read(conn):
        data = whole_response(answer.status, answer.headers, answer.body)
        if data is not None:
            try:
                await stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return None
            rest, closed = conn.trailing_data
            fresh = h11.Connection(h11.SERVER, max_incomplete_event_size=max_head_bytes)
            if rest:
                fresh.receive_data(rest)
            if closed:
                fresh.receive_data(b"")
            return fresh
    data = whole_response(answer.status, answer.headers, answer.body, close=True)
    if data is not None:
        await answer_and_close(stream, data)
    return None
