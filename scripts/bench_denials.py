"""Benchmark the cost of explaining kernel denials on calls that are not denied, in one run.

    /opt/agents-supervise/venv/bin/python scripts/bench_denials.py [--calls 400] [--warmup 30]

Two supervisors run side by side on the same agent file, one with ``kernel_audit: off`` (workers without an audit
session, without the logging seccomp filter and without Landlock's logging after exec; nothing read), one with
``kernel_audit: enable`` (all of that, and the supervisor reading the audit record group). Calls are interleaved
round by round so that machine noise hits both alike:

- ``date``: the System toolbox's ``date`` (a Python worker, the fastest call there is);
- ``bash ok``: a bash tool that echoes (fork/exec of bash in the worker: every system call of it passes both
  seccomp filters);
- ``bash fails``: a bash tool that exits 1 without being denied anything: a failed call waits for the audit
  barrier before it is answered (a passed call never does).

Prints p50/p90 per way and variant, and the p50 difference. Needs root (workers, audit). The host's audit is turned
on by the ``enable`` supervisor if it is off, and stays on: both variants then run with it on, so the numbers are
what the explanations cost, not what the host's audit costs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _bench_common import agent_file, system_toolbox, write_policy

from supervisor import Supervisor

TOOL = """#!/bin/bash
if [ "$1" = describe ]; then
  echo '{"slug": "%s", "description": "bench", "args": []}'
  exit 0
fi
%s
"""
WAYS = {
    "date": ("system_system_date", "passed"),
    "bash ok": ("bash_ok", "passed"),
    "bash fails": ("bash_fails", "failed"),
}


def _setup(root: Path) -> dict[str, Path]:
    tools = root / "tools"
    tools.mkdir()
    for slug, body in (("ok", "echo fine"), ("fails", "echo nope; exit 1")):
        path = tools / slug
        path.write_text(TOOL % (slug, body))
        path.chmod(0o755)
    agent = agent_file(
        root,
        bashToolboxes=[{"tag": "FileSystemDirectory", "contents": {"Path": "./tools"}}],
        builtinToolboxes=[system_toolbox()],
    )
    policies = {}
    for mode in ("off", "enable"):
        policies[mode] = write_policy(
            root,
            [agent],
            name=f"policy-{mode}.yaml",
            state=root / f"state-{mode}",
            base=None,
            kernel_audit=mode,
            worker_uids=None,
        )
    return policies


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=30)
    args = parser.parse_args()
    os.makedirs("/tmp/agents-supervise-bench", exist_ok=True)
    os.chmod("/tmp/agents-supervise-bench", 0o755)
    root = Path(tempfile.mkdtemp(dir="/tmp/agents-supervise-bench"))
    os.chmod(root, 0o755)
    policies = _setup(root)
    samples: dict[tuple[str, str], list[float]] = {(w, m): [] for w in WAYS for m in policies}
    async with AsyncExitStack() as stack:
        sups = {m: await stack.enter_async_context(Supervisor.open(p)) for m, p in policies.items()}
        reading = sups["enable"].kernel_audit.unavailable
        if reading is not None:
            print(f"warning: the enable supervisor reads no audit records ({reading}); the comparison is moot")
        for i in range(args.warmup + args.calls):
            for way, (tool, status) in WAYS.items():
                for mode in ("off", "enable") if i % 2 else ("enable", "off"):
                    t = time.perf_counter()
                    result = await sups[mode].call(tool, {})
                    took = time.perf_counter() - t
                    assert result.status == status, result.data
                    assert result.meta("denied") is None, result.data
                    if i >= args.warmup:
                        samples[(way, mode)].append(took)
    print(f"{'call':12} {'kernel_audit':>12} {'p50 us':>9} {'p90 us':>9}")
    for way in WAYS:
        p50 = {}
        for mode in policies:
            s = sorted(samples[(way, mode)])
            p50[mode] = statistics.median(s) * 1e6
            print(f"{way:12} {mode:>12} {p50[mode]:9.0f} {s[int(len(s) * 0.9)] * 1e6:9.0f}")
        print(
            f"{'':12} {'difference':>12} {p50['enable'] - p50['off']:+9.0f} "
            f"({(p50['enable'] / p50['off'] - 1) * 100:+.1f}%)"
        )


if __name__ == "__main__":
    trio.run(main)
