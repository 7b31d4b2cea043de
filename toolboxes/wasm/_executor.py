"""An executor: the process in which the WASM toolbox's components run, one call at a time, so that a call can be
stopped whatever the component does.

wasmtime's epoch deadline traps a component only in its own code: a component blocked in a WASI host call
(``wasi:clocks`` ``subscribe-duration`` then ``pollable.block``, a ``poll``, a read of a FIFO) runs host code that
never looks at the epoch, and no thread can interrupt it. So the toolbox (:mod:`._executors`) runs each call in an
executor process of its own worker (same uid, same Landlock domain, seccomp filter, namespaces and cgroup: a child
of the worker inherits them all) and, when the call outlives its time limit, kills the process and starts another.

Forked from the worker as it opens the toolbox (:mod:`._executor_fork`), or started as ``python -I -B -c
<bootstrap>``, with pipes on stdin and stdout (the worker protocol's
frames, directions ``to_executor`` and ``from_executor``: ``toolboxes._protocol``, read by :mod:`._executor_wire`);
stderr is the worker's. It reads one ``setup`` frame (the engine's memory limit and copy-on-write setting, the file
size limit, the preopens, the environment, the network switch), answers ``ready``, then serves requests until end of
file, each answered ``answer`` (or ``failed {error}``):

- ``check {key, compiled?, ticks}``: instantiate the component in a store with no folder, no environment and no
  network (start functions are guest code: the epoch deadline holds) -> ``answer {trap}``;
- ``call {key, compiled?, data, log_path, ticks}``: one call in a fresh store (:func:`._call.run_once`) ->
  ``answer {value, trap, interrupted, stdout, stderr, file_size_hit}``, the returned record as plain data
  (:func:`plain`).

``compiled`` (the serialized component, made by the toolbox's compile cache with the same engine settings) comes
with the first request for a ``key`` (the component's digest); the executor keeps what it deserialized. The file
size limit is applied here (``RLIMIT_FSIZE`` lowered, ``SIGXFSZ`` counted on the main thread, which runs every
call): one call at a time, so a refused write is the call's own.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import wasmtime
from wasmtime import component as wc

from ._call import ComponentRun, Preopen, run_once
from ._engine import EpochClock, make_engine
from ._executor_wire import PeerGone, read_blocking, write_frame
from ._file_size import FileSizeLimit, FileSizeWatch

__all__ = ["main", "plain"]

EXPORT = "murmur:tool/run@0.2.0"


def plain(value: Any) -> Any:
    """A value wasmtime lifted (records with fields as attributes, tuples, lists, strings, numbers) as msgpack-able
    data: a record becomes a map of its WIT field names."""
    if isinstance(value, wc.Record):
        return {k: plain(v) for k, v in vars(value).items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if value is None or isinstance(value, str | bool | int | float | bytes):
        return value
    return str(value)  # an enum case or variant the seed's world does not have: the result check refuses it


class _Executor:
    def __init__(self, setup: dict[str, Any]) -> None:
        engine, _settings = make_engine(int(setup["max_memory"]), bool(setup["copy_on_write"]))
        linker = wc.Linker(engine)
        linker.add_wasip2()
        self.run = ComponentRun(
            engine,
            linker,
            tuple(Preopen(str(p), bool(m)) for p, m in setup["preopens"]),
            tuple((str(k), str(v)) for k, v in setup["env"]),
            bool(setup["network"]),
            int(setup["max_memory"]),
        )
        self.clock = EpochClock(engine)
        limit = setup.get("file_size")
        self.watch = FileSizeWatch.install(FileSizeLimit(int(limit[0]), str(limit[1]))) if limit else None
        self.components: dict[str, tuple[wc.Component, wc.ExportIndex]] = {}

    def _component(self, request: dict[str, Any]) -> tuple[wc.Component, wc.ExportIndex]:
        key = str(request["key"])
        if key not in self.components:
            compiled = request.get("compiled")
            if not isinstance(compiled, bytes):
                raise LookupError(f"no compiled component {key} was sent")
            component = wc.Component.deserialize(self.run.engine, compiled)
            interface = component.get_export_index(EXPORT)
            export = component.get_export_index("run", interface) if interface is not None else None
            if export is None:
                raise LookupError(f"the component does not export {EXPORT} with a function run")
            self.components[key] = (component, export)
        return self.components[key]

    def check(self, request: dict[str, Any]) -> dict[str, Any]:
        component, _export = self._component(request)
        store = wasmtime.Store(self.run.engine)
        store.set_wasi(wasmtime.WasiConfig())
        store.set_limits(memory_size=self.run.max_memory_bytes, table_elements=1_000_000)
        store.set_epoch_deadline(int(request["ticks"]))
        try:
            with self.clock.running():
                self.run.linker.instantiate(store, component)
        except wasmtime.WasmtimeError as exc:
            return {"t": "answer", "trap": str(exc).strip()}
        finally:
            del store
        return {"t": "answer", "trap": None}

    def call(self, request: dict[str, Any]) -> dict[str, Any]:
        component, export = self._component(request)
        mark = self.watch.mark() if self.watch is not None else 0
        with self.clock.running():
            outcome = run_once(
                self.run,
                component,
                export,
                data=request.get("data"),
                log_path=request.get("log_path"),
                ticks=int(request["ticks"]),
            )
        return {
            "t": "answer",
            "value": plain(outcome.value),
            "trap": outcome.trap,
            "interrupted": outcome.interrupted,
            "stdout": outcome.stdout,
            "stderr": outcome.stderr,
            "file_size_hit": self.watch.hit_since(mark) if self.watch is not None else False,
        }


def main() -> None:
    """Serve the toolbox on stdin/stdout until end of file (see the module docstring); exits."""
    in_fd, out_fd = 0, os.dup(1)
    os.dup2(2, 1)  # stdout is the channel: nothing a library prints may reach it
    sys.stdout = sys.stderr
    try:
        setup, frames = read_blocking(in_fd)
        if setup is None:
            os._exit(0)
        if setup["t"] != "setup":
            raise ValueError(f"the first frame is {setup['t']!r}, not setup")
        executor = _Executor(setup)
    except Exception as exc:  # the toolbox reads this reply and reports it; the process ends
        write_frame(out_fd, {"t": "failed", "error": f"the executor could not start: {type(exc).__name__}: {exc}"})
        os._exit(1)
    write_frame(out_fd, {"t": "ready"})
    while True:
        try:
            request, frames = read_blocking(in_fd, frames)
        except PeerGone:
            os._exit(1)
        if request is None:
            os._exit(0)
        try:
            reply = executor.check(request) if request["t"] == "check" else executor.call(request)
        except Exception as exc:  # a component the executor cannot use: that request's answer, not the end
            reply = {"t": "failed", "error": f"{type(exc).__name__}: {exc}"}
        try:
            write_frame(out_fd, reply)
        except OSError:
            os._exit(1)
