"""The WASM toolbox's view of its config entry (the ``WasmToolbox`` contents), checked once at open.

Keys (capitalised as in the seed): ``Name``, ``Description``, ``Path`` (one ``.wasm`` component, or a folder of
them; resolved by the supervisor), ``FileSandbox`` (``{"fsbPredicate", "fsbMaxFileSize", "fsbName"}``; missing:
no path besides the work folder), ``MaxMemoryMB`` (the store's memory limit), ``MaxExecutionTimeSeconds`` (the
epoch deadline of one call) and ``AllowedHosts``; the checks the Lua toolbox shares are in
:mod:`toolboxes._entry`. From the policy extras under ``"policy"`` it reads ``env`` (the only environment a
component sees), ``allowed_hosts`` (the agent file's plus the policy's: non-empty means the worker has the egress
bridge) and ``watch_interval_s`` (how often the folder is re-listed; default 0.5 s, 0 never).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._entry import file_sandbox, limits, name_and_description, policy_extras, strings
from ._errors import WasmConfigError

if TYPE_CHECKING:
    from sandbox import FileSandbox

__all__ = ["DEFAULT_WATCH_INTERVAL_S", "WasmConfig", "parse_config"]

DEFAULT_WATCH_INTERVAL_S = 0.5


@dataclass(frozen=True)
class WasmConfig:
    """A checked WASM toolbox config. ``file_sandbox`` is ``None`` when the entry has none (no extra paths)."""

    name: str
    description: str
    path: str
    file_sandbox: FileSandbox | None
    max_memory_bytes: int
    max_seconds: float
    allowed_hosts: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    watch_interval_s: float


def parse_config(config: dict[str, Any]) -> WasmConfig:
    """Check ``config`` and turn it into a :class:`WasmConfig`; raises :class:`WasmConfigError` saying what is
    wrong."""
    name, description = name_and_description(config, "WebAssembly components", WasmConfigError)
    path = config.get("Path")
    if not isinstance(path, str) or not path.startswith("/"):
        raise WasmConfigError(f"expected an absolute path (the supervisor resolves it), got {path!r}", "Path")
    bounds = limits(config, WasmConfigError)
    fsb = file_sandbox(config, WasmConfigError)
    policy = policy_extras(config, WasmConfigError)
    env = policy.get("env") or {}
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise WasmConfigError("expected a map of strings", "policy.env")
    hosts = strings(config.get("AllowedHosts"), "AllowedHosts", WasmConfigError) + strings(
        policy.get("allowed_hosts"), "policy.allowed_hosts", WasmConfigError
    )
    interval = policy.get("watch_interval_s", DEFAULT_WATCH_INTERVAL_S)
    if (
        isinstance(interval, bool)
        or not isinstance(interval, int | float)
        or not math.isfinite(interval)
        or interval < 0
    ):
        raise WasmConfigError(f"expected a number of seconds >= 0, got {interval!r}", "policy.watch_interval_s")
    return WasmConfig(
        name=name,
        description=description,
        path=path,
        file_sandbox=fsb,
        max_memory_bytes=bounds.max_memory_bytes,
        max_seconds=bounds.max_seconds,
        allowed_hosts=tuple(dict.fromkeys(h.lower() for h in hosts)),
        env=tuple(sorted(env.items())),
        watch_interval_s=float(interval),
    )
