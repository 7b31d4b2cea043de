"""The supervisor's side of one zygote (``sandbox._zygote``): start it, ask it for children, hear their exits.

:class:`Zygote` is one zygote process and its ``SOCK_SEQPACKET`` socket (messages: ``sandbox._zygote_wire``). It
is started by :meth:`Zygote.start` (spawned from the trio thread like a worker's launcher, so its parent-death
signal fires only when the supervisor ends; then ``preload`` and the wait for ``ready``), and its reader,
:meth:`Zygote.serve`, runs until the zygote's socket closes. :meth:`Zygote.spawn` sends the child's fds and returns
a :class:`ZygoteChild`, a :class:`~supervisor.workers._spawn.PidfdChild` as a launcher's child is: trio streams on
its pipes, ``wait``, ``poll``, ``returncode``, ``send_signal``, ``aclose`` (SIGTERM, grace, SIGKILL) and ``kill``.
Its exit is seen on a pidfd the zygote opened for it (the supervisor is not its parent, so it cannot reap it); its
status is the one the zygote reports when it reaped it. A child whose zygote died without reporting it was killed
with the zygote (its parent-death signal): its status is ``-SIGKILL``.
"""

from __future__ import annotations

import array
import os
import signal
import socket
from typing import TYPE_CHECKING, Any

import trio

from sandbox import MAX_MESSAGE, ZygoteWireError, decode_message, encode_message

from ._exit_status import describe_exit
from ._spawn import ChildProcess, PidfdChild, spawn_child

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ["Zygote", "ZygoteChild", "ZygoteGone", "zygote_argv"]

#: how long a zygote may take from its spawn to ``ready`` (imports on a loaded machine)
START_TIMEOUT_S = 30.0
#: how long after a child's exit its status may take to be reported before it is presumed (``-SIGKILL``)
REPORT_TIMEOUT_S = 5.0
#: how long a spawn request may wait for its answer before the zygote counts as hung (and is killed)
SPAWN_TIMEOUT_S = 10.0


class ZygoteGone(Exception):
    """The zygote cannot serve a spawn: it never started, it died, or it is hung. The message says which."""


def zygote_argv(python: str, code_root: str, sock_fd: int) -> list[str]:
    """The command that starts the zygote with its socket on ``sock_fd``: the launcher's command
    (``_launch.launcher_argv``) with ``sandbox._zygote.main`` for ``sandbox._launcher.main``."""
    boot = f"import sys; sys.path.insert(0, {code_root!r}); from sandbox._zygote import main; main({int(sock_fd)})"
    return [python, "-I", "-B", "-c", boot]


class _ChildRecord:
    """What the reader learns of one child: its exit status (``None`` until reported or presumed)."""

    __slots__ = ("exited", "status")

    def __init__(self) -> None:
        self.status: int | None = None
        self.exited = trio.Event()


class _Request:
    __slots__ = ("answer", "done", "pidfd", "record")

    def __init__(self) -> None:
        self.answer: dict[str, Any] | None = None
        self.pidfd: int | None = None
        #: the child's record, kept here too: its exit may be reported (and the record dropped from the zygote's
        #: table) before the spawning task runs again
        self.record: _ChildRecord | None = None
        self.done = trio.Event()


class ZygoteChild(PidfdChild):
    """A process the zygote forked for the supervisor; the zygote reaps it and reports its status."""

    def __init__(self, pid: int, pidfd: int, stdin: int, stdout: int, stderr: int, record: _ChildRecord) -> None:
        super().__init__(pid, pidfd, stdin, stdout, stderr)
        self._record = record

    async def wait(self) -> int:
        """Wait for the child to exit and its status to be known; a checkpoint, cancellation leaves it running."""
        async with self._wait_lock:
            if self.returncode is None:
                await trio.lowlevel.wait_readable(self._pidfd)
                # The zygote reaps at once and reports; if it died (or hangs) the status is presumed: the child was
                # killed with it (its parent-death signal).
                with trio.move_on_after(REPORT_TIMEOUT_S):
                    await self._record.exited.wait()
                self.returncode = self._record.status if self._record.status is not None else -signal.SIGKILL
        return self.returncode

    def poll(self) -> int | None:
        if self.returncode is None and self._record.exited.is_set() and self._record.status is not None:
            self.returncode = self._record.status
        return self.returncode


class Zygote:
    """One zygote process: its start, its reader, its spawn requests, its children's exits."""

    def __init__(self, python: str, code_root: str, *, env: Mapping[str, str], cwd: str = "/") -> None:
        self.python = python
        self.code_root = code_root
        self.env = dict(env)
        self.cwd = cwd
        self.pid: int | None = None
        self.proc: ChildProcess | None = None
        #: when :meth:`launch` spawned it (trio's clock)
        self.launched_at = 0.0
        self._preload: bytes | None = None  # the preload request, while it waits to be sent
        self.dead = trio.Event()
        self.death_reason = "has not started"
        self.failed_imports: dict[str, str] = {}
        self._sock: trio.socket.SocketType | None = None
        self._next_id = 1
        self._requests: dict[int, _Request] = {}
        self._children: dict[int, _ChildRecord] = {}
        self._stderr_tail = b""
        self._stderr_done = trio.Event()
        self._stderr_reader_started = False

    async def start(self, modules: Sequence[str], timeout_s: float = START_TIMEOUT_S) -> None:
        """Spawn the zygote, have it import ``modules`` and wait for ``ready``. Raises :class:`ZygoteGone` (why)."""
        self.launch(modules)
        await self.wait_ready(timeout_s)

    def launch(self, modules: Sequence[str]) -> None:
        """The first half of :meth:`start`, without waiting: spawn the zygote and ask it to import ``modules``; it
        imports while the caller does other work (the supervisor compiles its policy meanwhile), then
        :meth:`wait_ready` waits for its answer. Called from the trio thread (the zygote's parent-death signal is
        that thread's). Raises :class:`ZygoteGone` when it cannot be spawned."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            argv = zygote_argv(self.python, self.code_root, theirs.fileno())
            self.proc = spawn_child(argv, env=self.env, cwd=self.cwd, pass_fds=(theirs.fileno(),))
        except OSError as exc:
            ours.close()
            self._die(f"could not be started: {exc}")
            raise ZygoteGone(self.death_reason) from exc
        finally:
            theirs.close()
        self.pid = self.proc.pid
        self.launched_at = trio.current_time()
        self.proc.stdin.close()  # the zygote reads nothing on stdin
        self._sock = trio.socket.from_stdlib_socket(ours)  # non-blocking from here on
        self._preload = encode_message({"t": "preload", "modules": list(modules)})
        try:  # one small message on a fresh pair: the socket's buffer takes it now
            ours.send(self._preload)
            self._preload = None
        except BlockingIOError:
            pass  # (it never is full) wait_ready sends it
        except OSError:
            self._preload = None  # the zygote is gone already: wait_ready says how

    async def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Wait (up to ``timeout_s`` after :meth:`launch`) for the launched zygote's ``ready``. Raises
        :class:`ZygoteGone` (why) when it does not come: the zygote is killed then."""
        if self._sock is None:
            raise ZygoteGone(self.death_reason)
        answer: dict[str, Any] | None = None
        with trio.move_on_at(self.launched_at + timeout_s):
            try:
                if self._preload is not None:
                    await self._sock.send(self._preload)
                    self._preload = None
                answer, fds = await self._receive()
                _close_all(fds)
            except (OSError, ZygoteWireError):
                answer = None
        if answer is None or answer.get("t") != "ready":
            why = await self._exit_detail() if answer is None else f"answered {answer.get('t')!r}, not ready"
            await self._kill_process()
            self._die(why)
            raise ZygoteGone(why)
        failed = answer.get("failed")
        self.failed_imports = dict(failed) if isinstance(failed, dict) else {}

    async def _receive(self) -> tuple[dict[str, Any] | None, list[int]]:
        assert self._sock is not None
        data, ancdata, flags, _ = await self._sock.recvmsg(
            MAX_MESSAGE, socket.CMSG_SPACE(array.array("i").itemsize * 4), socket.MSG_CMSG_CLOEXEC
        )
        fds = array.array("i")
        for level, kind, cdata in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(cdata[: len(cdata) - (len(cdata) % fds.itemsize)])
        if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
            _close_all(list(fds))
            raise ZygoteWireError("the zygote's message was cut short")
        if not data and not fds:
            return None, []
        return decode_message(data), list(fds)

    async def serve(self) -> None:
        """Read the zygote's answers and exit reports until its socket closes; then it is :attr:`dead`. Its stderr
        is read meanwhile (the last lines kept for the death's reason), so the zygote never blocks on a full pipe."""
        why = "closed its socket"
        async with trio.open_nursery() as nursery:
            self._stderr_reader_started = True
            nursery.start_soon(self._read_stderr)
            try:
                while True:
                    message, fds = await self._receive()
                    if message is None:
                        break
                    self._dispatch(message, fds)
            except (OSError, ZygoteWireError, trio.ClosedResourceError) as exc:
                why = f"broke its socket ({type(exc).__name__}: {exc})"
            # (a cancelled reader leaves the zygote to aclose())
            with trio.CancelScope(shield=True):
                if not self.dead.is_set():
                    detail = await self._exit_detail()
                    await self._kill_process()
                    self._die(detail or why)
            nursery.cancel_scope.cancel()

    async def _read_stderr(self) -> None:
        assert self.proc is not None
        try:
            while chunk := await self.proc.stderr.receive_some(65536):
                self._stderr_tail = (self._stderr_tail + chunk)[-4096:]
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        self._stderr_done.set()

    def _dispatch(self, message: dict[str, Any], fds: list[int]) -> None:
        kind = message.get("t")
        if kind == "exit":
            _close_all(fds)
            pid, status = message.get("pid"), message.get("status")
            record = self._children.pop(pid, None) if isinstance(pid, int) else None
            if record is not None and isinstance(status, int):
                record.status = status
                record.exited.set()
            return
        request_id = message.get("id")
        request = self._requests.pop(request_id, None) if isinstance(request_id, int) else None
        if request is None or kind not in ("spawned", "refused"):
            _close_all(fds)
            return
        if kind == "spawned" and isinstance(message.get("pid"), int) and len(fds) == 1:
            request.record = self._children[message["pid"]] = _ChildRecord()
            request.pidfd = fds[0]
        else:
            _close_all(fds)
        request.answer = message
        request.done.set()

    async def spawn(
        self, fds: Sequence[tuple[int, int]], *, new_pidns: bool = False, cgroup_procs: Sequence[int] = ()
    ) -> tuple[int, int, _ChildRecord]:
        """Fork a child with each ``(fd, target)`` of ``fds`` at ``target``, with ``new_pidns`` as PID 1 of a new PID
        namespace (a zygote that is not root cannot: the child's launcher code then forks for it), joining the cgroup
        whose ``cgroup.procs`` files ``cgroup_procs`` are open before anything else; return its pid, a pidfd and its
        record.

        Raises :class:`ZygoteGone` when the zygote is dead, hung (no answer in :data:`SPAWN_TIMEOUT_S`: it is
        killed) or refused (``OSError`` of the fork). The caller still owns the fds it passed."""
        if self.dead.is_set() or self._sock is None:
            raise ZygoteGone(self.death_reason)
        request_id, self._next_id = self._next_id, self._next_id + 1
        request = _Request()
        self._requests[request_id] = request
        message = encode_message(
            {
                "t": "spawn",
                "id": request_id,
                "fds": [target for _, target in fds],
                "pidns": new_pidns,
                "cgroup": len(cgroup_procs),
            }
        )
        sent = array.array("i", [*(fd for fd, _ in fds), *cgroup_procs])
        try:
            with trio.move_on_after(SPAWN_TIMEOUT_S) as scope:
                await self._sock.sendmsg([message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, sent)])
                await request.done.wait()  # set by the answer, or by the zygote's death
        except (OSError, trio.ClosedResourceError) as exc:
            self._requests.pop(request_id, None)
            raise ZygoteGone(f"could not be asked for a child ({exc})") from exc
        if scope.cancelled_caught:
            self._requests.pop(request_id, None)
            await self._kill_process()
            raise ZygoteGone(f"did not answer a spawn request within {SPAWN_TIMEOUT_S:g} s and was killed")
        answer = request.answer
        if answer is None:
            raise ZygoteGone(self.death_reason)
        if answer.get("t") != "spawned" or request.pidfd is None or request.record is None:
            raise ZygoteGone(f"refused to fork: {answer.get('error', '?')}")
        return answer["pid"], request.pidfd, request.record

    async def _exit_detail(self) -> str:
        """How the zygote process ended and the last line it wrote (waits at most 2 s for it to end)."""
        if self.proc is None:
            return ""
        code: int | None = None
        with trio.move_on_after(2):
            code = await self.proc.wait()
        with trio.move_on_after(0.5):
            if self._stderr_reader_started:
                await self._stderr_done.wait()
            else:  # before serve(): read what it wrote ourselves
                await self._read_stderr()
        lines = self._stderr_tail.decode("utf-8", "replace").strip().splitlines()
        status = "closed its socket while still running" if code is None else describe_exit(code)
        return status + (f": {lines[-1][:500]}" if lines else "")

    async def _kill_process(self) -> None:
        if self.proc is not None:
            await self.proc.kill()

    def _die(self, reason: str) -> None:
        """Mark the zygote dead: pending requests fail, children without a report count as killed with it."""
        self.death_reason = reason
        if self._sock is not None:
            self._sock.close()
        for request in self._requests.values():
            request.done.set()
        self._requests.clear()
        for record in self._children.values():
            record.exited.set()
        self._children.clear()
        self.dead.set()

    async def aclose(self) -> None:
        """Close the socket (the zygote exits, and every child it still has dies with it) and reap it."""
        with trio.CancelScope(shield=True):
            if self._sock is not None:
                self._sock.close()
            if self.proc is not None:
                with trio.move_on_after(2):
                    await self.proc.wait()
                await self.proc.aclose(grace_s=0.5)
            if not self.dead.is_set():
                self._die("was stopped")


def _close_all(fds: Sequence[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
