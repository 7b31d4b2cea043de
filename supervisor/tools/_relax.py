"""The seed's ``ValidationConfig`` (``allowExtraProperties``, ``strictMode``): what arguments that fail the strict
check may become before they are refused. Pure.

- ``allow_extra_properties``: a property the schema does not allow (``additionalProperties: false``) is left out of
  what the tool receives, instead of refusing the call (``extra: Unknown property``). The worker still sees only
  arguments its schema accepts.
- ``strict_mode`` off: a string that spells what the schema expects is read as it (``"42"`` for an integer or a
  number, ``"true"``/``"false"`` for a boolean), instead of refusing the call (``count: Expected integer but got
  string``). On (the default), such a string is an error, as the seed's strict mode makes its warnings errors.

Each change is a note (``count: the string '42' was read as the integer 42``) that the portal adds to the call's
result (metadata ``validation_warning``). What is left after the changes is validated again, strictly; only then
does the changed copy go to the tool (the caller's arguments are never changed in place). Only problems the
validator reports at their own place are mended: one inside an ``anyOf``/``oneOf`` branch is reported as usual.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._validation import ArgumentValidator, FieldError

__all__ = ["Relaxed", "ValidationConfig", "relax"]

_INTEGER = re.compile(r"[+-]?[0-9]{1,30}")
_NUMBER = re.compile(r"[+-]?([0-9]{1,30}(\.[0-9]{0,30})?|\.[0-9]{1,30})([eE][+-]?[0-9]{1,3})?")
#: rounds of mending: a property left out may uncover nothing new, but a bounded loop needs no proof of that
_ROUNDS = 3


@dataclass(frozen=True)
class ValidationConfig:
    """The seed's ``ValidationConfig``: ``allowExtraProperties`` and ``strictMode`` (the policy's ``validation``)."""

    allow_extra_properties: bool = False
    strict_mode: bool = True

    @property
    def relaxed(self) -> bool:
        """Whether anything would be mended (the defaults mend nothing)."""
        return self.allow_extra_properties or not self.strict_mode


@dataclass(frozen=True)
class Relaxed:
    """The outcome: ``errors`` left (empty: call the tool with ``args``), and a ``notes`` line per change."""

    args: Any
    errors: list[FieldError]
    notes: list[str] = field(default_factory=list)


def _where(path: Any) -> str:
    parts: list[str] = []
    for p in path:
        parts.append(f"[{p}]" if isinstance(p, int) else ("." if parts else "") + str(p))
    return "".join(parts)


def _read_as(text: str, expected: Any) -> tuple[bool, Any, str]:
    """``(True, value, kind)`` when ``text`` spells a value of a type in ``expected``."""
    types = [expected] if isinstance(expected, str) else list(expected or [])
    stripped = text.strip()
    if "integer" in types and _INTEGER.fullmatch(stripped):
        return True, int(stripped), "integer"
    if "number" in types and _NUMBER.fullmatch(stripped):
        number = float(stripped)
        if math.isfinite(number):
            return True, int(number) if _INTEGER.fullmatch(stripped) else number, "number"
    if "boolean" in types and stripped.lower() in ("true", "false"):
        return True, stripped.lower() == "true", "boolean"
    return False, None, ""


def _container(root: Any, path: Any) -> Any:
    node = root
    for p in path:
        node = node[p]
    return node


def _mend(
    validator: ArgumentValidator, args: dict[str, Any], problems: list[Any], config: ValidationConfig, notes: list[str]
) -> bool:
    changed = False
    for e in problems:
        path = list(e.absolute_path)
        if (
            config.allow_extra_properties
            and e.validator == "additionalProperties"
            and e.validator_value is False
            and isinstance(e.instance, dict)
        ):
            target = _container(args, path)
            for key in validator.extra_keys(e):
                del target[key]
                notes.append(f"{_where([*path, key])}: not a property of this tool; left out (allowExtraProperties)")
                changed = True
        elif not config.strict_mode and e.validator == "type" and isinstance(e.instance, str) and path:
            ok, value, kind = _read_as(e.instance, e.validator_value)
            if ok:
                _container(args, path[:-1])[path[-1]] = value
                notes.append(
                    f"{_where(path)}: the string {e.instance!r} was read as the {kind} {value!r} (strictMode off)"
                )
                changed = True
    return changed


def relax(validator: ArgumentValidator, args: Any, config: ValidationConfig) -> Relaxed:
    """What ``config`` makes of ``args`` (which failed the strict check; a dict, else nothing is mended)."""
    errors = validator.errors(args)
    if not errors or not config.relaxed or not isinstance(args, dict):
        return Relaxed(args, errors)
    mended: dict[str, Any] = copy.deepcopy(args)
    notes: list[str] = []
    for _ in range(_ROUNDS):
        problems = validator.raw_errors(mended)
        if not problems or not _mend(validator, mended, problems, config, notes):
            break
    left = validator.errors(mended)
    return Relaxed(args, left) if left else Relaxed(mended, [], notes)
