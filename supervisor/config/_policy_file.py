"""Reading the policy file: YAML bounded in size, depth and aliases (``_bounds``), the line of every key kept for
messages, duplicate keys and values YAML should not hold refused, then validated as a
:class:`~supervisor.config._policy.Policy`. Every problem is a :class:`~supervisor.config._errors.ConfigError` naming
the file, the JSON path and the line."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import ValidationError

from ._bounds import BoundedYamlLoader, config_file_path, plain_value_problems, read_bounded
from ._errors import ConfigError, ConfigProblem, format_json_path, problems_from_validation_error
from ._policy import Policy

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = ["Loc", "line_finder", "load_policy", "parse_policy_data"]

#: A location in a decoded file: its keys and item indexes from the top.
Loc = tuple[int | str, ...]


def _yaml_positions(node: yaml.Node, loc: Loc, out: dict[Loc, int], problems: list[tuple[Loc, str, int]]) -> None:
    """Record the line of every key and item under ``node``; note duplicate keys (PyYAML keeps the last)."""
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            here = (*loc, key)
            if key in seen:
                problems.append((here, f"duplicate key {key!r}", key_node.start_mark.line + 1))
            seen.add(key)
            out[here] = key_node.start_mark.line + 1
            _yaml_positions(value_node, here, out, problems)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            out[(*loc, i)] = item.start_mark.line + 1
            _yaml_positions(item, (*loc, i), out, problems)


def _read_yaml(file: str) -> tuple[Any, dict[Loc, int]]:
    text = read_bounded(file, "policy file")
    try:
        loader = BoundedYamlLoader(text)
    except yaml.YAMLError as exc:  # characters YAML does not allow (NUL, other controls)
        raise ConfigError.one(file, None, f"malformed YAML: {exc}") from exc
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        message = " ".join(p for p in (exc.context, exc.problem) if p) or "syntax error"
        raise ConfigError.one(
            file,
            None,
            f"malformed YAML: {message}",
            None,
            mark.line + 1 if mark else None,
            mark.column + 1 if mark else None,
        ) from exc
    except yaml.YAMLError as exc:
        raise ConfigError.one(file, None, f"malformed YAML: {exc}") from exc
    except (RecursionError, ValueError, OverflowError) as exc:  # a value PyYAML's constructors cannot make
        raise ConfigError.one(file, None, f"malformed YAML: {type(exc).__name__}: {str(exc)[:200]}") from exc
    finally:
        loader.dispose()
    lines: dict[Loc, int] = {}
    dups: list[tuple[Loc, str, int]] = []
    if node is not None:
        _yaml_positions(node, (), lines, dups)
    if dups:
        raise ConfigError(
            [ConfigProblem(file, format_json_path(loc), msg, "each key once", line) for loc, msg, line in dups]
        )
    bad = plain_value_problems(data, file, line_of=line_finder(lines))
    if bad:
        raise ConfigError(bad)
    return data, lines


def line_finder(lines: Mapping[Loc, int]) -> Callable[[Loc], int | None]:
    """The line of a location, or of its nearest enclosing one that has a line (``None``: none has)."""

    def line_of(loc: Loc) -> int | None:
        for end in range(len(loc), 0, -1):
            if loc[:end] in lines:
                return lines[loc[:end]]
        return None

    return line_of


def load_policy(policy_path: str | os.PathLike[str]) -> tuple[Policy, str, dict[Loc, int]]:
    """Read and validate the policy file; returns the policy, its canonical path and the line of each key.

    Raises:
        ConfigError: missing or unreadable file, malformed YAML (line and column), or validation problems.
    """
    file = config_file_path(policy_path, "policy file")
    data, lines = _read_yaml(file)
    return parse_policy_data(data, file, lines), file, lines


def parse_policy_data(data: Any, file: str, lines: Mapping[Loc, int] | None = None) -> Policy:
    """Validate decoded policy data that came from ``file`` (``None`` = an empty file: every default).

    Raises:
        ConfigError: every validation problem, with the line of each when ``lines`` maps locations to lines.
    """
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError.one(file, "$", "wrong type: the policy must be a mapping of keys", "a YAML mapping", 1)
    try:
        return Policy.model_validate(data, context={"base_dir": os.path.dirname(file)})
    except ValidationError as exc:
        raise ConfigError(problems_from_validation_error(exc, file, line_of=line_finder(lines or {}))) from exc
