#!/opt/agents-supervise/venv/bin/python
"""Where a trivial call's CPU goes on our side (``scripts/bench --profile``): the MCP stdio frontend is started,
warmed, and py-spy attaches to it and its children (``--subprocesses``; ``--gil``: only the thread holding the GIL
is sampled, so the samples are time spent running Python code, not waiting or in system calls) while the raw client
of rows 1-2 makes ``calls`` calls sequentially and ``calls`` with 16 in flight. The samples are summed by process
and function (:func:`summarize`, pure: tested apart) into a markdown table: per process the functions with the
most samples of their own (self) and the functions of our code with the most samples under them (inclusive).

Usage: ``bench_profile.py [--calls N] [--out FILE]`` prints the table (and keeps py-spy's collapsed stacks in
``FILE``).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import trio

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO))

import bench_mcp  # noqa: E402
from _bench_common import bench_folder  # noqa: E402

__all__ = ["profile", "summarize"]

PY_SPY = str(Path(sys.executable).with_name("py-spy"))
_PROCESS = re.compile(r'^process \d+:"(?P<cmd>.*)"$')
_LINE = re.compile(r" \(([^()]*):\d+\)$")
RATE = 500
_FORMAT = ("--rate", str(RATE), "--format", "raw")
#: a frame of our own code (for the inclusive half of the table)
_OURS = re.compile(r"\((supervisor|toolboxes|sandbox)/")


def _process_name(cmd: str) -> str:
    if " -m supervisor" in cmd:
        return "supervisor"
    if "sandbox._zygote" in cmd or "sandbox._launcher" in cmd:
        return "worker (forked by the zygote)"
    return cmd[:60] or "?"


def _frames(stack: str) -> tuple[str, list[str]]:
    """The process a collapsed stack was sampled in (the last ``process N:"cmd"`` frame: children come after their
    parents) and its frames below that. A command may hold ``;`` (``-c "import sys; ..."``): its pieces are joined
    back up to the closing quote."""
    pieces = stack.split(";")
    frames: list[str] = []
    process = "?"
    i = 0
    while i < len(pieces):
        piece = pieces[i]
        if piece.startswith("process ") and ':"' in piece:
            while not piece.endswith('"') and i + 1 < len(pieces):
                i += 1
                piece += ";" + pieces[i]
            match = _PROCESS.match(piece)
            process = _process_name(match["cmd"]) if match else piece[:60]
            frames = []
        elif not piece.startswith("thread "):
            frames.append(piece)
        i += 1
    return process, frames


def _function(frame: str) -> str:
    """``name (file.py:12)`` -> ``name (file.py)``: samples of one function summed over its lines."""
    return _LINE.sub(r" (\1)", frame.strip())


def summarize(collapsed: str, top: int = 8, calls: int = 0, rate: int = 0) -> str:
    """py-spy's collapsed stacks (``frame;frame;... count`` a line, the first frame ``process N:"cmd"`` with
    ``--subprocesses``) as a markdown table: per process, its share of all samples, then its ``top`` functions by
    self samples and the ``top`` functions of our own code (``supervisor/``, ``toolboxes/``, ``sandbox/``) by
    inclusive samples, each as a share of that process's samples. With the ``calls`` made while sampling at ``rate``
    samples a second, each process's samples are also shown as time running Python per call (about: py-spy falls
    behind its rate on a busy machine)."""
    own: dict[str, Counter[str]] = {}
    under: dict[str, Counter[str]] = {}
    totals: Counter[str] = Counter()
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        process, frames = _frames(stack)
        if not frames:
            continue
        n = int(count)
        totals[process] += n
        own.setdefault(process, Counter())[_function(frames[-1])] += n
        for name in {_function(f) for f in frames}:
            under.setdefault(process, Counter())[name] += n
    everything = sum(totals.values())
    if not everything:
        return "No samples (py-spy recorded nothing)."
    lines = ["| process | share of all samples | function | self | inclusive |", "|---|---|---|---|---|"]
    for process, total in totals.most_common():
        shown = [name for name, _ in own[process].most_common(top)]
        ours = [name for name, _ in under[process].most_common() if _OURS.search(name) and name not in shown]
        shown += ours[:top]
        for i, name in enumerate(shown):
            per_call = f" ({1e6 * total / rate / calls:.0f} us a call)" if calls and rate else ""
            head = f"{process} | {100 * total / everything:.0f} %{per_call}" if i == 0 else " | "
            lines.append(
                f"| {head} | `{name}` | {100 * own[process][name] / total:.1f} % "
                f"| {100 * under[process][name] / total:.1f} % |"
            )
    return "\n".join(lines)


async def _drive(calls: int, out: Path) -> None:
    policy = bench_mcp.mcp_policy(bench_folder())
    argv = [sys.executable, "-m", "supervisor", "--policy", str(policy)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    pids: list[int] = []
    async with bench_mcp.raw_caller(argv, env, "system_system_date", pids) as call:
        for _ in range(200):  # warm, before py-spy attaches: the start is not what is profiled
            await call()
        spy = await trio.lowlevel.open_process(
            [PY_SPY, "record", "--pid", str(pids[0]), "--subprocesses", "--gil", *_FORMAT, "--output", str(out)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        await trio.sleep(1)  # py-spy attaches to the process tree
        await bench_mcp.interleaved({"ours": call}, calls, 1, rounds=1, warmup=0)
        await bench_mcp.interleaved({"ours": call}, calls, 16, rounds=1, warmup=0)
        spy.send_signal(signal.SIGINT)  # py-spy writes its file when interrupted
        with trio.move_on_after(30):
            await spy.wait()
        if spy.returncode is None:
            spy.kill()
            await spy.wait()


def profile(calls: int, out: Path) -> str:
    """Start the frontend, warm it, attach py-spy to it and its children, drive it, and summarize (see the module
    docstring); the markdown block."""
    trio.run(_drive, calls, out)
    if not out.exists() or out.stat().st_size == 0:
        raise RuntimeError(f"py-spy wrote no samples to {out}")
    return (
        f"### Where our side's CPU goes (py-spy, {calls} calls sequentially and {calls} with 16 in flight, raw "
        "client, MCP stdio frontend with its zygote and worker; `--gil`: only the thread holding the GIL is "
        "sampled, i.e. time running Python code, not waits or system calls)\n\n"
        + summarize(out.read_text(), calls=2 * calls, rate=RATE)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--out", default=None, help="keep py-spy's collapsed stacks here")
    args = parser.parse_args()
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp()) / "profile.txt"
    print(profile(args.calls, out))


if __name__ == "__main__":
    main()
