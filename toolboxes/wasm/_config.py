"""The WASM toolbox's view of its config entry (the ``WasmToolbox`` contents), checked once at open.

Keys (capitalised as in the seed): ``Name``, ``Description``, ``Path`` (one ``.wasm`` component, or a folder of
them; resolved by the supervisor), ``FileSandbox`` (``{"fsbPredicate", "fsbMaxFileSize", "fsbName"}``; missing:
no path besides the work folder), ``MaxMemoryMB`` (the store's memory limit), ``MaxExecutionTimeSeconds`` (the
epoch deadline of one call) and ``AllowedHosts``. From the policy extras under ``"policy"`` it reads ``env`` (the
only environment a component sees), ``allowed_hosts`` (the agent file's plus the policy's: non-empty means the
worker has the egress bridge, and components get sockets) and ``watch_interval_s`` (how often the folder is
re-listed; default 0.5 s, 0 never).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from sandbox._file_sandbox import FileSandbox, parse_file_sandbox
from sandbox._predicates import PredicateError

from ._errors import WasmConfigError

__all__ = ["DEFAULT_MAX_MEMORY_MB", "DEFAULT_MAX_SECONDS", "DEFAULT_WATCH_INTERVAL_S", "WasmConfig",
           "parse_config"]

DEFAULT_MAX_MEMORY_MB = 64
DEFAULT_MAX_SECONDS = 30.0
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


def _positive_number(config: dict[str, Any], key: str, default: float) -> float:
    value = config.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise WasmConfigError(f"expected a positive number, got {value!r}", key)
    return float(value)


def _strings(value: Any, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise WasmConfigError(f"expected a list of non-empty strings, got {value!r}", key)
    return tuple(value)


def parse_config(config: dict[str, Any]) -> WasmConfig:
    """Check ``config`` and turn it into a :class:`WasmConfig`; raises :class:`WasmConfigError` saying what is
    wrong."""
    if not isinstance(config, dict):
        raise WasmConfigError("the toolbox entry must be an object")
    name = config.get("Name")
    if not isinstance(name, str) or not name:
        raise WasmConfigError("expected a non-empty string", "Name")
    description = config.get("Description") or "WebAssembly components"
    if not isinstance(description, str):
        raise WasmConfigError("expected a string", "Description")
    path = config.get("Path")
    if not isinstance(path, str) or not path.startswith("/"):
        raise WasmConfigError(f"expected an absolute path (the supervisor resolves it), got {path!r}", "Path")
    memory_mb = _positive_number(config, "MaxMemoryMB", DEFAULT_MAX_MEMORY_MB)
    seconds = _positive_number(config, "MaxExecutionTimeSeconds", DEFAULT_MAX_SECONDS)
    file_sandbox = None
    fsb = config.get("FileSandbox")
    if fsb is not None:
        if not isinstance(fsb, dict) or "fsbPredicate" not in fsb:
            raise WasmConfigError('expected {"fsbPredicate": ..., "fsbMaxFileSize": ...}', "FileSandbox")
        try:
            file_sandbox = parse_file_sandbox(fsb, "/")
        except PredicateError as exc:
            raise WasmConfigError(str(exc)) from exc
    policy = config.get("policy") or {}
    if not isinstance(policy, dict):
        raise WasmConfigError("expected an object", "policy")
    env = policy.get("env") or {}
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise WasmConfigError("expected a map of strings", "policy.env")
    hosts = _strings(config.get("AllowedHosts"), "AllowedHosts") + _strings(policy.get("allowed_hosts"),
                                                                             "policy.allowed_hosts")
    interval = policy.get("watch_interval_s", DEFAULT_WATCH_INTERVAL_S)
    if isinstance(interval, bool) or not isinstance(interval, int | float) or not math.isfinite(interval) \
            or interval < 0:
        raise WasmConfigError(f"expected a number of seconds >= 0, got {interval!r}", "policy.watch_interval_s")
    return WasmConfig(
        name=name,
        description=description,
        path=path,
        file_sandbox=file_sandbox,
        max_memory_bytes=int(memory_mb * 1024 * 1024),
        max_seconds=seconds,
        allowed_hosts=tuple(dict.fromkeys(h.lower() for h in hosts)),
        env=tuple(sorted(env.items())),
        watch_interval_s=float(interval),
    )
