#!/opt/agents-supervise/venv/bin/python
"""Scaling rows of the benchmark (run by ``scripts/bench``): how the supervisor does as toolboxes and callers grow.

0. Spawn until it answers: one more worker of a running one-toolbox supervisor started by its spawner (the zygote's
   fork, or a fresh launcher) until its ``hello``, then stopped; the median of ``--spawns`` such starts.
1. Start to ready: ``Supervisor.open`` of a policy with 8, 32 and 100 toolboxes (each a System toolbox with a
   ``date`` tool in its own confined worker) until every worker said hello.
2. Calls: p50, p99 and calls/s of the trivial ``date`` call through the Python API with 1, 10 and 100 toolboxes and
   1, 16 and 256 callers; caller ``i`` calls toolbox ``i mod T``, each in its own session, in a loop.
3. Idle memory: the PSS (``/proc/<pid>/smaps_rollup``) of every process the supervisor started (the zygote,
   launchers and workers) with 10 and 100 toolboxes (and more with ``--idle``), after one call to each, and the
   supervisor's own.

Rows 0, 1 and 3 are measured for each ``--spawn`` mode (``supervision.spawn``: zygote, launcher) side by side in the
same run, alternating. Prints markdown tables (with the load average before and after, since the machine may be
shared) that BENCHMARKS.md copies. Usage: ``scripts/bench_scale.py [--calls N] [--idle 10,100,1000]
[--starts 8,32,100] [--spawn zygote,launcher] [--spawns 20] [--toolboxes 1,10,100 | --toolboxes ""]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import trio

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from _bench_common import agent_file, bench_folder, system_toolbox, write_policy  # noqa: E402

from supervisor._supervisor import Supervisor  # noqa: E402
from supervisor.workers import Worker  # noqa: E402


def _policy(n: int, spawn: str = "zygote") -> Path:
    """A policy with ``n`` System toolboxes ``s0`` ... (tools ``system_s<i>_date``) in a fresh folder."""
    root = bench_folder()
    agent = agent_file(root, builtinToolboxes=[system_toolbox(f"s{i}") for i in range(n)])
    # 256 callers may all be on one toolbox: its worker takes them all at once (the default is 8 in flight).
    return write_policy(root, [agent], base=None, limits={"max_concurrent_calls": 256}, supervision={"spawn": spawn})


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def _pss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


async def _calls(sup: Supervisor, toolboxes: int, callers: int, total: int) -> dict[str, float]:
    samples: list[float] = []
    per = max(1, total // callers)

    async def caller(i: int) -> None:
        tool = f"system_s{i % toolboxes}_date"
        session = f"bench-{i}"
        for _ in range(per):
            t = time.perf_counter()
            result = await sup.call(tool, {}, session_id=session)
            samples.append(time.perf_counter() - t)
            assert result.status == "passed", result.data

    for i in range(min(callers, toolboxes)):  # warm up every toolbox used
        for _ in range(20):
            await sup.call(f"system_s{i}_date", {})
    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for i in range(callers):
            nursery.start_soon(caller, i)
    wall = time.perf_counter() - start
    samples.sort()
    return {
        "p50_us": statistics.median(samples) * 1e6,
        "p99_us": samples[min(len(samples) - 1, int(len(samples) * 0.99))] * 1e6,
        "calls_per_s": len(samples) / wall,
    }


async def _spawn_times(spawn: str, count: int) -> list[float]:
    """``count`` starts of a one-toolbox supervisor's worker by its spawner, each until its hello (seconds)."""
    samples: list[float] = []
    async with Supervisor.open(_policy(1, spawn)) as sup:
        assert not sup.load_errors(), sup.load_errors()
        spec = sup.runners[0].spec

        async def request(_worker: Worker, _message: dict[str, Any]) -> dict[str, Any]:
            return {"error": "bench"}

        for _ in range(count):
            async with trio.open_nursery() as nursery:
                worker = Worker(spec, on_request=request, on_event=lambda *_: None, spawner=sup.spawner)
                start = time.perf_counter()
                await worker.start(nursery)
                samples.append(time.perf_counter() - start)
                await worker.stop()
                nursery.cancel_scope.cancel()
    return samples


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2560, help="calls per cell of the call table")
    parser.add_argument("--starts", default="8,32,100")
    parser.add_argument("--idle", default="10,100")
    parser.add_argument("--toolboxes", default="1,10,100")
    parser.add_argument("--callers", default="1,16,256")
    parser.add_argument("--spawn", default="zygote,launcher", help="supervision.spawn modes, side by side")
    parser.add_argument("--spawns", type=int, default=20, help="starts for the spawn-until-it-answers median")
    args = parser.parse_args()
    modes = args.spawn.split(",")
    me = psutil.Process()

    print(f"## Spawn until it answers (median of {args.spawns}; load average before: {_load()})\n")
    print("| spawn | median ms | p90 ms | load average after |")
    print("|---|---|---|---|")
    for mode in modes if args.spawns > 0 else ():
        samples = sorted(await _spawn_times(mode, args.spawns))
        p90 = samples[min(len(samples) - 1, int(len(samples) * 0.9))]
        print(f"| {mode} | {statistics.median(samples) * 1000:.1f} | {p90 * 1000:.1f} | {_load()} |", flush=True)

    print(f"\n## Start to ready (load average before: {_load()})\n")
    print("| toolboxes | spawn | start to every worker ready s | per toolbox ms | load average after |")
    print("|---|---|---|---|---|")
    for n in [int(x) for x in args.starts.split(",") if x]:
        for mode in modes:
            policy = _policy(n, mode)
            start = time.perf_counter()
            async with Supervisor.open(policy) as sup:
                took = time.perf_counter() - start
                assert not sup.load_errors(), sup.load_errors()
            print(f"| {n} | {mode} | {took:.2f} | {took / n * 1000:.0f} | {_load()} |", flush=True)

    print(f"\n## Calls as toolboxes and callers grow (Python API; load average before: {_load()})\n")
    print("| toolboxes | callers | p50 us | p99 us | calls/s | load average after |")
    print("|---|---|---|---|---|---|")
    for t in [int(x) for x in args.toolboxes.split(",") if x]:
        async with Supervisor.open(_policy(t)) as sup:
            assert not sup.load_errors(), sup.load_errors()
            for c in map(int, args.callers.split(",")):
                row = await _calls(sup, t, c, args.calls)
                print(
                    f"| {t} | {c} | {row['p50_us']:.0f} | {row['p99_us']:.0f} | {row['calls_per_s']:.0f} | {_load()} |",
                    flush=True,
                )

    print(f"\n## Idle memory (PSS; load average before: {_load()})\n")
    print(
        "| toolboxes | spawn | zygote, launchers, workers MiB | per toolbox MiB | supervisor process MiB | processes |"
    )
    print("|---|---|---|---|---|---|")
    for n in [int(x) for x in args.idle.split(",") if x]:
        for mode in modes:
            async with Supervisor.open(_policy(n, mode)) as sup:
                assert not sup.load_errors(), sup.load_errors()
                for i in range(n):
                    assert (await sup.call(f"system_s{i}_date", {})).status == "passed"
                kids = me.children(recursive=True)
                workers = sum(_pss_kib(k.pid) for k in kids) / 1024
                own = _pss_kib(me.pid) / 1024
            print(f"| {n} | {mode} | {workers:.0f} | {workers / n:.2f} | {own:.0f} | {len(kids)} |", flush=True)


if __name__ == "__main__":
    trio.run(main)
