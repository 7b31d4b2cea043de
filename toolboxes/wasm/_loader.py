"""Loading one component file: its sidecar, its compiled code (through the cache) and a check that it is a tool.

A component is a tool when it exports ``murmur:tool/run@0.2.0`` with ``run`` and instantiates with what this
toolbox links (WASI p2 only; a component that imports anything else, such as ``wasi:http``, is refused at load with
wasmtime's message naming the import). The check instantiates it once, in an executor (:mod:`._executors`: start
functions are guest code, and may block in a host call), in a store with no folder, no environment and no network,
under the toolbox's memory and time limits.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import wasmtime

from .._toolbox import ToolSpec
from ._discover import sidecar_path
from ._errors import ComponentLoadError
from ._executors import ExecutorStopped
from ._sidecar import parse_sidecar

if TYPE_CHECKING:
    from ._engine import CompileCache
    from ._executors import ExecutorPool

__all__ = ["EXPORT", "LoadedComponent", "load_component"]

EXPORT = "murmur:tool/run@0.2.0"
#: Largest component file read.
MAX_COMPONENT_BYTES = 256 * 1024 * 1024


#: How much longer than the time limit a request waits for an executor's answer before it kills the executor: the
#: epoch deadline traps guest code within a tick or two; only a component blocked in a host call needs the kill.
GRACE_S = 0.5


@dataclass(frozen=True)
class LoadedComponent:
    """A component ready to call, and the tool it is. ``key``: the digest of its compiled form, which executors
    deserialize (``compiled``) the first time they run it."""

    path: str
    spec: ToolSpec
    key: str
    compiled: bytes
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


def _check_instantiates(pool: ExecutorPool, key: str, compiled: bytes, path: str, seconds: float, ticks: int) -> None:
    message = {"t": "check", "key": key, "ticks": ticks}
    try:
        answer = pool.request(message, compiled, timeout_s=seconds + GRACE_S)
    except ExecutorStopped as exc:
        why = (
            f"it was still instantiating after MaxExecutionTimeSeconds ({seconds:g} s) and was stopped"
            if exc.reason == "deadline"
            else f"its check could not run: {exc}"
        )
        raise ComponentLoadError(f"{path}: the component does not instantiate here: {why}") from exc
    problem = answer.get("error") or answer.get("trap")
    if problem:
        raise ComponentLoadError(
            f"{path}: the component does not instantiate here (this toolbox links WASI p2 "
            "only, within MaxMemoryMB and MaxExecutionTimeSeconds): "
            f"{str(problem).strip()}"
        )


def load_component(
    path: str, tool_name: str, cache: CompileCache, pool: ExecutorPool, seconds: float, ticks: int
) -> LoadedComponent:
    """Load the component at ``path`` as the tool ``tool_name``: compiled here (or taken from ``cache``), checked
    in an executor of ``pool`` (``ticks`` of epoch deadline, ``seconds`` before the executor is killed); raises
    :class:`ComponentLoadError`."""
    side = sidecar_path(path)
    if not os.path.exists(side):
        raise ComponentLoadError(
            f"{path}: no sidecar {os.path.basename(side)} beside it; write one with "
            '{"description": "...", "inputSchema": {"type": "object", ...}} (see docs/WASM.md)'
        )
    sidecar = parse_sidecar(_read(side, 1 << 20, "sidecar"), side)
    wasm = _read(path, MAX_COMPONENT_BYTES, "component")
    try:
        component, compiled, cached = cache.load(wasm)
    except wasmtime.WasmtimeError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "invalid"
        raise ComponentLoadError(f"{path}: not a WebAssembly component wasmtime can compile: {first}") from exc
    interface = component.get_export_index(EXPORT)
    run_export = component.get_export_index("run", interface) if interface is not None else None
    if run_export is None:
        raise ComponentLoadError(
            f"{path}: the component does not export {EXPORT} with a function run (the world of seed 000)"
        )
    key = hashlib.sha256(compiled).hexdigest()
    _check_instantiates(pool, key, compiled, path, seconds, ticks)
    return LoadedComponent(path, ToolSpec(tool_name, sidecar.description, sidecar.input_schema), key, compiled, cached)
