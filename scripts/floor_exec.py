#!/opt/agents-supervise/venv/bin/python
"""Floor of the bash row of ``scripts/bench`` (row 6): a fork/exec of the tool's script by a Python process reached
over one pipe hop.

:class:`ExecHop` starts the exec server (``floor_exec.py serve``: a Python process reading msgpack frames
``{"id", "argv"}`` on stdin, running each ``argv`` to completion with ``subprocess.run`` and its output captured, and
answering ``{"id", "out", "rc"}``) and :meth:`ExecHop.run` sends one frame and waits for the answer, blocking (as
``scripts/bench_bash.py`` times its other ways). Compared with direct fork/exec it adds what any design with the
script run by another process must pay: two pipe writes and reads, one frame decoded and encoded on each side, the
wake-ups of the second process. Nothing is confined, checked or recorded.

Usage: ``floor_exec.py SCRIPT [ARGS...]`` prints the p50 of 200 runs through the hop and of 200 direct runs.
"""

from __future__ import annotations

import itertools
import os
import statistics
import subprocess
import sys
import time

import msgpack

__all__ = ["ExecHop", "serve"]


def serve() -> None:
    """The exec server's loop (see the module docstring)."""
    unpacker = msgpack.Unpacker()
    while data := os.read(0, 65536):
        unpacker.feed(data)
        for frame in unpacker:
            done = subprocess.run(frame["argv"], capture_output=True, check=False)
            os.write(1, msgpack.packb({"id": frame["id"], "out": done.stdout, "rc": done.returncode}))


class ExecHop:
    """The exec server and the blocking client side of its pipes."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self._out, self._in = self.process.stdin.fileno(), self.process.stdout.fileno()
        self._ids = itertools.count(1)
        self._unpacker = msgpack.Unpacker()

    def run(self, argv: list[str]) -> bytes:
        """Run ``argv`` in the exec server; its standard output. Raises ``RuntimeError`` when it failed."""
        n = next(self._ids)
        os.write(self._out, msgpack.packb({"id": n, "argv": argv}))
        while True:
            for frame in self._unpacker:
                if frame["id"] != n or frame["rc"] != 0:
                    raise RuntimeError(f"the exec server answered {frame!r} to request {n}")
                return frame["out"]
            data = os.read(self._in, 65536)
            if not data:
                raise RuntimeError("the exec server exited")
            self._unpacker.feed(data)

    def close(self) -> None:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.close()
        self.process.wait()
        self.process.stdout.close()


def main() -> None:
    if sys.argv[1:2] == ["serve"]:
        serve()
        return
    argv = sys.argv[1:]
    hop = ExecHop()
    through, direct = [], []
    try:
        for _ in range(200):
            t = time.perf_counter()
            hop.run(argv)
            through.append(time.perf_counter() - t)
            t = time.perf_counter()
            subprocess.run(argv, capture_output=True, check=True)
            direct.append(time.perf_counter() - t)
    finally:
        hop.close()
    print(
        f"fork/exec over one pipe hop: p50 {statistics.median(through) * 1e3:.2f} ms; "
        f"direct: {statistics.median(direct) * 1e3:.2f} ms"
    )


if __name__ == "__main__":
    main()
