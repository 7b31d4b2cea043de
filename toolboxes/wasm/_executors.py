"""The WASM toolbox's executor processes (:mod:`._executor`): where its calls run, and how a call that outlives its
time limit is stopped whatever the component is doing.

:class:`ExecutorPool` keeps up to ``size`` executors: the first ones forked from the worker while it opens the
toolbox (:mod:`._executor_fork`), the others started on demand (``python -I -B`` running :func:`._executor.main`,
stdin and stdout on pipes, the worker's stderr, no other fd, an environment of its own).
:meth:`ExecutorPool.request` takes an idle executor (or starts one), sends the request (with the serialized
component the first time that executor needs it) and waits for the answer until the deadline; at the deadline, or
when the call is cancelled, or if the executor dies, it kills the process (``SIGKILL``, then reaps it), forgets it
and raises :class:`ExecutorStopped` with the reason. A stopped executor is replaced at once on a thread of its own,
so the next call finds one ready: a call never waits for another call's stuck component, nor for its replacement
when a spare is there. At most ``size`` executors exist (the worker's ``max_concurrent_calls`` plus one for the
load checks of a refresh running beside calls).

An executor is a child of the worker: it runs as the worker's uid, inside its Landlock domain, under its seccomp
filter, in its namespaces and cgroup (processes, memory and CPU count against the worker's limits), and it dies with
the worker's PID namespace. Its environment is only ``TOKIO_WORKER_THREADS=1`` (wasmtime's WASI runs its host calls
on a tokio runtime that would start a thread per CPU in every executor) and ``LANG``: the component's own
environment is sent in the setup, never inherited.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ._executor_fork import ForkedProcess, fork_executors
from ._executor_wire import FrameReader, PeerGone, WaitEnded, write_frame

if TYPE_CHECKING:
    from ._call import Preopen
    from ._file_size import FileSizeLimit

__all__ = ["START_TIMEOUT_S", "ExecutorPool", "ExecutorSetup", "ExecutorStopped"]

#: How long a new executor may take to start and answer its setup.
START_TIMEOUT_S = 30.0
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_BOOTSTRAP = f"import sys; sys.path.insert(0, {_ROOT!r}); from toolboxes.wasm._executor import main; main()"


class ExecutorStopped(Exception):
    """A request did not get its answer: ``reason`` is ``"deadline"`` (the executor was killed at the deadline),
    ``"cancelled"`` (killed because the call was cancelled), ``"died"`` (the process ended or broke its pipe), or
    ``"unavailable"`` (no executor could be started: ``detail`` says why)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class ExecutorSetup:
    """What every executor of one toolbox is started with (the engine's settings must be the compile cache's)."""

    max_memory_bytes: int
    copy_on_write: bool
    file_size: FileSizeLimit | None
    preopens: tuple[Preopen, ...]
    env: tuple[tuple[str, str], ...]
    network: bool

    def to_wire(self) -> dict[str, Any]:
        return {
            "t": "setup",
            "max_memory": self.max_memory_bytes,
            "copy_on_write": self.copy_on_write,
            "file_size": [self.file_size.bytes, self.file_size.key] if self.file_size is not None else None,
            "preopens": [[p.path, p.mutable] for p in self.preopens],
            "env": [list(pair) for pair in self.env],
            "network": self.network,
        }


class _Executor:
    """One executor process and the components it holds: ``forked`` (:mod:`._executor_fork`) or a new exec."""

    def __init__(self, setup: ExecutorSetup, forked: ForkedProcess | None = None) -> None:
        env = {"TOKIO_WORKER_THREADS": "1", "LANG": os.environ.get("LANG", "C.UTF-8")}
        self.proc: subprocess.Popen[bytes] | ForkedProcess = forked or subprocess.Popen(
            [sys.executable, "-I", "-B", "-c", _BOOTSTRAP],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            close_fds=True,
        )
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self._in = self.proc.stdin.fileno()
        self._reader = FrameReader(self.proc.stdout.fileno())
        self.keys: set[str] = set()
        try:
            write_frame(self._in, setup.to_wire())
            answer = self._reader.read(time.monotonic() + START_TIMEOUT_S)
        except (OSError, PeerGone, WaitEnded) as exc:
            self.release()
            raise ExecutorStopped("unavailable", f"the executor process did not start: {exc}") from exc
        if "error" in answer:
            self.release()
            raise ExecutorStopped("unavailable", str(answer["error"]))

    def request(
        self, message: dict[str, Any], compiled: bytes, deadline: float | None, cancelled: threading.Event | None
    ) -> dict[str, Any]:
        key = str(message["key"])
        frame = message if key in self.keys else {**message, "compiled": compiled}
        try:
            write_frame(self._in, frame)
            self.keys.add(key)
            return self._reader.read(deadline, cancelled)
        except WaitEnded as exc:
            raise ExecutorStopped(exc.reason) from None
        except (OSError, PeerGone) as exc:
            code = self.proc.poll()
            raise ExecutorStopped("died", f"{exc}" + (f" (exit status {code})" if code is not None else "")) from None

    def kill(self) -> None:
        """Kill and reap the process; safe to call twice and from another thread than the one waiting for it
        (which then sees the end of its pipe)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def release(self) -> None:
        """Kill it and close its pipes (only the thread that owns it: the pipes must not close under a reader)."""
        self.kill()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


class ExecutorPool:
    """Up to ``size`` executors started with ``setup`` (see the module docstring). Thread-safe. ``prefork``: how
    many to fork from this process at once, while it runs one thread (:mod:`._executor_fork`: they start in
    milliseconds); the others are exec'd when needed."""

    def __init__(self, setup: ExecutorSetup, size: int, prefork: int = 0) -> None:
        self._setup = setup
        self._forked = fork_executors(min(prefork, max(1, size)))
        self._size = max(1, size)
        self._cond = threading.Condition()
        self._idle: list[_Executor] = []
        self._alive: set[_Executor] = set()
        self._count = 0  # executors alive or being started
        self._starting = 0  # spares being started (counted in _count too)
        self._waiting = 0  # requests waiting for one of those
        self._closed = False

    def request(
        self,
        message: dict[str, Any],
        compiled: bytes,
        timeout_s: float | None = None,
        cancelled: threading.Event | None = None,
    ) -> dict[str, Any]:
        """Send ``message`` (with ``key``, the component's digest) to an executor and return its answer.
        ``timeout_s`` (counted once an executor is ready) and ``cancelled`` bound the wait for the answer.
        Raises :class:`ExecutorStopped`."""
        executor = self._take()
        deadline = time.monotonic() + timeout_s if timeout_s is not None else None
        try:
            answer = executor.request(message, compiled, deadline, cancelled)
        except BaseException:
            self._discard(executor)
            raise
        self._give_back(executor)
        return answer

    def _take(self) -> _Executor:
        """An idle executor (a spare is then started if none is left idle), else a spare being started when no
        other request waits for it, else a new one while the pool has room, else the first one given back."""
        executor: _Executor | None = None
        last = False
        with self._cond:
            while True:
                if self._closed:
                    raise ExecutorStopped("unavailable", "the toolbox is closing")
                if self._idle:
                    executor = self._idle.pop()
                    last = not self._idle
                    break
                if self._starting > self._waiting:
                    self._waiting += 1  # a spare is on its way and nobody else waits for it: sooner than a start
                    try:
                        self._cond.wait()
                    finally:
                        self._waiting -= 1
                    continue
                if self._count < self._size:
                    self._count += 1
                    break
                self._cond.wait()
        if executor is not None:
            if last:
                self.warm()  # the next call, or this one's replacement if it must be killed, finds one ready
            return executor
        try:
            executor = _Executor(self._setup, self._pop_forked())
        except ExecutorStopped:
            with self._cond:
                self._count -= 1
                self._cond.notify_all()
            raise
        with self._cond:
            self._alive.add(executor)
        return executor

    def _give_back(self, executor: _Executor) -> None:
        with self._cond:
            if not self._closed:
                self._idle.append(executor)
                self._cond.notify_all()
                return
        executor.release()
        with self._cond:
            self._count -= 1
            self._alive.discard(executor)

    def _discard(self, executor: _Executor) -> None:
        """Kill ``executor``, and start a spare on a thread of its own when none is idle."""
        executor.release()
        with self._cond:
            self._count -= 1
            self._alive.discard(executor)
            self._cond.notify_all()
        self.warm()

    def warm(self) -> None:
        """Start one spare in the background when none is idle or already starting and the pool has room (returns
        at once)."""
        with self._cond:
            if self._closed or self._idle or self._starting or self._count >= self._size:
                return
            self._count += 1
            self._starting += 1
        threading.Thread(target=self._start_spare, name="wasm-executor-start", daemon=True).start()

    def _pop_forked(self) -> ForkedProcess | None:
        with self._cond:
            return self._forked.pop() if self._forked else None

    def _start_spare(self) -> None:
        try:
            executor = _Executor(self._setup, self._pop_forked())
        except ExecutorStopped:
            with self._cond:
                self._count -= 1
                self._starting -= 1
                self._cond.notify_all()
            return  # a request then starts one itself and reports why it cannot
        with self._cond:
            self._starting -= 1
            if not self._closed:
                self._alive.add(executor)
                self._idle.append(executor)
                self._cond.notify_all()
                return
            self._count -= 1
        executor.release()

    def idle(self) -> int:
        """How many executors wait for a request (for tests)."""
        with self._cond:
            return len(self._idle)

    def close(self) -> None:
        """Kill every executor, busy ones included (their requests end as ``died``), and refuse new requests.
        Safe to call twice."""
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            unused, self._forked = self._forked, []
            busy = [e for e in self._alive if e not in idle]
            self._alive.clear()
            self._cond.notify_all()
        for executor in idle:
            executor.release()
        for executor in busy:
            executor.kill()
        for process in unused:
            process.kill()
            process.wait()
            process.stdin.close()
            process.stdout.close()
