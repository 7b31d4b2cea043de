"""Benchmark a trivial bash tool call: through the supervisor vs. direct fork/exec vs. bubblewrap, in one run.

    /opt/agents-supervise/venv/bin/python scripts/bench_bash.py [--calls 300] [--warmup 20] [--profile FILE]

The tool is ``echo.sh`` (``describe`` / ``run`` protocol, ``run`` does ``echo "$1"``), in a temporary folder.
Three ways to run ``echo.sh run hello`` are timed, interleaved round by round so that machine noise hits all
three alike:

- ``direct``: fork/exec + wait from this process (``subprocess.run``);
- ``bwrap``: ``bwrap --unshare-net --unshare-pid --die-with-parent --new-session --ro-bind / / echo.sh run hello``;
- ``supervisor``: ``Supervisor.call("bash_echo", {"v": "hello"})`` through the Python API, i.e. portal
  (validation, trace records), msgpack pipe, the confined bash worker (Landlock, own namespaces, uid 65534),
  which forks the script, reaps its process tree and answers.

Prints p50/p90/p99 per way and the ratios of the p50s. ``--profile FILE`` also writes a cProfile of the
supervisor side of the calls (the worker is another process: profile it with py-spy).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from supervisor._supervisor import Supervisor

SCRIPT = """#!/bin/bash
if [ "$1" = describe ]; then
  echo '{"slug": "echo", "description": "echo", "args": [{"name": "v", "description": "", "type": "string",
         "backing_type": "string", "arity": "single", "mode": "positional"}]}'
  exit 0
fi
shift
echo "$1"
"""
BWRAP = ["bwrap", "--unshare-net", "--unshare-pid", "--die-with-parent", "--new-session", "--ro-bind", "/", "/"]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def setup(root: Path) -> Path:
    tools = root / "tools"
    tools.mkdir()
    script = tools / "echo.sh"
    script.write_text(SCRIPT)
    script.chmod(0o755)
    agent = {"tag": "OpenAIAgentDescription", "contents": {
        "slug": "bench", "apiKeyId": "none", "flavor": "openai", "modelUrl": "http://127.0.0.1:9/v1",
        "modelName": "none", "announce": "bench", "systemPrompt": ["bench"],
        "bashToolboxes": [{"tag": "FileSystemDirectory", "contents": {"Path": "./tools"}}]}}
    (root / "bench.json").write_text(json.dumps(agent))
    policy = yaml.safe_load((Path(__file__).resolve().parents[1] / "policies" / "strict.yaml").read_text())
    policy.update(agents=["bench.json"], state_dir=str(root / "state"))
    path = root / "policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    return path


def timed(argv: list[str]) -> float:
    """Run ``argv`` to completion from this thread (fork/exec + wait, blocking on purpose); its wall time."""
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    return time.perf_counter() - t0


def make_root() -> Path:
    root = Path(tempfile.mkdtemp(prefix="bench-bash-", dir="/tmp"))
    root.chmod(0o755)
    return root


async def run(args: argparse.Namespace) -> None:
    root = make_root()
    try:
        policy = setup(root)
        script = str(root / "tools" / "echo.sh")
        times: dict[str, list[float]] = {"direct": [], "bwrap": [], "supervisor": []}
        profiler = cProfile.Profile() if args.profile else None
        async with Supervisor.open(policy) as sup:
            errors = sup.load_errors()
            if errors:
                raise SystemExit(f"load errors: {errors}")

            async def call() -> None:
                result = await sup.call("bash_echo", {"v": "hello"}, session_id="bench")
                if result.status != "passed" or result.data != "hello\n":
                    raise SystemExit(f"unexpected result: {result.to_wire()}")

            for _ in range(args.warmup):
                await call()
                timed([script, "run", "hello"])
                timed([*BWRAP, script, "run", "hello"])
            async def supervised() -> float:
                t2 = time.perf_counter()
                if profiler:
                    profiler.enable()
                await call()
                if profiler:
                    profiler.disable()
                return time.perf_counter() - t2

            ways = ["direct", "bwrap", "supervisor"]
            for i in range(args.calls):
                # Rotate the order every round: each way follows each other way equally often. A fixed order
                # would always run the supervisor right after bwrap, whose network and PID namespaces the kernel
                # tears down in the background, on the same two cores.
                for way in ways[i % 3:] + ways[:i % 3]:
                    if way == "direct":
                        times["direct"].append(timed([script, "run", "hello"]))
                    elif way == "bwrap":
                        times["bwrap"].append(timed([*BWRAP, script, "run", "hello"]))
                    else:
                        times["supervisor"].append(await supervised())
        if profiler:
            profiler.dump_stats(args.profile)
        p50 = {k: statistics.median(v) for k, v in times.items()}
        print(f"trivial bash tool call (echo), {args.calls} calls each, interleaved, after {args.warmup} warm-up "
              f"rounds; {os.cpu_count()} CPUs")
        print(f"{'way':<12}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}")
        for k, v in times.items():
            print(f"{k:<12}{p50[k] * 1e3:>9.2f}{percentile(v, 0.9) * 1e3:>9.2f}{percentile(v, 0.99) * 1e3:>9.2f}")
        print(f"supervisor/direct p50: {p50['supervisor'] / p50['direct']:.2f}x   "
              f"supervisor/bwrap p50: {p50['supervisor'] / p50['bwrap']:.2f}x   "
              f"bwrap/direct p50: {p50['bwrap'] / p50['direct']:.2f}x")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--profile", default=None, help="write a cProfile of the supervisor side here")
    trio.run(run, parser.parse_args())


if __name__ == "__main__":
    main()
