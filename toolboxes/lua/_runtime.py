"""Run one script in a fresh, confined Lua 5.4 state: the thin part that talks to lupa.

Each call gets a new ``lupa.lua54.LuaRuntime`` with no ``python`` module (``register_eval=False``,
``register_builtins=False``), an attribute filter that refuses every attribute, strings as bytes (``encoding=None``,
so no Python ``str`` object is ever handed to Lua) and lupa's allocator limit (``max_memory``). The trusted prelude
(``_prelude.lua``) then removes the dangerous standard library, installs the time-limit hook and the modules, runs
the script and encodes its return values as JSON inside the state, under the same time and memory limits.

The only Python objects the state holds are two callables, kept in the prelude's locals: ``expired`` (the clock the
hook asks) and ``host`` (the dispatcher of :mod:`._host`, which returns only bytes, numbers, booleans and nil).

What this does not bound: a single C function of the Lua library that runs long without calling back into Lua (the
hook only fires between Lua instructions). The ones a script can drive to minutes (pattern matching with heavy
backtracking on a large subject) are bounded by the prelude; the rest are linear in data the memory limit caps. The
supervisor's wall-time limit on the call is the fence behind this one.
"""

from __future__ import annotations

import json
import re
import resource
import time
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any

import lupa.lua54 as lua54

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable

    from ._errors import Kind

__all__ = ["HOOK_COUNT", "Clock", "Outcome", "run_script"]

#: Lua instructions between two looks at the clock. At about 100-300 M instructions/s this is a look every 30-100
#: microseconds; scripts/bench_lua.py measures the cost.
HOOK_COUNT = 10000

_PRELUDE = resources.files(__package__).joinpath("_prelude.lua").read_text(encoding="utf-8")
_PATTERNS = resources.files(__package__).joinpath("_patterns.lua").read_bytes()
_LINE = re.compile(r"^script:(\d+):")


def _refuse_attribute(obj: object, name: object, is_setting: bool) -> object:
    raise AttributeError("Python attributes are not reachable from Lua")


class Clock:
    """The call's deadline as the hook sees it: :meth:`expired` turns true for good once ``limit_s`` seconds passed
    since the clock was made, or ``cancelled`` is set. ``limit_s`` is kept as given, so a refusal names the limit
    the call had, not the few microseconds less that were left when the clock was read again."""

    def __init__(self, limit_s: float, cancelled: threading.Event) -> None:
        self.limit_s = limit_s
        self.start = time.monotonic()
        self.deadline = self.start + limit_s
        self.cancelled = cancelled
        self.fired = False

    def expired(self) -> bool:
        if not self.fired and (time.monotonic() >= self.deadline or self.cancelled.is_set()):
            self.fired = True
        return self.fired

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())


@dataclass
class Outcome:
    """How a script ended. On success ``values`` holds its return values (JSON data, in return order); otherwise
    ``kind`` and ``message`` say why, and ``line`` is the script line of a runtime error when Lua gave one."""

    ok: bool
    seconds: float
    values: list[Any] = field(default_factory=list)
    output: str = ""
    kind: Kind | None = None
    message: str = ""
    line: int | None = None


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def _failure(kind: Kind, message: str, clock: Clock) -> Outcome:
    if kind == "timeout" or clock.fired:
        if clock.cancelled.is_set() and time.monotonic() < clock.deadline:
            message = "the call was cancelled"
        else:
            message = f"timeout: the script ran past its time limit of {clock.limit_s:.3g} s"
        kind = "timeout"
    m = _LINE.match(message) if kind == "runtime" else None
    return Outcome(
        False, time.monotonic() - clock.start, kind=kind, message=message, line=int(m.group(1)) if m else None
    )


def _memory_message(max_memory_bytes: int) -> str:
    """Which limit a script ran into: MaxMemoryMB, or the worker's address-space rlimit when that is lower (the
    allocator then failed before lupa's limit was reached)."""
    message = f"the script ran out of memory: its limit is {max_memory_bytes / 2**20:g} MB (MaxMemoryMB)"
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY and soft < max_memory_bytes:
        message += (
            f", and the worker's whole address space is limited to {soft / 2**20:g} MB (the policy's "
            "address_space_bytes), which is lower"
        )
    return message


def run_script(
    script: str,
    *,
    clock: Clock,
    host: Callable[..., tuple[Any, ...]],
    max_memory_bytes: int,
    max_output_bytes: int,
    hook_count: int = HOOK_COUNT,
) -> Outcome:
    """Run ``script`` in a fresh state and say how it ended. Never raises for anything the script does.

    Blocks the calling thread (Lua runs with the GIL released, so other calls go on). The state is dropped before
    returning; nothing survives from one call to the next.
    """
    try:
        runtime = lua54.LuaRuntime(
            encoding=None,
            register_eval=False,
            register_builtins=False,
            unpack_returned_tuples=True,
            attribute_filter=_refuse_attribute,
            max_memory=max_memory_bytes,
        )
    except Exception as exc:  # lupa reports a failed lua_newstate as a plain exception
        return _failure("initialization", f"the Lua state could not be created: {exc}", clock)
    try:
        answer = runtime.execute(
            _PRELUDE, clock.expired, host, script.encode("utf-8"), hook_count, max_output_bytes, _PATTERNS
        )
    except lua54.LuaMemoryError:
        return _failure("memory", _memory_message(max_memory_bytes), clock)
    except lua54.LuaError as exc:
        first = _text(exc.args[0] if exc.args else exc).split("\nstack traceback:")[0]
        return _failure("runtime", first, clock)
    finally:
        del runtime
    if not isinstance(answer, tuple) or len(answer) < 3:
        return _failure("initialization", "the Lua prelude returned an unexpected answer", clock)
    if answer[0] is not True:
        kind, message = _text(answer[1]), _text(answer[2])
        if kind == "memory":
            message = _memory_message(max_memory_bytes)
        return _failure(kind, message, clock)  # type: ignore[arg-type]
    if clock.fired:
        return _failure("timeout", "", clock)
    values = json.loads(_text(answer[1]))
    return Outcome(True, time.monotonic() - clock.start, values=values, output=_text(answer[2]))
