"""One call of a component: a fresh store with the toolbox's limits and the WASI the policy grants, then ``run``.
Runs in an executor process (:mod:`._executor`), which the toolbox kills when the call outlives its time limit.

Per call: a new ``Store`` (nothing survives between calls), its memory limit (``MaxMemoryMB``, counted over every
linear memory and table of the store: a ``memory.grow`` past it fails, and an allocator that then aborts traps), its
epoch deadline (the smaller of ``MaxExecutionTimeSeconds`` and what is left of the call's deadline), and a WASI p2
context holding only:

- the preopened folders of :class:`Preopen` (the work folder first, then the FileSandbox's folders), each at its own
  path inside the component (so a path means the same inside and out);
- the environment of the policy (``policy.env``), nothing inherited;
- no arguments, no stdin; stdout and stderr captured (bounded) for the trace;
- no sockets: with AllowedHosts the network is inherited and name lookups allowed (the C API's two network
  calls), but wasmtime's WASI p2 also needs TCP/UDP allowed, which wasmtime-py cannot set, so
  ``create-tcp-socket`` answers ``access-denied`` either way (docs/WASM.md "Network"). Were it ever allowed, the
  worker's network namespace, whose only way out is the egress proxy for the allowed hosts, would hold it.

A trap ends the call with ``error`` naming it (the time limit, ``unreachable``, an out-of-bounds access); the
executor, the worker and its other calls go on.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import wasmtime
from wasmtime import _ffi as ffi
from wasmtime import component as wc

__all__ = ["CallOutcome", "ComponentRun", "Preopen", "run_once"]

#: Most bytes of stdout and of stderr kept for the trace.
MAX_STDIO_BYTES = 8 * 1024


@dataclass(frozen=True)
class Preopen:
    """A host folder given to the component at the same path, read-write when ``mutable``."""

    path: str
    mutable: bool


@dataclass(frozen=True)
class ComponentRun:
    """What every call of a toolbox shares."""

    engine: wasmtime.Engine
    linker: wc.Linker
    preopens: tuple[Preopen, ...]
    env: tuple[tuple[str, str], ...]
    network: bool
    max_memory_bytes: int


@dataclass
class CallOutcome:
    """``value``: the returned record, or ``None`` with ``trap`` (wasmtime's message) set."""

    value: object = None
    trap: str | None = None
    interrupted: bool = False
    stdout: bytes = b""
    stderr: bytes = b""


class _Capture:
    """A bounded sink for stdout or stderr."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.lock = threading.Lock()

    def __call__(self, chunk: bytes) -> int | None:
        with self.lock:
            room = MAX_STDIO_BYTES - len(self.data)
            if room > 0:
                self.data += chunk[:room]
        return len(chunk)


def _wasi(run: ComponentRun, out: _Capture, err: _Capture) -> wasmtime.WasiConfig:
    wasi = wasmtime.WasiConfig()
    wasi.env = [list(pair) for pair in run.env]
    for p in run.preopens:
        wasi.preopen_dir(p.path, p.path, p.mutable)
    wasi.stdout_custom = out
    wasi.stderr_custom = err
    if run.network:
        # The Python wrapper does not expose these (wasmtime's C API does): the kernel confines where sockets go.
        ffi.wasi_config_inherit_network(wasi.ptr())
        ffi.wasi_config_allow_ip_name_lookup(wasi.ptr(), True)
    return wasi


def _tool_input(data: str | None, log_path: str | None) -> wc.Record:
    record = wc.Record()
    setattr(record, "data", data)  # noqa: B010 - a WIT record: fields are set by name, not declared
    setattr(record, "log-path", log_path)
    return record


def run_once(
    run: ComponentRun,
    component: wc.Component,
    export: wc.ExportIndex,
    *,
    data: str | None,
    log_path: str | None,
    ticks: int,
) -> CallOutcome:
    """Instantiate ``component`` in a fresh store and call its ``run`` export; traps become the outcome."""
    out, err = _Capture(), _Capture()
    outcome = CallOutcome()
    store = wasmtime.Store(run.engine)
    try:
        store.set_wasi(_wasi(run, out, err))
        store.set_limits(memory_size=run.max_memory_bytes, table_elements=1_000_000)
        store.set_epoch_deadline(ticks)
        instance = run.linker.instantiate(store, component)
        func = instance.get_func(store, export)
        if func is None:
            outcome.trap = "the component has no function run in murmur:tool/run@0.2.0"
        else:
            outcome.value = func(store, _tool_input(data, log_path))
    except wasmtime.WasmtimeError as exc:
        message = str(exc)
        outcome.trap = message
        outcome.interrupted = "wasm trap: interrupt" in message
    finally:
        outcome.stdout, outcome.stderr = bytes(out.data), bytes(err.data)
        del store
    return outcome
