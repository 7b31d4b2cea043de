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

Every policy is ``policies/strict.yaml`` (every protection on) with bounds the benchmark does not run into
(:func:`policy`). Rows 0, 1 and 3 are measured for each ``--spawn`` mode (``supervision.spawn``: zygote, launcher;
or ``fresh``: the zygote serving, every toolbox's ``spawn: launcher``) side by side in the same run, alternating.
``scripts/bench`` calls these functions for issue 18's rows 5, 7, 8 and 9 and for the scaling curves. Prints
markdown tables (with the load average before and after, since the machine may be shared) that BENCHMARKS.md copies.
Usage: ``scripts/bench_scale.py [--calls N] [--idle 10,100,1000] [--starts 8,32,100] [--spawn zygote,launcher]
[--spawns 20] [--toolboxes 1,10,100 | --toolboxes ""]``.
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

from supervisor import Supervisor  # noqa: E402
from supervisor.workers import Worker  # noqa: E402


def policy(n: int, spawn: str = "zygote", tenants: int = 0) -> Path:
    """strict.yaml (every protection on) with ``n`` System toolboxes ``s0`` ... (tools ``system_s<i>_date``) in a
    fresh folder, and bounds a benchmark does not run into: 256 calls in flight per worker (256 callers may all be on
    one toolbox; strict's default is 4) and per session, no bound on calls per session. ``spawn``: the policy's
    ``supervision.spawn``, or ``fresh``: ``zygote`` with every toolbox's ``spawn: launcher`` (a fresh exec each,
    the per-toolbox override). ``tenants``: that many tenants ``t0`` ... in the policy, each allowed the agent."""
    root = bench_folder()
    agent = agent_file(root, builtinToolboxes=[system_toolbox(f"s{i}") for i in range(n)])
    fresh: dict[str, Any] = (
        {"toolboxes": {f"s{i}": {"spawn": "launcher"} for i in range(n)}} if spawn == "fresh" else {}
    )
    if tenants:
        fresh["tenants"] = {f"t{i}": {"agents": ["bench"]} for i in range(tenants)}
    return write_policy(
        root,
        [agent],
        limits={"max_concurrent_calls": 256},
        sessions={"max_calls": None, "max_concurrent_calls": 256},
        supervision={"spawn": "zygote" if spawn == "fresh" else spawn},
        **fresh,
    )


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def pss_kib(pid: int) -> int:
    """The PSS of process ``pid`` in KiB (0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


async def calls(sup: Supervisor, toolboxes: int, callers: int, total: int) -> dict[str, float]:
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


async def spawn_times(spawn: str, count: int) -> list[float]:
    """``count`` starts of a one-toolbox supervisor's worker by its spawner, each until its hello (seconds)."""
    async with Supervisor.open(policy(1, spawn)) as sup:
        assert not sup.load_errors(), sup.load_errors()
        return await spawns_of(sup, count)


async def spawns_of(sup: Supervisor, count: int) -> list[float]:
    """``count`` starts of one more worker of ``sup``'s first toolbox by its spawner, each from the spawn until its
    hello, then stopped (seconds)."""
    samples: list[float] = []
    spec = sup.runners[0].spec

    async def request(_worker: Worker, _message: dict[str, Any]) -> dict[str, Any]:
        return {"error": "bench"}

    for _ in range(count):
        async with trio.open_nursery() as nursery:
            worker = Worker(spec, on_request=request, on_event=lambda *_: None, spawner=sup.services.spawner)
            start = time.perf_counter()
            await worker.start(nursery)
            samples.append(time.perf_counter() - start)
            await worker.stop()
            nursery.cancel_scope.cancel()
    return samples


async def start_to_ready(n: int, mode: str = "zygote") -> float:
    """Seconds from ``Supervisor.open`` of :func:`policy` ``(n, mode)`` until every worker said hello."""
    pol = policy(n, mode)
    start = time.perf_counter()
    async with Supervisor.open(pol) as sup:
        took = time.perf_counter() - start
        assert not sup.load_errors(), sup.load_errors()
    return took


async def idle_memory(sup: Supervisor, n: int) -> dict[str, float]:
    """After one call to each of the ``n`` toolboxes of ``sup`` (a :func:`policy` supervisor in this process): the
    PSS in MiB of every process it started (``workers``), per toolbox, of this process (``own``), how many
    processes, and the most threads one of them has (an idle worker's)."""
    for i in range(n):
        assert (await sup.call(f"system_s{i}_date", {})).status == "passed"
    me = psutil.Process()
    kids = me.children(recursive=True)
    workers = sum(pss_kib(k.pid) for k in kids) / 1024
    threads = 1
    for kid in kids:
        try:
            threads = max(threads, kid.num_threads())
        except psutil.Error:
            pass
    return {
        "workers": workers,
        "per_toolbox": workers / n,
        "own": pss_kib(me.pid) / 1024,
        "processes": len(kids),
        "threads": threads,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2560, help="calls per cell of the call table")
    parser.add_argument("--starts", default="8,32,100")
    parser.add_argument("--idle", default="10,100")
    parser.add_argument("--toolboxes", default="1,10,100")
    parser.add_argument("--callers", default="1,16,256")
    parser.add_argument("--spawn", default="zygote,launcher", help="supervision.spawn modes (or fresh), side by side")
    parser.add_argument("--spawns", type=int, default=20, help="starts for the spawn-until-it-answers median")
    args = parser.parse_args()
    modes = args.spawn.split(",")

    print(f"## Spawn until it answers (median of {args.spawns}; load average before: {_load()})\n")
    print("| spawn | median ms | p90 ms | load average after |")
    print("|---|---|---|---|")
    for mode in modes if args.spawns > 0 else ():
        samples = sorted(await spawn_times(mode, args.spawns))
        p90 = samples[min(len(samples) - 1, int(len(samples) * 0.9))]
        print(f"| {mode} | {statistics.median(samples) * 1000:.1f} | {p90 * 1000:.1f} | {_load()} |", flush=True)

    print(f"\n## Start to ready (load average before: {_load()})\n")
    print("| toolboxes | spawn | start to every worker ready s | per toolbox ms | load average after |")
    print("|---|---|---|---|---|")
    for n in [int(x) for x in args.starts.split(",") if x]:
        for mode in modes:
            took = await start_to_ready(n, mode)
            print(f"| {n} | {mode} | {took:.2f} | {took / n * 1000:.0f} | {_load()} |", flush=True)

    print(curves_header(_load()))
    for t in [int(x) for x in args.toolboxes.split(",") if x]:
        for line in await curve_rows(t, [int(c) for c in args.callers.split(",")], args.calls):
            print(line, flush=True)

    print(idle_header(_load()))
    for n in [int(x) for x in args.idle.split(",") if x]:
        for mode in modes:
            print(await idle_row(n, mode), flush=True)


def curves_header(load: str) -> str:
    """The heading and column names of the calls table (markdown)."""
    return (
        f"\n## Calls as toolboxes and callers grow (Python API; load average before: {load})\n\n"
        "Functions per call: the Python functions this process entered per call (`cProfile` over 320 sequential calls "
        "spread over the toolboxes; exact, whatever the load).\n\n"
        "| toolboxes | callers | functions per call | p50 us | p99 us | calls/s | load average after |"
        "\n|---|---|---|---|---|---|---|"
    )


async def curve_rows(toolboxes: int, callers: list[int], total: int) -> list[str]:
    """The calls table's rows for ``toolboxes`` toolboxes, one per count of ``callers``."""
    rows = []
    async with Supervisor.open(policy(toolboxes)) as sup:
        assert not sup.load_errors(), sup.load_errors()
        for i in range(toolboxes):  # each worker warm
            assert (await sup.call(f"system_s{i}_date", {})).status == "passed"
        functions = await functions_per_call(sup, [(f"system_s{i % toolboxes}_date", "c", "local") for i in range(64)])
        for c in callers:
            row = await calls(sup, toolboxes, c, total)
            rows.append(
                f"| {toolboxes} | {c} | {functions:.0f} | {row['p50_us']:.0f} | {row['p99_us']:.0f} "
                f"| {row['calls_per_s']:.0f} | {_load()} |"
            )
    return rows


async def functions_per_call(sup: Supervisor, ways: list[tuple[str, str, str]], calls: int = 320) -> float:
    """The Python functions this process enters per call (``cProfile``, exact whatever the load) over ``calls``
    sequential calls, the ``i``-th of them as ``ways[i * 7919 % len(ways)]`` (tool, session name, tenant)."""
    import cProfile

    profiler = cProfile.Profile()
    profiler.enable()
    for i in range(calls):
        tool, session, tenant = ways[(i * 7919) % len(ways)]
        await sup.call(tool, {}, session_id=session, tenant=tenant)
    profiler.disable()
    profiler.create_stats()
    return sum(entry[1] for entry in profiler.stats.values()) / calls  # type: ignore[attr-defined]


def idle_header(load: str) -> str:
    """The heading and column names of the idle memory table (markdown)."""
    return (
        f"\n## Idle memory (PSS; load average before: {load})\n\n"
        "| toolboxes | spawn | zygote, launchers, workers MiB | per toolbox MiB | supervisor process MiB | processes |"
        "\n|---|---|---|---|---|---|"
    )


async def idle_row(n: int, mode: str = "zygote") -> str:
    """The idle memory table's row for ``n`` toolboxes started by ``mode``."""
    async with Supervisor.open(policy(n, mode)) as sup:
        assert not sup.load_errors(), sup.load_errors()
        m = await idle_memory(sup, n)
    return f"| {n} | {mode} | {m['workers']:.0f} | {m['per_toolbox']:.2f} | {m['own']:.0f} | {m['processes']:.0f} |"


def breadth_header(load: str) -> str:
    """The heading and column names of the breadth table (markdown)."""
    return (
        f"\n## A call's cost as sessions and tenants grow (Python API, one toolbox; load average before: {load})\n\n"
        "Before each row, that many sessions (or tenants, each with a session) made one call each and stay open; "
        "then 16 callers call, caller i in the i-th of them (mod their count). Function calls per call: "
        "`cProfile` over 320 sequential calls spread the same way (exact, whatever the load).\n\n"
        "| sessions open | tenants | functions per call | p50 us | calls/s (16 callers) | load average after |"
        "\n|---|---|---|---|---|---|"
    )


async def breadth_row(sessions: int, tenants: int, total: int) -> str:
    """One row of the breadth table: ``sessions`` sessions open over ``tenants`` tenants (``tenants`` 0: the
    local tenant only, not in the policy)."""
    async with Supervisor.open(policy(1, tenants=tenants)) as sup:
        assert not sup.load_errors(), sup.load_errors()
        names = [(f"s{i}", f"t{i % tenants}" if tenants else "local") for i in range(sessions)]
        for name, tenant in names:
            assert (await sup.call("system_s0_date", {}, session_id=name, tenant=tenant)).status == "passed"
        functions = await functions_per_call(sup, [("system_s0_date", name, tenant) for name, tenant in names])
        samples: list[float] = []
        per = max(1, total // 16)

        async def caller(i: int) -> None:
            name, tenant = names[i % len(names)]
            for _ in range(per):
                t = time.perf_counter()
                result = await sup.call("system_s0_date", {}, session_id=name, tenant=tenant)
                samples.append(time.perf_counter() - t)
                assert result.status == "passed", result.data

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for i in range(16):
                nursery.start_soon(caller, i)
        wall = time.perf_counter() - start
    return (
        f"| {sessions} | {tenants or 1} | {functions:.0f} | {statistics.median(samples) * 1e6:.0f} "
        f"| {len(samples) / wall:.0f} | {_load()} |"
    )


if __name__ == "__main__":
    trio.run(main)
