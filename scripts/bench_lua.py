"""Benchmark the Lua toolbox: the cost of the time-limit hook on a CPU-bound script, the cost of the wrapped
protected calls, and the start cost of a fresh state per call. Prints medians; run with the project's venv from
the repo root:

    /opt/agents-supervise/venv/bin/python scripts/bench_lua.py

"No hook" is the sandboxed state with ``hook_count=0`` (``debug.sethook`` with a zero count removes the hook). It is
the right baseline: in Lua 5.4 any count hook, whatever its count, sends every instruction through
``luaG_traceexec`` (the VM's ``trap``), so a hook with a huge count is not "off".
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import TYPE_CHECKING

import lupa.lua54 as lua54

from toolboxes.lua._runtime import HOOK_COUNT, Clock, run_script

if TYPE_CHECKING:
    from collections.abc import Callable

CPU_SCRIPT = """
local s = 0
for i = 1, 3000000 do s = s + (i % 7) * 2 end
local t = {}
for i = 1, 200000 do t[i] = tostring(i) end
return s, #t
"""

PCALL_SCRIPT = """
local n = 0
local function ok(x) return x + 1 end
for i = 1, 200000 do local _, v = pcall(ok, i) n = n + v end
for i = 1, 20000 do pcall(error, "x") end
return n
"""


def _no_host(*args: object) -> tuple[object, ...]:
    return (False, "fail", "no host in the benchmark")


def _sandboxed(script: str, hook_count: int) -> float:
    clock = Clock(time.monotonic() + 60, threading.Event())
    started = time.perf_counter()
    outcome = run_script(
        script, clock=clock, host=_no_host, max_memory_bytes=256 << 20, max_output_bytes=1 << 20, hook_count=hook_count
    )
    elapsed = time.perf_counter() - started
    assert outcome.ok, outcome.message
    return elapsed


def _bare(script: str) -> float:
    started = time.perf_counter()
    runtime = lua54.LuaRuntime(register_eval=False, register_builtins=False)
    runtime.execute(script)
    return time.perf_counter() - started


def _median(f: Callable[[], float], n: int) -> float:
    return statistics.median(f() for _ in range(n))


def main() -> None:
    rounds = 9
    bare = _median(lambda: _bare(CPU_SCRIPT), rounds)
    no_hook = _median(lambda: _sandboxed(CPU_SCRIPT, 0), rounds)
    print(f"CPU-bound script, bare lupa state:                   {bare * 1e3:8.2f} ms")
    print(f"CPU-bound script, sandboxed, no hook:                {no_hook * 1e3:8.2f} ms")
    for count in (1000, HOOK_COUNT, 100_000, 2**31 - 1):
        hooked = _median(lambda c=count: _sandboxed(CPU_SCRIPT, c), rounds)  # type: ignore[misc]
        label = "default" if count == HOOK_COUNT else ""
        print(
            f"CPU-bound script, sandboxed, hook every {count:>10} {label:7}: {hooked * 1e3:8.2f} ms "
            f"({(hooked / no_hook - 1) * 100:+.1f}% vs no hook)"
        )
    pc_bare = _median(lambda: _bare(PCALL_SCRIPT), rounds)
    pc_sandboxed = _median(lambda: _sandboxed(PCALL_SCRIPT, HOOK_COUNT), rounds)
    print(f"pcall-heavy script (220k pcalls), bare lupa state:   {pc_bare * 1e3:8.2f} ms")
    print(
        f"pcall-heavy script, sandboxed (wrapped pcall, hook): {pc_sandboxed * 1e3:8.2f} ms "
        f"({(pc_sandboxed / pc_bare - 1) * 100:+.1f}%)"
    )
    start_bare = _median(lambda: _bare("return 1"), 200)
    start_sandboxed = _median(lambda: _sandboxed("return 1", HOOK_COUNT), 200)
    print(f"per-call start, bare LuaRuntime + 'return 1':        {start_bare * 1e3:8.3f} ms")
    print(f"per-call start, sandboxed state + prelude + result:  {start_sandboxed * 1e3:8.3f} ms")


if __name__ == "__main__":
    main()
