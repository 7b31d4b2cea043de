"""Benchmark a trivial WASM component call: through the supervisor vs. in-process wasmtime, in one run; and the cold
start of a WASM toolbox with and without the compile cache.

    /opt/agents-supervise/venv/bin/python scripts/bench_wasm.py [--calls 500] [--warmup 50] [--starts 3]
                                                                [--bulk 1000]

Warm calls: the ``echo`` test component (``tests/_wasm_components.py``: returns its input as ``data``), built from WAT
with wasm-tools, called ``--calls`` times each way after ``--warmup`` rounds, the two ways interleaved round by round
with their order alternating:

- ``in-process``: what the worker does for one call, in this process: ``WasmToolbox.call`` (no worker, no
  supervisor pipe), which sends the call to one of the toolbox's executor processes (a fresh ``Store`` with the
  toolbox's limits and WASI config, instantiate, call ``run``) and maps the result;
- ``supervisor``: ``Supervisor.call("wasm_bench_echo", {"q": "hello"})`` through the Python API: portal (schema
  validation, trace), msgpack pipe, the confined worker (strict.yaml: Landlock, seccomp, namespaces, cgroup, a uid of
  its own), which does the same.

Cold start: ``Supervisor.open`` of a policy whose WASM toolbox holds one large component (``--bulk`` filler functions,
so compiling costs something) until its first call has answered, ``--starts`` times with an empty state folder (the
worker compiles) and ``--starts`` times with the state folder of a previous start (the worker deserializes).

Prints p50/p90/p99 per way, the ratio of the p50s (target: at most 2), and the cold starts.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _bench_common import agent_file, percentile
from _bench_common import write_policy as bench_policy

from labkit import Spec, build_components
from supervisor import Supervisor
from toolboxes import CallContext, WorkerEnv
from toolboxes.wasm import open_toolbox


def write_policy(root: Path, state: Path) -> Path:
    wasm = {
        "tag": "WasmToolbox",
        "contents": {
            "Name": "bench",
            "Description": "bench",
            "Path": "./components",
            "MaxMemoryMB": 64,
            "MaxExecutionTimeSeconds": 5,
        },
    }
    return bench_policy(root, [agent_file(root, builtinToolboxes=[wasm])], state=state)


class _Quiet:
    def event(self, event: dict[str, Any]) -> None:
        pass

    def tools_changed(self) -> None:
        pass


async def warm(args: argparse.Namespace, root: Path) -> None:
    build_components([Spec("echo", summary="echoed", behaviour="echo")], root / "components")
    policy = write_policy(root, root / "state")
    work, state = root / "inproc-work", root / "inproc-state"
    work.mkdir()
    state.mkdir()
    local = open_toolbox(
        {
            "Name": "bench",
            "Path": str(root / "components"),
            "MaxMemoryMB": 64,
            "MaxExecutionTimeSeconds": 5,
            "policy": {"watch_interval_s": 0},
        },
        WorkerEnv("bench", str(work), str(state), _Quiet()),
    )  # type: ignore[arg-type]
    times: dict[str, list[float]] = {"in-process": [], "supervisor": []}
    try:
        async with Supervisor.open(policy) as sup:

            def in_process(i: int) -> float:
                t0 = time.perf_counter()
                result = local.call("wasm_bench_echo", {"q": "hello"}, CallContext(i, "wasm_bench_echo"))
                took = time.perf_counter() - t0
                assert result.status == "passed", result.data
                return took

            async def supervised() -> float:
                t0 = time.perf_counter()
                result = await sup.call("wasm_bench_echo", {"q": "hello"})
                took = time.perf_counter() - t0
                assert result.status == "passed", result.data
                return took

            for i in range(args.warmup + args.calls):
                order = ("in-process", "supervisor") if i % 2 else ("supervisor", "in-process")
                for way in order:
                    took = in_process(i) if way == "in-process" else await supervised()
                    if i >= args.warmup:
                        times[way].append(took)
    finally:
        local.close()
    p50 = {k: statistics.median(v) for k, v in times.items()}
    print(f"warm calls ({args.calls} each, after {args.warmup} warm-up rounds)")
    print(f"{'way':<12}{'calls':>6}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}")
    for k, v in times.items():
        print(
            f"{k:<12}{len(v):>6}{p50[k] * 1e3:>9.3f}{percentile(v, 0.9) * 1e3:>9.3f}{percentile(v, 0.99) * 1e3:>9.3f}"
        )
    ratio = p50["supervisor"] / p50["in-process"]
    print(f"supervisor / in-process p50: {ratio:.2f}x (target <= 2x: {'met' if ratio <= 2 else 'NOT met'})")


async def cold(args: argparse.Namespace, root: Path) -> None:
    build_components([Spec("big", summary="big", behaviour="echo", bulk=args.bulk)], root / "components")
    size = (root / "components" / "big.wasm").stat().st_size
    policy = write_policy(root, root / "state")

    async def start() -> float:
        t0 = time.perf_counter()
        async with Supervisor.open(policy) as sup:
            result = await sup.call("wasm_bench_big", {"q": "x"})
            took = time.perf_counter() - t0
        assert result.status == "passed", result.data
        return took

    without, with_cache = [], []
    for _ in range(args.starts):
        shutil.rmtree(root / "state", ignore_errors=True)
        without.append(await start())
        with_cache.append(await start())  # the state folder of the start before: the compiled component is there
    print(f"cold start to the first answer, one component of {size} bytes ({args.bulk} filler functions)")
    print(
        f"  without the compile cache: median {statistics.median(without):.3f} s  "
        f"({', '.join(f'{t:.3f}' for t in without)})"
    )
    print(
        f"  with the compile cache:    median {statistics.median(with_cache):.3f} s  "
        f"({', '.join(f'{t:.3f}' for t in with_cache)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--starts", type=int, default=3)
    parser.add_argument("--bulk", type=int, default=1000)
    args = parser.parse_args()
    for step in (warm, cold):
        root = Path(tempfile.mkdtemp(prefix="bench-wasm-", dir="/tmp"))
        root.chmod(0o755)
        try:
            trio.run(step, args, root)
        finally:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
