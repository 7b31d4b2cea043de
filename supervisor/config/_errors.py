"""Errors in configuration files (YAML policy, JSON agent files); the one place pydantic errors become them.

``ConfigError`` is raised by :func:`supervisor.config._loader.load_config` for anything wrong in a file the
operator wrote: malformed YAML/JSON, unknown keys or tags, wrong types, bad predicates, unknown sandbox refs,
missing files, missing environment variables, duplicate toolbox names. It carries one :class:`ConfigProblem`
per problem found; its ``str()`` is one readable line per problem, so a CLI prints it as is and never shows a
traceback. It differs from a worker or protocol error in that nothing was started: fixing the file and
starting again is the remedy.

Foreign errors (pydantic's ``ValidationError``, yaml and json decode errors, ``OSError``) are converted here
or in the loader, always ``from exc``; :func:`problems_from_validation_error` is the only function that reads
pydantic errors.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic_core import PydanticCustomError

from supervisor._errors import SupervisorError
from toolboxes import json_type_name

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from pydantic import BaseModel, ValidationError

__all__ = [
    "ConfigError",
    "ConfigProblem",
    "display_path",
    "format_json_path",
    "problems_from_validation_error",
]

#: At most this many problems are listed in ``str(ConfigError)``; the rest are counted.
MAX_LISTED_PROBLEMS = 25


def display_path(path: str) -> str:
    """``path`` relative to the current directory when beneath it, else as given (for messages only)."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


@dataclass(frozen=True)
class ConfigProblem:
    """One problem in one file.

    Attributes:
        file: the file with the problem (absolute path as loaded).
        json_path: where in it, like ``$.builtinToolboxes[0].contents.FileSandbox``; ``None`` when the whole
            file could not be read or parsed.
        message: what is wrong.
        expected: what would be right (``"one of date, hostname"``), or ``None``.
        line / column: 1-based position when known (syntax errors, YAML nodes).
    """

    file: str
    json_path: str | None
    message: str
    expected: str | None = None
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        where = display_path(self.file)
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        text = f"{where}: "
        if self.json_path:
            text += f"at {self.json_path}: "
        text += self.message
        if self.expected:
            text += f"; expected {self.expected}"
        return text


class ConfigError(SupervisorError):
    """A policy or agent file is wrong; nothing was started.

    ``problems`` lists every problem found (at least one). ``file``, ``json_path`` and ``expected`` are those of
    the first problem, for callers that handle one. ``str()`` is one line per problem.
    """

    def __init__(self, problems: Sequence[ConfigProblem]) -> None:
        if not problems:
            raise ValueError("ConfigError needs at least one problem")
        self.problems: tuple[ConfigProblem, ...] = tuple(problems)
        first = self.problems[0]
        self.file = first.file
        self.json_path = first.json_path
        self.expected = first.expected
        self.message = first.message
        super().__init__(self._text())

    @classmethod
    def one(
        cls,
        file: str,
        json_path: str | None,
        message: str,
        expected: str | None = None,
        line: int | None = None,
        column: int | None = None,
    ) -> ConfigError:
        """A ConfigError with a single problem."""
        return cls([ConfigProblem(file, json_path, message, expected, line, column)])

    def _text(self) -> str:
        lines = [str(p) for p in self.problems[:MAX_LISTED_PROBLEMS]]
        rest = len(self.problems) - MAX_LISTED_PROBLEMS
        if rest > 0:
            lines.append(f"... and {rest} more problems")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self._text()


def problem(message: str, expected: str | None = None, subpath: tuple[str | int, ...] = ()) -> PydanticCustomError:
    """An error for a validator to raise: our own message, what was expected, and a path below the value."""
    ctx = {"message": message, "expected": expected or "", "subpath": subpath}
    return PydanticCustomError("config_value", "{message}", ctx)


def check_known_keys(model: type[BaseModel], data: Any) -> Any:
    """Refuse keys ``model`` does not know, naming the ones it does (a ``mode="before"`` model validator)."""
    if isinstance(data, dict):
        known = [f.alias or n for n, f in model.model_fields.items()]
        unknown = [k for k in data if k not in known]
        if unknown:
            names = ", ".join(repr(k) for k in unknown)
            plural = "s" if len(unknown) > 1 else ""
            raise problem(f"unknown key{plural} {names}", "keys among " + ", ".join(known), (str(unknown[0]),))
    return data


def format_json_path(loc: Iterable[int | str], prefix: str = "$") -> str:
    """Render a location as a JSON path: ``("a", 0, "b")`` -> ``$.a[0].b``; odd keys are quoted."""
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.replace("_", "a").replace("-", "a").isalnum():
            out += f".{part}"
        else:
            escaped = part.replace("\\", "\\\\").replace('"', '\\"')
            out += f'["{escaped}"]'
    return out


_TYPE_WORDS = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "list_type": "a list",
    "tuple_type": "a list",
    "dict_type": "an object (mapping)",
    "model_type": "an object (mapping)",
    "model_attributes_type": "an object (mapping)",
    "dataclass_type": "an object (mapping)",
    "none_required": "null",
}


def _yaml_boolean_note(value: Any) -> str:
    """Where a word was expected and a boolean came: what YAML 1.1 did (``off`` is ``False``), and the fix."""
    if not isinstance(value, bool):
        return ""
    words = "on, yes or true" if value else "off, no or false"
    return f" (YAML reads an unquoted {words} as a boolean: quote the word, 'like this')"


def _unquote_list(text: str) -> str:
    return ", ".join(part.strip().strip("'\"") for part in text.split(","))


def problems_from_validation_error(
    exc: ValidationError,
    file: str,
    prefix: str = "$",
    skip_loc: frozenset[str] = frozenset(),
    line_of: Callable[[tuple[int | str, ...]], int | None] | None = None,
) -> list[ConfigProblem]:
    """Convert a pydantic ``ValidationError`` into config problems (the one reader of pydantic's errors).

    Args:
        exc: the error.
        file: the file that was validated.
        prefix: JSON path of the validated value inside the file (``$`` or ``$.contents``).
        skip_loc: location parts that pydantic inserts but the file does not have (the tags of discriminated
            unions); they are dropped from the path.
        line_of: maps a location (as in the file) to a 1-based line, when the file format keeps positions.

    Returns:
        One problem per pydantic error, in pydantic's order.
    """
    problems: list[ConfigProblem] = []
    for err in exc.errors(include_url=False):
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and (p in skip_loc or p == "[key]")))
        kind = err["type"]
        ctx = err.get("ctx") or {}
        value = err.get("input")
        expected: str | None = None
        if kind == "extra_forbidden":
            message = f"unknown key {loc[-1]!r}" if loc else "unknown key"
        elif kind == "missing":
            message = f"missing required key {loc[-1]!r}" if loc else "missing required key"
        elif kind == "union_tag_invalid":
            loc = (*loc, "tag")
            message = f"unknown tag {ctx.get('tag')!r}"
            expected = "one of " + _unquote_list(str(ctx.get("expected_tags", "")))
        elif kind == "union_tag_not_found":
            message = 'missing "tag"'
            expected = 'an object {"tag": ..., ...}'
        elif kind == "literal_error":
            message = f"invalid value {value!r}" + _yaml_boolean_note(value)
            expected = "one of " + _unquote_list(str(ctx.get("expected", "")).replace(" or ", ", "))
        elif kind in _TYPE_WORDS:
            message = f"wrong type: got {json_type_name(value)}"
            expected = _TYPE_WORDS[kind]
            if kind == "string_type":
                message += _yaml_boolean_note(value)
        elif kind.startswith("config_"):
            # Our own PydanticCustomError kinds: the message is ours; ``expected`` and a sub-path ride in ctx.
            message = str(ctx.get("message") or err["msg"])
            expected = ctx.get("expected") or None
            sub = ctx.get("subpath")
            if sub:
                loc = (*loc, *sub)
        else:
            message = err["msg"]
            if message.startswith("Value error, "):
                message = message[len("Value error, ") :]
            message = message[:1].lower() + message[1:]
        line = line_of(loc) if line_of is not None else None
        problems.append(ConfigProblem(file, format_json_path(loc, prefix), message, expected, line))
    return problems
