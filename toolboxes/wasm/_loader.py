"""Loading one component file: its sidecar, its compiled code (through the cache) and a check that it is a tool.

A component is a tool when it exports ``murmur:tool/run@0.2.0`` with ``run`` and instantiates with what this
toolbox links (WASI p2 only; a component that imports anything else, such as ``wasi:http``, is refused at load with
wasmtime's message naming the import). The check instantiates it once in a store with no folder, no environment and
no network, under the toolbox's memory and time limits.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import wasmtime
from wasmtime import component as wc

from .._toolbox import ToolSpec
from ._discover import sidecar_path
from ._errors import ComponentLoadError
from ._sidecar import parse_sidecar

if TYPE_CHECKING:
    from ._call import ComponentRun
    from ._engine import CompileCache, EpochClock

__all__ = ["EXPORT", "LoadedComponent", "load_component"]

EXPORT = "murmur:tool/run@0.2.0"
#: Largest component file read.
MAX_COMPONENT_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class LoadedComponent:
    """A component ready to call, and the tool it is."""

    path: str
    spec: ToolSpec
    component: wc.Component
    run_export: wc.ExportIndex
    from_cache: bool


def _read(path: str, limit: int, what: str) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        raise ComponentLoadError(f"{path}: the {what} cannot be opened: {exc.strerror}") from exc
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ComponentLoadError(f"{path}: the {what} is larger than {limit} bytes")
    return data


def _check_instantiates(run: ComponentRun, component: wc.Component, path: str, clock: EpochClock, ticks: int) -> None:
    store = wasmtime.Store(run.engine)
    store.set_wasi(wasmtime.WasiConfig())
    store.set_limits(memory_size=run.max_memory_bytes, table_elements=1_000_000)
    store.set_epoch_deadline(ticks)  # start functions run guest code: the call's time limit holds for them too
    try:
        with clock.running():
            run.linker.instantiate(store, component)
    except wasmtime.WasmtimeError as exc:
        raise ComponentLoadError(
            f"{path}: the component does not instantiate here (this toolbox links WASI p2 "
            "only, within MaxMemoryMB and MaxExecutionTimeSeconds): "
            f"{str(exc).strip()}"
        ) from exc


def load_component(
    path: str, tool_name: str, run: ComponentRun, cache: CompileCache, clock: EpochClock, ticks: int
) -> LoadedComponent:
    """Load the component at ``path`` as the tool ``tool_name`` (the instantiation check gets ``ticks`` of
    ``clock``); raises :class:`ComponentLoadError`."""
    side = sidecar_path(path)
    if not os.path.exists(side):
        raise ComponentLoadError(
            f"{path}: no sidecar {os.path.basename(side)} beside it; write one with "
            '{"description": "...", "inputSchema": {"type": "object", ...}} (see docs/WASM.md)'
        )
    sidecar = parse_sidecar(_read(side, 1 << 20, "sidecar"), side)
    wasm = _read(path, MAX_COMPONENT_BYTES, "component")
    try:
        component, cached = cache.load(wasm)
    except wasmtime.WasmtimeError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "invalid"
        raise ComponentLoadError(f"{path}: not a WebAssembly component wasmtime can compile: {first}") from exc
    interface = component.get_export_index(EXPORT)
    run_export = component.get_export_index("run", interface) if interface is not None else None
    if run_export is None:
        raise ComponentLoadError(
            f"{path}: the component does not export {EXPORT} with a function run (the world of seed 000)"
        )
    _check_instantiates(run, component, path, clock, ticks)
    return LoadedComponent(
        path, ToolSpec(tool_name, sidecar.description, sidecar.input_schema), component, run_export, cached
    )
