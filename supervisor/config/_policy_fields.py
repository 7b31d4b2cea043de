"""The value types of the policy's fields: sizes with units, paths resolved against the policy file, CIDRs,
environment maps, toolbox keys and agent slugs. Each refuses a bad value with a :func:`~._errors.problem` that
says what to write instead.

Sizes (``*_bytes``) accept an integer or a string with a unit (``"256MiB"``, ``"1GB"``: KiB/MiB/GiB/TiB are
powers of 1024, KB/MB/GB/TB of 1000, B bytes). Relative paths resolve against the policy file's directory, via the
validation context ``{"base_dir": ...}``.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, ValidationInfo, WithJsonSchema

from ._errors import problem

__all__ = [
    "ENV_NAME_RE",
    "MAX_ID",
    "MAX_SIZE",
    "AbsolutePath",
    "Cidr",
    "Env",
    "NamedPath",
    "PolicyPath",
    "Size",
    "Slug",
    "ToolboxKey",
    "check_slug",
    "parse_size",
    "resolve_path",
]

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")
_SIZE_EXPECTED = 'a byte count: an integer, or a number with a unit such as "256MiB" or "1GB"'
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TOOLBOX_KEY_RE = re.compile(r"^([A-Za-z0-9_-]{1,64}/)?[A-Za-z0-9_-]{1,64}$")
_SLUG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


#: Largest size a limit may have (the kernel's rlimits and cgroup files take 64-bit values; 2^62 is far beyond
#: any machine and leaves room for arithmetic).
MAX_SIZE = 1 << 62
#: Largest uid or gid (4294967295 is "no id" to the kernel).
MAX_ID = 4294967294


def parse_size(value: Any) -> int:
    """A size in bytes from an integer or a string like ``"256MiB"``; ``ValueError`` says what to write."""
    if isinstance(value, bool):
        raise ValueError(f"expected {_SIZE_EXPECTED}, got a boolean")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"a size cannot be negative: {value}")
        if value > MAX_SIZE:
            raise ValueError(f"the size {value} is larger than the kernel takes (at most 2^62 bytes, 4 EiB)")
        return value
    if isinstance(value, str):
        match = _SIZE_RE.match(value)
        if match and match.group(2).lower() in _UNITS:
            number, unit = match.groups()
            scaled = float(number) * _UNITS[unit.lower()] if "." in number else int(number) * _UNITS[unit.lower()]
            if not math.isfinite(scaled) or scaled > MAX_SIZE:
                raise ValueError(f"the size {value!r} is larger than the kernel takes (at most 2^62 bytes, 4 EiB)")
            if scaled != int(scaled):
                raise ValueError(f"{value!r} is not a whole number of bytes")
            return int(scaled)
        raise ValueError(f"invalid size {value!r}; expected {_SIZE_EXPECTED}")
    raise ValueError(f"expected {_SIZE_EXPECTED}, got {type(value).__name__}")


def _size(value: Any) -> int:
    try:
        return parse_size(value)
    except ValueError as exc:
        raise problem(str(exc).split("; expected")[0], _SIZE_EXPECTED) from exc


def _base_dir(info: ValidationInfo) -> str:
    ctx = info.context if isinstance(info.context, Mapping) else {}
    return str(ctx.get("base_dir") or os.getcwd())


def resolve_path(value: str, info: ValidationInfo) -> str:
    if not value or "\x00" in value:
        raise problem("empty path or NUL byte in path", "a file or directory path")
    return os.path.realpath(os.path.join(_base_dir(info), os.path.expanduser(value)))


def _absolute(value: str) -> str:
    if not value.startswith("/") or "\x00" in value:
        raise problem(f"not an absolute path: {value!r}", "an absolute path such as /usr")
    return os.path.normpath(value)


def _cidr(value: str) -> str:
    try:
        return str(ipaddress.ip_network(value))
    except ValueError as exc:
        raise problem(f"invalid network {value!r}: {exc}", "a CIDR such as 10.0.0.0/8 or fd00::/8") from exc


def _env(values: dict[str, str]) -> dict[str, str]:
    for name, value in values.items():
        if not ENV_NAME_RE.match(name):
            raise problem(f"invalid environment variable name {name!r}", "letters, digits and '_'")
        if "\x00" in value:
            raise problem(f"the value of {name} contains a NUL byte")
    return values


Size = Annotated[
    int,
    BeforeValidator(_size),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0},
                {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*([KMGTkmgt][iI]?[Bb]|[Bb])?\s*$"},
            ]
        }
    ),
]


def _toolbox_key(value: str) -> str:
    if not _TOOLBOX_KEY_RE.match(value):
        raise problem(f"invalid toolbox key {value!r}", "a toolbox name, or agent-slug/name")
    return value


ToolboxKey = Annotated[
    str, AfterValidator(_toolbox_key), WithJsonSchema({"type": "string", "pattern": _TOOLBOX_KEY_RE.pattern})
]


def _named(value: str, info: ValidationInfo) -> str:
    """An agent file's path as the policy names it, made absolute but not resolved (a slug may be bound to the
    name: ``plan/_agent_bindings.py``)."""
    if not value or "\x00" in value:
        raise problem("empty path or NUL byte in path", "a file path")
    return os.path.join(_base_dir(info), os.path.expanduser(value))


PolicyPath = Annotated[str, AfterValidator(resolve_path)]
NamedPath = Annotated[str, AfterValidator(_named)]
AbsolutePath = Annotated[str, AfterValidator(_absolute)]
Cidr = Annotated[str, AfterValidator(_cidr)]
Env = Annotated[dict[str, str], AfterValidator(_env)]


def check_slug(value: str) -> str:
    """``value`` if it is an agent's slug (letters, digits, ``_.-``, at most 128), else a problem."""
    if not _SLUG_RE.match(value):
        raise problem(f"invalid agent slug {value!r}", "an agent's slug")
    return value


Slug = Annotated[str, AfterValidator(check_slug)]
