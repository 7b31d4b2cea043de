"""The Lua toolbox's view of its config entry (the seed's ``LuaToolbox`` contents), checked once at open.

Keys (capitalised as in the seed): ``Name``, ``Description``, ``MaxMemoryMB``, ``MaxExecutionTimeSeconds``,
``AllowedTools``, ``AllowedHosts``, ``FileSandbox`` (``{"fsbPredicate", "fsbMaxFileSize", "fsbName"}``, paths already
resolved by the supervisor; a missing ``FileSandbox`` denies every path, the seed's default). From the policy extras
under ``"policy"`` it reads ``base_dir`` (what relative paths in scripts are relative to: the directory of the agent
file; default the worker's work folder) and ``max_output_bytes`` (largest JSON text of a script's return values).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from sandbox._file_sandbox import FileSandbox, parse_file_sandbox
from sandbox._predicates import PredicateError

from ._errors import LuaConfigError

__all__ = ["DEFAULT_MAX_MEMORY_MB", "DEFAULT_MAX_SECONDS", "LuaConfig", "parse_config"]

DEFAULT_MAX_MEMORY_MB = 64
DEFAULT_MAX_SECONDS = 30.0
DEFAULT_MAX_OUTPUT_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class LuaConfig:
    """A checked Lua toolbox config. ``file_sandbox.max_file_size`` is ``None`` when the FileSandbox sets no
    limit (``fsbMaxFileSize: null``); absent, it is the seed's 50 MiB."""

    name: str
    description: str
    max_memory_bytes: int
    max_seconds: float
    allowed_tools: tuple[str, ...]
    allowed_hosts: tuple[str, ...]
    file_sandbox: FileSandbox
    base_dir: str
    max_output_bytes: int


def _positive_number(config: dict[str, Any], key: str, default: float) -> float:
    value = config.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise LuaConfigError(f"expected a positive number, got {value!r}", key)
    return float(value)


def _strings(config: dict[str, Any], key: str) -> tuple[str, ...]:
    value = config.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise LuaConfigError(f"expected a list of non-empty strings, got {value!r}", key)
    return tuple(value)


def parse_config(config: dict[str, Any], default_base_dir: str) -> LuaConfig:
    """Check ``config`` and turn it into a :class:`LuaConfig`; raises :class:`LuaConfigError` saying what is wrong."""
    if not isinstance(config, dict):
        raise LuaConfigError("the toolbox entry must be an object")
    name = config.get("Name")
    if not isinstance(name, str) or not name:
        raise LuaConfigError("expected a non-empty string", "Name")
    description = config.get("Description") or "Sandboxed Lua interpreter"
    if not isinstance(description, str):
        raise LuaConfigError("expected a string", "Description")
    memory_mb = _positive_number(config, "MaxMemoryMB", DEFAULT_MAX_MEMORY_MB)
    seconds = _positive_number(config, "MaxExecutionTimeSeconds", DEFAULT_MAX_SECONDS)
    file_sandbox = FileSandbox()
    fsb = config.get("FileSandbox")
    if fsb is not None:
        if not isinstance(fsb, dict) or "fsbPredicate" not in fsb:
            raise LuaConfigError('expected {"fsbPredicate": ..., "fsbMaxFileSize": ...}', "FileSandbox")
        try:
            file_sandbox = parse_file_sandbox(fsb, "/")
        except PredicateError as exc:
            raise LuaConfigError(str(exc)) from exc
    policy = config.get("policy") or {}
    if not isinstance(policy, dict):
        raise LuaConfigError("expected an object", "policy")
    base_dir = policy.get("base_dir") or default_base_dir
    if not isinstance(base_dir, str) or not base_dir.startswith("/"):
        raise LuaConfigError(f"expected an absolute path, got {base_dir!r}", "policy.base_dir")
    max_output = policy.get("max_output_bytes", DEFAULT_MAX_OUTPUT_BYTES)
    if isinstance(max_output, bool) or not isinstance(max_output, int) or max_output <= 0:
        raise LuaConfigError(f"expected a positive integer, got {max_output!r}", "policy.max_output_bytes")
    return LuaConfig(
        name=name,
        description=description,
        max_memory_bytes=int(memory_mb * 1024 * 1024),
        max_seconds=seconds,
        allowed_tools=_strings(config, "AllowedTools"),
        allowed_hosts=tuple(h.lower() for h in _strings(config, "AllowedHosts")),
        file_sandbox=file_sandbox,
        base_dir=base_dir,
        max_output_bytes=max_output,
    )
