"""Benchmark a trivial bash tool call: through the supervisor vs. direct fork/exec vs. the peer sandboxes, in one run.

    /opt/agents-supervise/venv/bin/python scripts/bench_bash.py [--calls 300] [--peer-calls 40] [--warmup 20]
                                                                [--profile FILE]

The tool is ``echo.sh`` (``describe`` / ``run`` protocol, ``run`` does ``echo "$1"``), in a temporary folder.
The ways to run ``echo.sh run hello`` are timed, interleaved round by round so that machine noise hits all alike:

- ``direct``: fork/exec + wait from this process (``subprocess.run``);
- ``bwrap``: ``bwrap --unshare-net --unshare-pid --die-with-parent --new-session --ro-bind / / echo.sh run hello``;
- ``firejail``: ``firejail --quiet --noprofile --net=none`` (Debian's firejail);
- ``codex``: Codex CLI's ``codex sandbox -- ...`` (npm ``@openai/codex``: Landlock + seccomp, its default policy);
- ``srt``: Anthropic's sandbox runtime ``srt --settings S ...`` (npm ``@anthropic-ai/sandbox-runtime``: bubblewrap
  plus its proxies; ``S`` allows no domain and writes only to the tool's folder);
- ``supervisor``: ``Supervisor.call("bash_echo", {"v": "hello"})`` through the Python API, i.e. portal
  (validation, trace records), msgpack pipe, the confined bash worker (``policies/strict.yaml``: Landlock, private
  view, seccomp, own namespaces, cgroup, a uid of its own), which forks the script, reaps its process tree and
  answers;
- ``floor``: the floor of ``supervisor``, the script run by a Python process reached over one pipe hop
  (``scripts/floor_exec.py``), nothing confined or recorded.

A peer runs only where it is installed (firejail on ``PATH``; codex and srt on ``PATH`` or under
``$AGENTS_SUPERVISE_PEERS/node_modules/.bin``, default ``/opt/bench-peers``, where
``npm install --prefix /opt/bench-peers @openai/codex @anthropic-ai/sandbox-runtime`` puts them; srt also needs
Debian's ripgrep and socat; ``scripts/setup-bench`` installs all of them, pinned); the table says which were
missing. The peers that start a runtime of their own (codex, srt: hundreds of ms a command) take part in the first
``--peer-calls`` rounds only.

Prints p50/p90/p99 per way and the ratios of the p50s (``scripts/bench`` calls :func:`measure` for issue 18's row
6). ``--profile FILE`` also writes a cProfile of the
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _bench_common import agent_file, percentile, write_policy
from floor_exec import ExecHop

from supervisor import Supervisor

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
FIREJAIL = ["firejail", "--quiet", "--noprofile", "--net=none"]
#: The peers' names in a table, by the key ``measure`` files their times under.
PEER_NAMES = {"bwrap": "bubblewrap", "firejail": "firejail", "codex": "codex sandbox", "srt": "srt"}
#: Peers whose every command starts a runtime of their own: timed in the first ``--peer-calls`` rounds only.
SLOW_PEERS = ("codex", "srt")


def find_tool(name: str) -> str | None:
    """``name`` on ``PATH`` or in the npm prefix of the benchmark peers; ``None`` when it is not installed."""
    prefix = os.environ.get("AGENTS_SUPERVISE_PEERS", "/opt/bench-peers")
    return shutil.which(name) or shutil.which(name, path=os.path.join(prefix, "node_modules", ".bin"))


def peer_commands(root: Path) -> tuple[dict[str, list[str]], list[str]]:
    """The command prefix of each installed peer, and the names of those that are missing."""
    found: dict[str, list[str]] = {"bwrap": BWRAP}
    missing = []
    if shutil.which("firejail"):
        found["firejail"] = FIREJAIL
    else:
        missing.append("firejail")
    codex = find_tool("codex")
    if codex:
        found["codex"] = [codex, "sandbox", "--"]
    else:
        missing.append("codex")
    srt = find_tool("srt")
    if srt and shutil.which("rg") and shutil.which("socat"):
        settings = root / "srt-settings.json"
        settings.write_text(
            json.dumps(
                {
                    "network": {"allowedDomains": [], "deniedDomains": []},
                    "filesystem": {
                        "denyRead": [],
                        "allowRead": [],
                        "allowWrite": [str(root / "tools")],
                        "denyWrite": [],
                    },
                }
            )
        )
        found["srt"] = [srt, "--settings", str(settings)]
    else:
        missing.append("srt")
    return found, missing


def setup(root: Path) -> Path:
    tools = root / "tools"
    tools.mkdir()
    script = tools / "echo.sh"
    script.write_text(SCRIPT)
    script.chmod(0o755)
    bash = [{"tag": "FileSystemDirectory", "contents": {"Path": "./tools"}}]
    return write_policy(root, [agent_file(root, bashToolboxes=bash)])


def timed(argv: list[str]) -> float:
    """Run ``argv`` to completion from this thread (fork/exec + wait, blocking on purpose); its wall time."""
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    return time.perf_counter() - t0


def make_root() -> Path:
    root = Path(tempfile.mkdtemp(prefix="bench-bash-", dir="/tmp"))
    root.chmod(0o755)
    return root


async def measure(
    calls: int, peer_calls: int, warmup: int, profile: str | None = None
) -> tuple[dict[str, list[float]], list[str]]:
    """Time every way (see the module docstring) ``calls`` times (the slow peers ``peer_calls`` times), interleaved,
    after ``warmup`` rounds; the times of each way in seconds, and the peers that are not installed."""
    root = make_root()
    hop = ExecHop()
    try:
        policy = setup(root)
        script = str(root / "tools" / "echo.sh")
        peers, missing = peer_commands(root)
        times: dict[str, list[float]] = {"direct": [], **{name: [] for name in peers}, "floor": [], "supervisor": []}
        profiler = cProfile.Profile() if profile else None
        async with Supervisor.open(policy) as sup:
            errors = sup.load_errors()
            if errors:
                raise SystemExit(f"load errors: {errors}")

            async def call() -> None:
                result = await sup.call("bash_echo", {"v": "hello"}, session_id="bench")
                if result.status != "passed" or result.data != "hello\n":
                    raise SystemExit(f"unexpected result: {result.to_wire()}")

            def through_hop() -> float:
                t0 = time.perf_counter()
                if hop.run([script, "run", "hello"]) != b"hello\n":
                    raise SystemExit("the floor's exec server ran the script wrong")
                return time.perf_counter() - t0

            for i in range(warmup):
                await call()
                timed([script, "run", "hello"])
                through_hop()
                for name, prefix in peers.items():
                    if name not in SLOW_PEERS or i < 2:
                        timed([*prefix, script, "run", "hello"])

            async def supervised() -> float:
                t2 = time.perf_counter()
                if profiler:
                    profiler.enable()
                await call()
                if profiler:
                    profiler.disable()
                return time.perf_counter() - t2

            for i in range(calls):
                ways = [w for w in times if w not in SLOW_PEERS or i < peer_calls]
                # Rotate the order every round: each way follows each other way equally often. A fixed order
                # would always run the supervisor right after bwrap, whose network and PID namespaces the kernel
                # tears down in the background, on the same two cores.
                k = i % len(ways)
                for way in ways[k:] + ways[:k]:
                    if way == "direct":
                        times["direct"].append(timed([script, "run", "hello"]))
                    elif way == "floor":
                        times["floor"].append(through_hop())
                    elif way == "supervisor":
                        times["supervisor"].append(await supervised())
                    else:
                        times[way].append(timed([*peers[way], script, "run", "hello"]))
        if profiler and profile:
            profiler.dump_stats(profile)
    finally:
        hop.close()
        shutil.rmtree(root, ignore_errors=True)
    return times, missing


async def run(args: argparse.Namespace) -> None:
    times, missing = await measure(args.calls, args.peer_calls, args.warmup, args.profile)
    p50 = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"trivial bash tool call (echo), {args.calls} calls each ({args.peer_calls} for "
        f"{', '.join(SLOW_PEERS)}), interleaved, after {args.warmup} warm-up rounds; {os.cpu_count()} CPUs"
    )
    if missing:
        print(f"not installed, left out: {', '.join(missing)}")
    print(f"{'way':<12}{'calls':>6}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}{'/direct':>9}{'sup/way':>9}")
    for k, v in times.items():
        ratios = f"{p50[k] / p50['direct']:>8.2f}x{p50['supervisor'] / p50[k]:>8.2f}x"
        print(
            f"{k:<12}{len(v):>6}{p50[k] * 1e3:>9.2f}{percentile(v, 0.9) * 1e3:>9.2f}"
            f"{percentile(v, 0.99) * 1e3:>9.2f}{ratios}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--peer-calls", type=int, default=40, help=f"rounds that time {', '.join(SLOW_PEERS)}")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--profile", default=None, help="write a cProfile of the supervisor side here")
    trio.run(run, parser.parse_args())


if __name__ == "__main__":
    main()
