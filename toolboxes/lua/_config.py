"""The Lua toolbox's view of its config entry (the seed's ``LuaToolbox`` contents), checked once at open.

Keys (capitalised as in the seed): ``Name``, ``Description``, ``MaxMemoryMB``, ``MaxExecutionTimeSeconds``,
``AllowedTools``, ``AllowedHosts``, ``FileSandbox`` (``{"fsbPredicate", "fsbMaxFileSize", "fsbName"}``, paths already
resolved by the supervisor; a missing ``FileSandbox`` denies every path, the seed's default); the checks the WASM
toolbox shares are in :mod:`toolboxes._entry`. From the policy extras under ``"policy"`` it reads ``base_dir`` (what
relative paths in scripts are relative to: the directory of the agent file; default the worker's work folder) and
``max_output_bytes`` (largest JSON text of a script's return values).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sandbox import FileSandbox

from .._entry import file_sandbox, limits, name_and_description, policy_extras, strings
from ._errors import LuaConfigError

__all__ = ["LuaConfig", "parse_config"]

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


def parse_config(config: dict[str, Any], default_base_dir: str) -> LuaConfig:
    """Check ``config`` and turn it into a :class:`LuaConfig`; raises :class:`LuaConfigError` saying what is wrong."""
    name, description = name_and_description(config, "Sandboxed Lua interpreter", LuaConfigError)
    bounds = limits(config, LuaConfigError)
    fsb = file_sandbox(config, LuaConfigError) or FileSandbox()
    policy = policy_extras(config, LuaConfigError)
    base_dir = policy.get("base_dir") or default_base_dir
    if not isinstance(base_dir, str) or not base_dir.startswith("/"):
        raise LuaConfigError(f"expected an absolute path, got {base_dir!r}", "policy.base_dir")
    max_output = policy.get("max_output_bytes", DEFAULT_MAX_OUTPUT_BYTES)
    if isinstance(max_output, bool) or not isinstance(max_output, int) or max_output <= 0:
        raise LuaConfigError(f"expected a positive integer, got {max_output!r}", "policy.max_output_bytes")
    return LuaConfig(
        name=name,
        description=description,
        max_memory_bytes=bounds.max_memory_bytes,
        max_seconds=bounds.max_seconds,
        allowed_tools=strings(config.get("AllowedTools"), "AllowedTools", LuaConfigError),
        allowed_hosts=tuple(h.lower() for h in strings(config.get("AllowedHosts"), "AllowedHosts", LuaConfigError)),
        file_sandbox=fsb,
        base_dir=base_dir,
        max_output_bytes=max_output,
    )
