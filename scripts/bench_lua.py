"""Benchmark the Lua toolbox: the cost of the time-limit hook on a CPU-bound script, and the start cost of a fresh
state per call. Prints medians; run with the project's venv from the repo root:

    /opt/agents-supervise/venv/bin/python scripts/bench_lua.py
"""

from __future__ import annotations

import statistics
import threading
import time

import lupa.lua54 as lua54

from toolboxes.lua._runtime import HOOK_COUNT, Clock, run_script

CPU_SCRIPT = """
local s = 0
for i = 1, 3000000 do s = s + (i % 7) * 2 end
local t = {}
for i = 1, 200000 do t[i] = tostring(i) end
return s, #t
"""


def _no_host(*args: object) -> tuple[object, ...]:
    return (False, "fail", "no host in the benchmark")


def _sandboxed(script: str, hook_count: int) -> float:
    clock = Clock(time.monotonic() + 60, threading.Event())
    started = time.perf_counter()
    outcome = run_script(script, clock=clock, host=_no_host, max_memory_bytes=256 << 20, max_output_bytes=1 << 20,
                         hook_count=hook_count)
    elapsed = time.perf_counter() - started
    assert outcome.ok, outcome.message
    return elapsed


def _bare(script: str) -> float:
    started = time.perf_counter()
    runtime = lua54.LuaRuntime(register_eval=False, register_builtins=False)
    runtime.execute(script)
    return time.perf_counter() - started


def _median(f: object, n: int) -> float:
    return statistics.median(f() for _ in range(n))  # type: ignore[operator]


def main() -> None:
    bare = _median(lambda: _bare(CPU_SCRIPT), 7)
    no_hook = _median(lambda: _sandboxed(CPU_SCRIPT, 2**31 - 1), 7)
    hooked = _median(lambda: _sandboxed(CPU_SCRIPT, HOOK_COUNT), 7)
    print(f"CPU-bound script, bare lupa state, no hook:          {bare * 1e3:8.2f} ms")
    print(f"CPU-bound script, sandboxed, hook effectively off:   {no_hook * 1e3:8.2f} ms")
    print(f"CPU-bound script, sandboxed, hook every {HOOK_COUNT} instr: {hooked * 1e3:8.2f} ms "
          f"({(hooked / no_hook - 1) * 100:+.1f}% vs hook off)")
    start_bare = _median(lambda: _bare("return 1"), 200)
    start_sandboxed = _median(lambda: _sandboxed("return 1", HOOK_COUNT), 200)
    print(f"per-call start, bare LuaRuntime + 'return 1':        {start_bare * 1e3:8.3f} ms")
    print(f"per-call start, sandboxed state + prelude + result:  {start_sandboxed * 1e3:8.3f} ms")


if __name__ == "__main__":
    main()
