"""From a call's JSON arguments to a script's command line and stdin (pure code).

Arguments are taken in describe order. For each one:

- ``positional`` (alias ``space``): the value is one argv element;
- ``dashdashspace``: ``--name`` then the value, two argv elements;
- ``dashdashequal``: ``--name=value``, one argv element;
- ``stdin``: the value and a newline are appended to the script's stdin.

Arity ``single`` must be present; ``optional`` may be absent or ``null`` (nothing is added); ``multiple`` is a list
and each element is rendered as above (the flag repeats). Values are rendered as text: strings as they are, booleans
as ``true``/``false``, numbers in their JSON form, anything else as JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._spec import ScriptArg, ScriptSpec

__all__ = ["ArgumentError", "Invocation", "build_invocation", "render_value"]


class ArgumentError(ValueError):
    """An argument cannot be put on a command line (missing, wrong shape, NUL byte). The message is for the agent."""


@dataclass(frozen=True)
class Invocation:
    """What to run after ``SCRIPT run``: the extra argv and the stdin bytes (``None``: stdin is closed at once)."""

    argv: tuple[str, ...]
    stdin: bytes | None


def render_value(value: Any) -> str:
    """Render one JSON value as command-line text."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 2**53 else json.dumps(value)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _values(arg: ScriptArg, args: dict[str, Any]) -> list[str]:
    value = args.get(arg.name)
    if arg.arity == "single":
        if value is None:
            raise ArgumentError(f"argument {arg.name!r} is required")
        values = [value]
    elif arg.arity == "optional":
        values = [] if value is None else [value]
    else:
        if value is None:
            values = []
        elif isinstance(value, list):
            values = value
        else:
            raise ArgumentError(f"argument {arg.name!r} takes a list of values")
    rendered = [render_value(v) for v in values]
    for text in rendered:
        if "\x00" in text:
            raise ArgumentError(f"argument {arg.name!r} contains a NUL character, which a command line cannot carry")
    return rendered


def build_invocation(spec: ScriptSpec, args: dict[str, Any]) -> Invocation:
    """Build the argv tail and stdin for ``args``. Raises :class:`ArgumentError` for a missing required argument or
    a value that cannot be passed. Arguments the script does not declare are refused too (the supervisor's schema
    check normally stops them first)."""
    unknown = sorted(set(args) - {a.name for a in spec.args})
    if unknown:
        raise ArgumentError(f"unknown argument(s): {', '.join(unknown)}")
    argv: list[str] = []
    stdin: list[str] = []
    has_stdin = False
    for arg in spec.args:
        values = _values(arg, args)
        if arg.mode == "stdin":
            has_stdin = True
            stdin.extend(v + "\n" for v in values)
        for v in values:
            if arg.mode == "positional":
                argv.append(v)
            elif arg.mode == "dashdashspace":
                argv.extend((f"--{arg.name}", v))
            elif arg.mode == "dashdashequal":
                argv.append(f"--{arg.name}={v}")
    return Invocation(tuple(argv), "".join(stdin).encode("utf-8") if has_stdin else None)
