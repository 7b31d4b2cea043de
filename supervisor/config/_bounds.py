"""Bounds on a configuration file before and right after it is parsed, so that no file can crash or hang a loader.

Policy (YAML) and agent (JSON) files are the operator's, but they are also the easiest input to get wrong or to be
handed: ``--agent /dev/zero``, a file nested 100,000 deep, a YAML alias bomb or a self-referencing alias, a NUL byte
or a lone surrogate escape in a path. Each is a :class:`~supervisor.config._errors.ConfigError` that says what was
refused and where (the JSON path, and the line for YAML), never a traceback or a hang:

- :func:`config_file_path` makes a file name given to the loader (the policy, ``--agent``) absolute and canonical,
  refusing a name with a NUL or a lone surrogate, which no file can have;
- :func:`read_bounded` reads at most :data:`MAX_CONFIG_BYTES` (larger is refused, whatever the file is);
- :class:`BoundedYamlLoader` is PyYAML's safe loader without aliases (``*name`` is refused with its line: aliases
  are how a small file becomes an exponential or cyclic value) and with nesting bounded by :data:`MAX_DEPTH`
  while it composes (no recursion past it);
- :func:`plain_value_problems` walks a decoded value without recursion: nesting, number of values, and strings (keys
  included) holding NUL or a lone surrogate, which no path, name or URL may hold.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import yaml

from ._errors import ConfigError, ConfigProblem, format_json_path

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "MAX_CONFIG_BYTES",
    "MAX_DEPTH",
    "MAX_VALUES",
    "BoundedYamlLoader",
    "config_file_path",
    "plain_value_problems",
    "read_bounded",
    "read_bounded_stat",
]

#: Largest policy or agent file read (real ones are a few KiB).
MAX_CONFIG_BYTES = 8 << 20
#: Deepest nesting of maps and lists in a file (real ones nest fewer than 10 deep).
MAX_DEPTH = 64
#: Most values in one file.
MAX_VALUES = 500_000


def config_file_path(name: str | os.PathLike[str], what: str) -> str:
    """``name`` (a string or a path object) made absolute and canonical (``os.path.realpath``). Raises
    :class:`ConfigError` naming ``what`` (``"policy file"``, ``"agent file (given with --agent)"``) when the name
    holds a NUL byte or a lone surrogate: no file has such a name, and the OS calls would raise ``ValueError``."""
    name = os.fspath(name)
    problem = _string_problem(name)
    if problem:
        raise ConfigError.one(repr(name)[1:-1], None, f"the name of the {what} {problem}", "a file name")
    return os.path.realpath(name)


def read_bounded(file: str, what: str) -> str:
    """The text of ``file`` (UTF-8), at most :data:`MAX_CONFIG_BYTES`. Raises :class:`ConfigError` naming ``what``
    (``"policy file"``, ``"agent file"``) when it is missing, unreadable, too large or not UTF-8."""
    return read_bounded_stat(file, what)[0]


def read_bounded_stat(file: str, what: str) -> tuple[str, os.stat_result]:
    """:func:`read_bounded`, with the ``fstat`` of the very file read (its owner, device and inode: what an
    identity is bound to must be what was read, not what a path leads to a moment later)."""
    try:
        fd = os.open(file, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)  # a FIFO must not block the open
    except FileNotFoundError as exc:
        raise ConfigError.one(file, None, f"{what} not found") from exc
    except (OSError, ValueError) as exc:
        raise ConfigError.one(file, None, f"cannot read {what}: {exc}") from exc
    try:
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            data = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError.one(file, None, f"cannot read {what}: {exc}") from exc
    if data is None:
        raise ConfigError.one(file, None, f"cannot read {what}: nothing to read yet (a pipe with no writer?)")
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError.one(file, None, f"{what} is larger than {MAX_CONFIG_BYTES >> 20} MiB", "a small text file")
    try:
        return data.decode("utf-8"), st
    except UnicodeDecodeError as exc:
        raise ConfigError.one(
            file, None, f"cannot read {what}: it is not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from exc


class BoundedYamlLoader(yaml.SafeLoader):
    """The safe loader without aliases and with nesting bounded while composing (errors are YAML errors with
    marks, which the policy loader reports with their line)."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]  # untyped in the stubs
            raise yaml.composer.ComposerError(
                None,
                None,
                f"the alias *{event.anchor} is not accepted (write the value out: aliases can make a "
                "small file an exponential or cyclic value)",
                event.start_mark,
            )
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                event = self.peek_event()  # type: ignore[no-untyped-call]  # untyped in the stubs
                raise yaml.composer.ComposerError(None, None, f"nested more than {MAX_DEPTH} deep", event.start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _string_problem(text: str) -> str | None:
    if "\x00" in text:
        return "holds a NUL byte, which no path, name or URL may hold"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "holds a lone surrogate (an unpaired \\ud800-\\udfff escape), which is not text"
    return None


def plain_value_problems(
    data: Any, file: str, prefix: str = "$", line_of: Callable[[tuple[int | str, ...]], int | None] | None = None
) -> list[ConfigProblem]:
    """Problems of a decoded file's value that no schema would catch in time (see the module doc), with the line
    of each when ``line_of`` knows it. Never recurses; stops at the first nesting or size problem, reports bad
    strings up to 20."""
    problems: list[ConfigProblem] = []

    def at(loc: tuple[int | str, ...], message: str, expected: str) -> ConfigProblem:
        return ConfigProblem(file, format_json_path(loc, prefix), message, expected, line_of(loc) if line_of else None)

    stack: list[tuple[Any, tuple[int | str, ...]]] = [(data, ())]
    seen = 0
    while stack and len(problems) < 20:
        item, loc = stack.pop()
        seen += 1
        if seen > MAX_VALUES:
            return [ConfigProblem(file, prefix, f"the file holds more than {MAX_VALUES} values", "a smaller file")]
        if len(loc) > MAX_DEPTH:
            return [at(loc, f"nested more than {MAX_DEPTH} deep", f"at most {MAX_DEPTH} levels of maps and lists")]
        if isinstance(item, str):
            problem = _string_problem(item)
            if problem:
                problems.append(at(loc, f"the string {problem}", "plain text"))
        elif isinstance(item, dict):
            for key, value in item.items():
                if isinstance(key, str) and (problem := _string_problem(key)):
                    problems.append(at(loc, f"a key {problem}", "plain text keys"))
                    continue
                stack.append((value, (*loc, key if isinstance(key, str | int) else str(key))))
        elif isinstance(item, list):
            stack.extend((value, (*loc, i)) for i, value in enumerate(item))
    return problems
