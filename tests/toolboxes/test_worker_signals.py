"""The worker loop (``toolboxes._worker.main``, unconfined here: the loop is the same Python in a confined worker)
ends at SIGTERM whichever of its threads the kernel gives the signal to: a process-directed signal may be taken by
any thread that does not block it, and Python runs the handler only on the main thread. Before the fix, a SIGTERM
taken by a call's thread was handled only when the main thread next woke: the worker went on, and the call it should
have ended ran to its end and was reported as passed (tests/supervisor/test_reload.py's crash loop, 1-2 runs in 3).
Here the signal is sent to one thread (``tgkill``), so the case that was left to chance happens every time."""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from labkit import describe_json, write_script
from toolboxes import FrameDecoder, encode

REPO = str(Path(__file__).resolve().parents[2])
WAIT_S = 30
_SYS_TGKILL = 234  # x86-64
_LIBC = ctypes.CDLL(None, use_errno=True)
_MAIN = "import json, sys; from toolboxes._worker import main; main(json.loads(sys.argv[1]))"


def _tgkill(pid: int, tid: int, sig: int) -> None:
    if _LIBC.syscall(_SYS_TGKILL, pid, tid, sig) != 0:
        raise OSError(ctypes.get_errno(), "tgkill")


class _Worker:
    """A worker loop serving one bash toolbox over pipes, in a process of its own."""

    def __init__(self, tools: Path, work: Path) -> None:
        payload = {
            "kind": "bash",
            "name": "bash",
            "workdir": str(work),
            "state_dir": str(work),
            "config": {"tag": "FileSystemDirectory", "contents": {"Path": str(tools)}, "policy": {}},
        }
        self.process = subprocess.Popen(
            [sys.executable, "-c", _MAIN, json.dumps(payload)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": REPO},
        )
        self.decoder = FrameDecoder("to_supervisor")
        self.frames: list[dict[str, Any]] = []

    def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(encode(message))
        self.process.stdin.flush()

    def next_frame(self) -> dict[str, Any] | None:
        """The next frame the worker sends (``None``: it closed its end), within :data:`WAIT_S`."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        deadline = time.monotonic() + WAIT_S
        while not self.frames:
            readable, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            assert readable, f"the worker sent nothing within {WAIT_S} s"
            data = os.read(fd, 65536)
            if not data:
                return None
            self.frames.extend(self.decoder.feed(data))
        return self.frames.pop(0)

    def close(self) -> None:
        """Kill the worker if it still runs, reap it, close the pipes."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()

    def children(self) -> list[int]:
        found: list[int] = []
        for tid in os.listdir(f"/proc/{self.process.pid}/task"):
            with open(f"/proc/{self.process.pid}/task/{tid}/children") as f:
                found += [int(pid) for pid in f.read().split()]
        return found


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in {"Z", "X"}
    except FileNotFoundError:
        return True


def test_a_sigterm_taken_by_a_call_thread_ends_the_worker_at_once(sandbox_tmp: Path) -> None:
    """A call runs ``sleep 600``; SIGTERM goes to a thread other than the main one. The worker ends within
    :data:`WAIT_S` (not after 600 s), the call answered as cancelled if at all (never passed), its script killed."""
    tools, work = sandbox_tmp / "tools", sandbox_tmp / "work"
    tools.mkdir()
    work.mkdir()
    write_script(tools, "slow.sh", describe_json("slow"), "sleep 600")
    worker = _Worker(tools, work)
    try:
        hello = worker.next_frame()
        assert hello is not None and hello["t"] == "hello", hello
        [tool] = [t["name"] for t in hello["tools"]]
        worker.send({"t": "call", "id": 1, "tool": tool, "args": {}, "ctx": {}})
        deadline = time.monotonic() + WAIT_S
        while not (scripts := worker.children()):  # the script runs (the worker's state: polled)
            assert time.monotonic() < deadline, "the script did not start"
            time.sleep(0.02)
        threads = [int(t) for t in os.listdir(f"/proc/{worker.process.pid}/task") if int(t) != worker.process.pid]
        assert threads, "the worker has no thread but its main one"
        _tgkill(worker.process.pid, threads[0], signal.SIGTERM)
        answers = []
        while (frame := worker.next_frame()) is not None:
            answers.append(frame)
        assert worker.process.wait(WAIT_S) == 0
        assert all(a["t"] == "result" and a["result"]["status"] == "error" for a in answers), answers
        assert all(_gone(pid) for pid in scripts), "the call's script outlived its worker"
    finally:
        worker.close()


def test_a_worker_told_to_shut_down_or_given_eof_ends_by_itself(sandbox_tmp: Path) -> None:
    """Without a signal: the supervisor may not be able to send one (no ``CAP_KILL`` under the systemd unit, the
    worker runs as another uid), so the end of serving must end the worker. Before the fix the main thread could read
    the end's wake-up byte before serving said it had stopped, and waited forever (test_deploy's bounding-set test:
    every stop became a SIGTERM, refused with EPERM). Ten workers each way, none signalled."""
    tools, work = sandbox_tmp / "tools", sandbox_tmp / "work"
    tools.mkdir()
    work.mkdir()
    write_script(tools, "hi.sh", describe_json("hi"), "echo hi")
    for way in ("shutdown", "eof") * 10:
        worker = _Worker(tools, work)
        try:
            hello = worker.next_frame()
            assert hello is not None and hello["t"] == "hello", hello
            if way == "shutdown":
                worker.send({"t": "shutdown"})
            else:
                assert worker.process.stdin is not None
                worker.process.stdin.close()
            assert worker.next_frame() is None
            assert worker.process.wait(WAIT_S) == 0, way
        finally:
            worker.close()
