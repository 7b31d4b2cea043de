"""Reading an agent file: JSON bounded in size and depth (``_bounds``), duplicate keys and non-JSON numbers refused,
the removed ``allowedPaths`` dropped with a warning, then validated as an
:class:`~supervisor.config._agent_file.AgentDescription` and turned into its workers' configs
(:func:`~supervisor.config._agent_toolboxes.build_toolboxes`). Every problem is a
:class:`~supervisor.config._errors.ConfigError` naming the file and the JSON path (and the line, for malformed JSON).
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ._agent_file import TAGS, AgentDescription, validation_context
from ._agent_toolboxes import LoadedAgent, build_toolboxes
from ._bounds import MAX_DEPTH, config_file_path, plain_value_problems, read_bounded_stat
from ._errors import ConfigError, ConfigProblem, format_json_path, problems_from_validation_error
from ._volume_folders import volume_folder

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["load_agent_file", "parse_agent_data"]


def _pop_allowed_paths(data: Any, loc: tuple[int | str, ...], prefix: str, file: str, out: list[str]) -> None:
    """Drop every removed ``allowedPaths`` key, with a warning that says what to write instead."""
    if isinstance(data, dict):
        if "allowedPaths" in data:
            old = data.pop("allowedPaths")
            paths = old if isinstance(old, list) else [old]
            preds = [{"tag": "DirectoryRecursive", "contents": p} for p in paths if isinstance(p, str)]
            suggestion = json.dumps({"FileSandbox": {"fsbPredicate": {"tag": "Any", "contents": preds}}})
            out.append(
                str(
                    ConfigProblem(
                        file,
                        format_json_path((*loc, "allowedPaths"), prefix),
                        "'allowedPaths' was removed and is ignored (it grants nothing)",
                        f"instead: {suggestion}",
                    )
                )
            )
        for key, value in data.items():
            _pop_allowed_paths(value, (*loc, key), prefix, file, out)
    elif isinstance(data, list):
        for i, value in enumerate(data):
            _pop_allowed_paths(value, (*loc, i), prefix, file, out)


def parse_agent_data(
    data: Any,
    file: str,
    environ: Mapping[str, str] | None = None,
    *,
    owner: int | None = None,
    folder: str | None = None,
) -> LoadedAgent:
    """Validate decoded agent-file data (the wrapped or bare form) that came from ``file`` (owned by ``owner``:
    with root, the only uid besides root whose symbolic links are followed in the paths it names). ``folder``: the
    Kubernetes volume folder it belongs to (``_volume_folders``; ``None``: the folder of ``file``).

    Raises:
        ConfigError: every problem pydantic found, or the first name clash / bad ref.
    """
    prefix = "$"
    if isinstance(data, dict) and "tag" in data:
        if data["tag"] != "OpenAIAgentDescription":
            raise ConfigError.one(file, "$.tag", f"unknown tag {data['tag']!r}", "one of OpenAIAgentDescription")
        extra = sorted(set(data) - {"tag", "contents"})
        if extra:
            raise ConfigError.one(file, f"$.{extra[0]}", f"unknown key {extra[0]!r}", "keys among tag, contents")
        data, prefix = data.get("contents"), "$.contents"
    if not isinstance(data, dict):
        raise ConfigError.one(
            file,
            prefix,
            "wrong type: an agent description must be an object",
            'an object {"slug": ..., ...} or {"tag": "OpenAIAgentDescription", "contents": {...}}',
        )
    warnings: list[str] = []
    data = copy.deepcopy(data)
    _pop_allowed_paths(data, (), prefix, file, warnings)
    context = validation_context(folder or os.path.dirname(file), environ, owner=owner)
    try:
        agent = AgentDescription.model_validate(data, context=context)
    except ValidationError as exc:
        raise ConfigError(problems_from_validation_error(exc, file, prefix, TAGS)) from exc
    refused = dict(context["refused_paths"])
    # a toolbox's agent file (its folder: where tools run) is the file's name in its volume folder, if it has one
    shown = file if folder is None else os.path.join(folder, os.path.basename(file))
    toolboxes = build_toolboxes(agent, shown, prefix, owner=owner, refused=refused)
    return LoadedAgent(file, agent, prefix, tuple(warnings), toolboxes, refused, owner, folder=folder)


def load_agent_file(path: str, environ: Mapping[str, str] | None = None) -> LoadedAgent:
    """Read, parse and validate the agent file at ``path`` (made absolute and canonical first; a file named in a
    Kubernetes volume belongs to the volume's folder: ``_volume_folders``).

    Raises:
        ConfigError: unreadable file, malformed JSON (with line and column), or any validation problem.
    """
    file = config_file_path(path, "agent file")
    folder = volume_folder(os.path.join(os.getcwd(), os.fspath(path)))
    # owner, device and inode of the very file read (fstat of its descriptor), not of what the path leads to later
    text, st = read_bounded_stat(file, "agent file")
    try:
        data = json.loads(text, object_pairs_hook=_JsonObject, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise ConfigError.one(file, None, f"malformed JSON: {exc.msg}", None, exc.lineno, exc.colno) from exc
    except _NotJson as exc:
        raise ConfigError.one(file, None, f"malformed JSON: {exc}", "plain JSON numbers") from exc
    except RecursionError as exc:
        raise ConfigError.one(
            file, None, "malformed JSON: nested too deeply to read", f"at most {MAX_DEPTH} levels of objects and arrays"
        ) from exc
    except ValueError as exc:  # an integer of more than 4300 digits, ...
        raise ConfigError.one(file, None, f"malformed JSON: {str(exc)[:200]}") from exc
    bad = plain_value_problems(data, file)
    if bad:
        raise ConfigError(bad)
    duplicates: list[ConfigProblem] = []
    data = _plain(data, (), file, duplicates)
    if duplicates:
        raise ConfigError(duplicates)
    loaded = parse_agent_data(data, file, environ, owner=st.st_uid, folder=folder)
    return replace(loaded, device=st.st_dev, inode=st.st_ino)


class _NotJson(ValueError):
    pass


def _refuse_constant(name: str) -> Any:
    raise _NotJson(f"{name} is not a JSON number")


class _JsonObject(dict[str, Any]):
    """A decoded JSON object that remembers the keys it saw more than once (json keeps the last silently)."""

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        super().__init__(pairs)
        seen: set[str] = set()
        self.duplicates: list[str] = []
        for key, _ in pairs:
            if key in seen:
                self.duplicates.append(key)
            seen.add(key)


def _plain(data: Any, loc: tuple[int | str, ...], file: str, problems: list[ConfigProblem]) -> Any:
    """``data`` with plain dicts, noting every duplicate key with its JSON path."""
    if isinstance(data, dict):
        for key in getattr(data, "duplicates", ()):
            problems.append(
                ConfigProblem(file, format_json_path((*loc, key)), f"duplicate key {key!r}", "each key once")
            )
        return {k: _plain(v, (*loc, k), file, problems) for k, v in data.items()}
    if isinstance(data, list):
        return [_plain(v, (*loc, i), file, problems) for i, v in enumerate(data)]
    return data
