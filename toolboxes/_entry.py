"""Checks of the keys several toolbox kinds' entries share (the Lua and WASM toolboxes'): ``Name``,
``Description``, ``MaxMemoryMB``, ``MaxExecutionTimeSeconds``, lists of strings (``AllowedHosts``...), the
``FileSandbox`` (``{"fsbPredicate", "fsbMaxFileSize", "fsbName"}``, paths already resolved by the supervisor) and the
policy extras object under ``"policy"``; and the response-size cap the OpenAPI, PostgREST and MCP toolboxes read from
the policy's ``output_bytes`` limit (:func:`output_cap`).

Each check raises the kind's own config error, made by ``error(message, key)`` (``LuaConfigError``,
``WasmConfigError``), so a message names the key: ``MaxMemoryMB: expected a positive number, got 0``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sandbox import FileSandbox, PredicateError, parse_file_sandbox

__all__ = [
    "DEFAULT_MAX_MEMORY_MB",
    "DEFAULT_MAX_SECONDS",
    "DEFAULT_OUTPUT_BYTES",
    "ConfigErrorType",
    "Limits",
    "file_sandbox",
    "limits",
    "name_and_description",
    "output_cap",
    "policy_extras",
    "positive_number",
    "strings",
]

#: Makes a kind's config error from a message and the key it is about.
ConfigErrorType = Callable[[str, str], Exception]

DEFAULT_MAX_MEMORY_MB = 64
DEFAULT_MAX_SECONDS = 30.0
#: The response-size cap when the policy sets no ``output_bytes`` limit.
DEFAULT_OUTPUT_BYTES = 1024 * 1024


def output_cap(config: dict[str, Any], env_limits: dict[str, Any] | None) -> int:
    """The response-size cap: the policy's ``output_bytes`` limit (``config["policy"]["limits"]``, else the worker
    env's limits), or :data:`DEFAULT_OUTPUT_BYTES` when it is missing or not a positive integer."""
    limits = (config.get("policy") or {}).get("limits") or env_limits or {}
    value = limits.get("output_bytes")
    return int(value) if isinstance(value, int) and value > 0 else DEFAULT_OUTPUT_BYTES


@dataclass(frozen=True)
class Limits:
    """``MaxMemoryMB`` in bytes and ``MaxExecutionTimeSeconds``."""

    max_memory_bytes: int
    max_seconds: float


def positive_number(config: dict[str, Any], key: str, default: float, error: ConfigErrorType) -> float:
    """``config[key]``, a finite number > 0, or ``default`` when it is missing or null."""
    value = config.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise error(f"expected a positive number, got {value!r}", key)
    return float(value)


def strings(value: Any, key: str, error: ConfigErrorType) -> tuple[str, ...]:
    """``value``, a list of non-empty strings (null: none), as a tuple."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise error(f"expected a list of non-empty strings, got {value!r}", key)
    return tuple(value)


def name_and_description(config: Any, default_description: str, error: ConfigErrorType) -> tuple[str, str]:
    """The entry's ``Name`` (a non-empty string) and ``Description`` (a string; empty or missing: the default).
    Checks first that the entry is an object."""
    if not isinstance(config, dict):
        raise error("the toolbox entry must be an object", "")
    name = config.get("Name")
    if not isinstance(name, str) or not name:
        raise error("expected a non-empty string", "Name")
    description = config.get("Description") or default_description
    if not isinstance(description, str):
        raise error("expected a string", "Description")
    return name, description


def limits(config: dict[str, Any], error: ConfigErrorType) -> Limits:
    """``MaxMemoryMB`` (default :data:`DEFAULT_MAX_MEMORY_MB`) and ``MaxExecutionTimeSeconds`` (default
    :data:`DEFAULT_MAX_SECONDS`)."""
    memory_mb = positive_number(config, "MaxMemoryMB", DEFAULT_MAX_MEMORY_MB, error)
    seconds = positive_number(config, "MaxExecutionTimeSeconds", DEFAULT_MAX_SECONDS, error)
    return Limits(int(memory_mb * 1024 * 1024), seconds)


def file_sandbox(config: dict[str, Any], error: ConfigErrorType) -> FileSandbox | None:
    """The entry's ``FileSandbox``, or ``None`` when it has none (each kind says what that means)."""
    fsb = config.get("FileSandbox")
    if fsb is None:
        return None
    if not isinstance(fsb, dict) or "fsbPredicate" not in fsb:
        raise error('expected {"fsbPredicate": ..., "fsbMaxFileSize": ...}', "FileSandbox")
    try:
        return parse_file_sandbox(fsb, "/")
    except PredicateError as exc:
        raise error(str(exc), "") from exc


def policy_extras(config: dict[str, Any], error: ConfigErrorType) -> dict[str, Any]:
    """The policy's extras under ``"policy"`` (missing: none)."""
    policy = config.get("policy") or {}
    if not isinstance(policy, dict):
        raise error("expected an object", "policy")
    return policy
