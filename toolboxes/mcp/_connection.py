"""One running MCP server process and the JSON-RPC session over its stdin/stdout.

The server is a child of the worker, so it runs under everything the launcher set up for the worker (Landlock, the
network namespace with only the egress bridge, rlimits, the sandbox uid, no_new_privs, the PID namespace). It
starts in a session of its own with the environment the policy gives the worker, in the worker's work folder.

Threads: a reader thread parses the server's stdout (:mod:`._jsonrpc`) and hands each response to the thread
waiting for it, answers the server's own requests (``ping`` with an empty result; everything else, such as
``sampling/createMessage``, ``roots/list`` or ``elicitation/create``, with a JSON-RPC "method not found" error, since
a worker has no model, roots or user to offer), and passes notifications to a callback. A second thread keeps the
tail of the server's stderr for messages. When stdout ends, the reader reaps the process and fails every request
in flight with :class:`ServerGone` naming the exit status and the stderr tail.

What this does not do: restart the server (:mod:`._toolbox` does), or bound the server's resources (the worker's
rlimits and namespaces do).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from ._errors import ServerGone, ServerRefused, ServerTimeout
from ._jsonrpc import (
    METHOD_NOT_FOUND,
    Garbage,
    LineSplitter,
    Notification,
    Request,
    Response,
    encode,
    error_reply,
    parse_line,
    result_reply,
)

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["Connection"]

_STDERR_TAIL_BYTES = 2000
#: What a message quotes of the server's stderr: its first bytes and its last.
_STDERR_HEAD_BYTES, _STDERR_EXCERPT_TAIL = 600, 600
#: How long a server gets to exit after its stdin closes and SIGTERM, before SIGKILL.
_TERM_GRACE_S = 1.0


class _Pending:
    __slots__ = ("event", "response")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.response: Response | None = None


class Connection:
    """A started MCP server. Thread-safe: any thread may :meth:`request` and :meth:`notify` at once.

    Args:
        argv: the server's command line. env: its whole environment. cwd: its working directory.
        label: how messages name the server (``MCP server 'files'``).
        on_notification: called on a separate thread for each notification (it may make requests).
        on_progress: called on the reader thread for each ``notifications/progress``, before any response that
            follows it is handed over (so a call's progress is never seen after its result); it must not block
            or make requests. ``None``: progress goes to ``on_notification`` like the rest.
    """

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: str,
        label: str,
        on_notification: Callable[[Notification], None],
        on_progress: Callable[[Notification], None] | None = None,
    ) -> None:
        self.label = label
        self._on_notification = on_notification
        self._on_progress = on_progress
        self._pending: dict[int, _Pending] = {}
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._next_id = 1
        self._stderr: deque[bytes] = deque()
        self._stderr_size = 0
        self._stderr_head = b""
        self._stderr_total = 0
        self._garbage = 0
        self._last_garbage = ""
        self._gone: str | None = None
        self.gone = threading.Event()
        try:
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                cwd=cwd,
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            raise ServerGone(f"{label} could not be started ({argv[0]}): {exc.strerror or exc}") from exc
        self.pid = self._proc.pid
        self._pidfd = os.pidfd_open(self.pid)
        #: Held while signalling the process group and while reaping, so a group id is never signalled once its
        #: leader is reaped (and the id could be reused).
        self._reap_lock = threading.Lock()
        self._reaped = False
        self._notify_queue: deque[Notification] = deque()
        self._notify_ready = threading.Condition(self._lock)
        self._threads = [
            threading.Thread(target=self._read_stdout, name=f"mcp-out-{self.pid}", daemon=True),
            threading.Thread(target=self._read_stderr, name=f"mcp-err-{self.pid}", daemon=True),
            threading.Thread(target=self._deliver_notifications, name=f"mcp-note-{self.pid}", daemon=True),
        ]
        for t in self._threads:
            t.start()

    # -- requests ----------------------------------------------------------------------------------------------
    def request(
        self,
        method: str,
        params: dict[str, Any],
        *,
        deadline: float | None,
        cancelled: threading.Event | None = None,
        on_cancel: Callable[[Callable[[], None]], None] | None = None,
    ) -> dict[str, Any]:
        """Send a request and wait for its result until ``deadline`` (``time.monotonic()``) or a cancel.

        ``on_cancel`` registers a callback that wakes the wait (a call's ``ctx.on_cancel``). On a timeout or a
        cancel the server gets ``notifications/cancelled`` for the request. Raises :class:`ServerGone`,
        :class:`ServerTimeout` or :class:`ServerRefused` (a JSON-RPC error answer).
        """
        pending = _Pending()
        with self._lock:
            if self._gone is not None:
                raise ServerGone(self._gone)
            req_id = self._next_id
            self._next_id += 1
            self._pending[req_id] = pending
        try:
            if on_cancel is not None:
                on_cancel(pending.event.set)
            if cancelled is not None and cancelled.is_set():
                raise ServerTimeout(f"{self.label} was not asked: the call was cancelled first")
            self._send({"id": req_id, "method": method, "params": params})
            while not pending.event.is_set():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                pending.event.wait(left)
            response = pending.response
            if response is None:
                if self._gone is not None:
                    raise ServerGone(self._gone)
                why = "was cancelled" if cancelled is not None and cancelled.is_set() else "timed out"
                self.notify("notifications/cancelled", {"requestId": req_id, "reason": f"the call {why}"})
                raise ServerTimeout(self._timeout_message(method))
            if response.malformed is not None:
                raise ServerRefused(f"{self.label} answered {method} with {response.malformed}")
            if response.error is not None:
                err = response.error
                raise ServerRefused(
                    f"{self.label} answered {method} with error {err['code']}: {err['message']}", err["code"]
                )
            assert response.result is not None
            return response.result
        finally:
            with self._lock:
                self._pending.pop(req_id, None)

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        """Send a notification; does nothing once the server is gone."""
        message: dict[str, Any] = {"method": method}
        if params is not None:
            message["params"] = params
        with contextlib.suppress(ServerGone):
            self._send(message)

    def _send(self, message: dict[str, Any]) -> None:
        data = encode(message)
        assert self._proc.stdin is not None
        failed: Exception | None = None
        with self._write_lock:
            try:
                self._proc.stdin.write(data)
                self._proc.stdin.flush()
            except (BrokenPipeError, ValueError, OSError) as exc:
                failed = exc
        if failed is not None:
            raise ServerGone(self._why_gone()) from failed

    def _why_gone(self) -> str:
        """Why a write failed: the server's end as the stdout reader reports it (how it exited, its stderr), waited
        for while the reader reaps it (a server that printed why and exited is usually seen by the write first);
        not waited for on the reader's own thread (a reply to the server's request)."""
        if threading.current_thread() is not self._threads[0]:
            self.gone.wait(_TERM_GRACE_S * 8)
        return self._gone or f"{self.label} closed its stdin"

    def _timeout_message(self, method: str) -> str:
        note = ""
        if self._garbage:
            note = (
                f"; it wrote {self._garbage} line(s) on stdout that are not JSON-RPC messages "
                f"(last: {self._last_garbage})"
            )
        return f"{self.label} gave no answer to {method} in time{note}"

    # -- reading -----------------------------------------------------------------------------------------------
    def _read_stdout(self) -> None:
        assert self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        splitter = LineSplitter()
        try:
            while True:
                try:
                    data = os.read(fd, 65536)
                except InterruptedError:
                    continue
                except OSError:
                    break
                if not data:
                    break
                for line in splitter.feed(data):
                    self._dispatch(line if isinstance(line, Garbage) else parse_line(line))
        finally:
            self._ended()

    def _dispatch(self, msg: Response | Request | Notification | Garbage) -> None:
        if isinstance(msg, Response):
            with self._lock:
                pending = self._pending.get(msg.id)
            if pending is None:
                self._count_garbage(Garbage("a response to no request in flight", str(msg.id)))
                return
            pending.response = msg
            pending.event.set()
        elif isinstance(msg, Request):
            if msg.method == "ping":
                reply = result_reply(msg.id, {})
            else:
                reply = error_reply(
                    msg.id,
                    METHOD_NOT_FOUND,
                    f"{msg.method} is not supported: this client (agents-supervise) offers no "
                    "sampling, roots or elicitation",
                )
            with contextlib.suppress(ServerGone):
                self._send(reply)
        elif isinstance(msg, Notification) and msg.method == "notifications/progress" and self._on_progress:
            self._on_progress(msg)
        elif isinstance(msg, Notification):
            with self._notify_ready:
                self._notify_queue.append(msg)
                self._notify_ready.notify()
        else:
            self._count_garbage(msg)

    def _count_garbage(self, garbage: Garbage) -> None:
        self._garbage += 1
        self._last_garbage = f"{garbage.reason}: {garbage.sample!r}" if garbage.sample else garbage.reason
        print(f"{self.label}: ignored a line on stdout: {self._last_garbage}", file=sys.stderr)

    def _deliver_notifications(self) -> None:
        while True:
            with self._notify_ready:
                while not self._notify_queue and self._gone is None:
                    self._notify_ready.wait()
                if not self._notify_queue:
                    return
                note = self._notify_queue.popleft()
            try:
                self._on_notification(note)
            except Exception as exc:  # a failing handler must not stop later notifications
                print(f"{self.label}: handling {note.method} failed: {exc}", file=sys.stderr)

    def _read_stderr(self) -> None:
        assert self._proc.stderr is not None
        fd = self._proc.stderr.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except InterruptedError:
                continue
            except OSError:
                return
            if not chunk:
                return
            with self._lock:
                if len(self._stderr_head) < _STDERR_HEAD_BYTES:
                    self._stderr_head += chunk[: _STDERR_HEAD_BYTES - len(self._stderr_head)]
                self._stderr.append(chunk)
                self._stderr_size += len(chunk)
                self._stderr_total += len(chunk)
                while self._stderr_size - len(self._stderr[0]) >= _STDERR_TAIL_BYTES:
                    self._stderr_size -= len(self._stderr.popleft())

    def stderr_excerpt(self) -> str:
        """The server's stderr for a message: all of it when short, else its first and last lines."""
        with self._lock:
            head, tail, total = self._stderr_head, b"".join(self._stderr), self._stderr_total
        if total <= _STDERR_HEAD_BYTES + _STDERR_EXCERPT_TAIL:
            return tail.decode("utf-8", "replace").strip()  # the tail buffer still holds all of it
        return (
            head.decode("utf-8", "replace").rstrip()
            + "\n[...]\n"
            + tail[-_STDERR_EXCERPT_TAIL:].decode("utf-8", "replace").strip()
        )

    def _ended(self) -> None:
        """stdout ended: the server exited (or closed it); kill what is left of its process group, reap it, then
        fail everything waiting."""
        if not _wait_readable(self._pidfd, _TERM_GRACE_S):
            self._signal_group(signal.SIGKILL)  # it closed stdout but lives on: it can never answer again
            _wait_readable(self._pidfd, _TERM_GRACE_S * 5)
        with self._reap_lock:
            # The leader is a zombie until wait(): its group id is still its own, so this reaches only its group.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
            code = self._proc.wait()
            self._reaped = True
            os.close(self._pidfd)
        self._threads[1].join(timeout=_TERM_GRACE_S)  # the stderr tail, for the message
        how = f"died of signal {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}"
        if code == -signal.SIGKILL:
            how += " (out of memory, a limit, or stopped by the worker)"
        excerpt = self.stderr_excerpt()
        reason = f"{self.label} {how}" + (f"; its stderr: {excerpt}" if excerpt else "")
        with self._notify_ready:
            self._gone = reason
            pending = list(self._pending.values())
            self._notify_ready.notify_all()
        self.gone.set()
        for p in pending:
            p.event.set()

    @property
    def gone_reason(self) -> str | None:
        """Why the server is gone, or ``None`` while it runs."""
        return self._gone

    # -- stopping ----------------------------------------------------------------------------------------------
    def _signal_group(self, sig: int) -> None:
        with self._reap_lock:
            if not self._reaped:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.pid, sig)

    def close(self) -> None:
        """Stop the server (stdin closed, SIGTERM to its process group, SIGKILL after a grace) and wait until the
        reader saw it go. Safe to call twice and after the server died by itself."""
        if not self.gone.is_set():
            with contextlib.suppress(OSError, ValueError), self._write_lock:
                assert self._proc.stdin is not None
                self._proc.stdin.close()
            self._signal_group(signal.SIGTERM)
            if not self.gone.wait(_TERM_GRACE_S):
                self._signal_group(signal.SIGKILL)
                self.gone.wait(_TERM_GRACE_S * 5)
        for stream in (self._proc.stdin, self._proc.stdout, self._proc.stderr):
            with contextlib.suppress(OSError, ValueError):
                if stream is not None:
                    stream.close()


def _wait_readable(fd: int, timeout_s: float) -> bool:
    """Whether ``fd`` (a pidfd: the process exited) becomes readable within ``timeout_s``."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(timeout_s * 1000))
