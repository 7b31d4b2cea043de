"""The WASM toolbox: WebAssembly components of the ``murmur:tool@0.2.0`` world (seed 000), one tool each, run by
wasmtime in executor processes of the confined worker (killed when a call outlives its time limit) with a store
memory limit, an epoch deadline and WASI p2 holding only what the policy grants."""

from ._errors import ComponentLoadError, WasmConfigError
from ._toolbox import WasmToolbox, open_toolbox

__all__ = ["ComponentLoadError", "WasmConfigError", "WasmToolbox", "open_toolbox"]
