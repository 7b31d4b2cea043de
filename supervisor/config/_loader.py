"""Loading a policy and the agent files it names: the one entry point from files to validated config.

:func:`load_config` reads the YAML policy, validates it (:class:`~supervisor.config._policy.Policy`), loads every
agent file it lists plus the ones given on the command line (``--agent``), and returns a
:class:`LoadedConfig`. Every problem in an operator's file becomes a
:class:`~supervisor.config._errors.ConfigError` naming the file, the JSON path (and the line, for YAML) and
what was expected; problems in several agent files are reported together. Nothing here starts a process or
touches the network; checking that the kernel can enforce the policy is left to the supervisor.
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import ValidationError

from ._agent_file import TAGS, AgentDescription, validation_context
from ._agent_toolboxes import LoadedAgent, ToolboxConfig, build_toolboxes
from ._bounds import (
    MAX_DEPTH,
    BoundedYamlLoader,
    config_file_path,
    plain_value_problems,
    read_bounded,
    read_bounded_stat,
)
from ._credentials import reference_environ
from ._errors import ConfigError, ConfigProblem, display_path, format_json_path, problems_from_validation_error
from ._policy import Policy
from ._volume_folders import volume_folder

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = [
    "ConfigError",
    "ConfigProblem",
    "LoadedAgent",
    "LoadedConfig",
    "ToolboxConfig",
    "load_agent_file",
    "load_config",
    "load_policy",
    "parse_agent_data",
    "parse_policy_data",
]

Loc = tuple[int | str, ...]


@dataclass(frozen=True)
class LoadedConfig:
    """A validated policy and its agents. ``warnings`` are one line each, ready to print."""

    policy: Policy
    policy_file: str
    agents: tuple[LoadedAgent, ...]
    warnings: tuple[str, ...]
    #: once expanded (``_agent_tree.expand_agents``): per agent, the slugs of the sub-agents it may prompt
    #: (``None``: not expanded, only the policy's own agents are loaded)
    subagents: Mapping[str, tuple[str, ...]] | None = None
    #: the slugs of ``agents`` loaded as sub-agents (parts of the agents naming them), not named by the policy
    parts: frozenset[str] = frozenset()

    def toolboxes(self) -> list[ToolboxConfig]:
        """Every agent's toolboxes, agents in load order."""
        return [tb for agent in self.agents for tb in agent.toolboxes()]

    def agent(self, slug: str) -> LoadedAgent:
        """The agent with this slug; ``KeyError`` when there is none."""
        for agent in self.agents:
            if agent.slug == slug:
                return agent
        raise KeyError(slug)


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
    bad = plain_value_problems(data, file, line_of=_line_finder(lines))
    if bad:
        raise ConfigError(bad)
    return data, lines


def _line_finder(lines: Mapping[Loc, int]) -> Any:
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
        raise ConfigError(problems_from_validation_error(exc, file, line_of=_line_finder(lines or {}))) from exc


def load_config(
    policy_path: str | os.PathLike[str],
    extra_agent_files: Iterable[str | os.PathLike[str]] = (),
    environ: Mapping[str, str] | None = None,
) -> LoadedConfig:
    """Load the policy at ``policy_path`` and every agent file it lists, then ``extra_agent_files``.

    Args:
        policy_path: the YAML policy.
        extra_agent_files: more agent files (``--agent``), relative to the current directory.
        environ: the environment for ``${VAR}`` in agent files (default: the supervisor's).

    Returns:
        The validated configuration; the same file named twice is loaded once.

    Raises:
        ConfigError: every problem found in the policy, or in all the agent files together.
    """
    policy, file, lines = load_policy(policy_path)
    line_of = _line_finder(lines)
    # ${NAME} of a credential (or of its env source) is its placeholder in agent files, never its value
    environ = reference_environ(policy.credentials, os.environ if environ is None else environ)
    wanted: list[tuple[str, ConfigProblem]] = []
    problems: list[ConfigProblem] = []
    for i, agent_path in enumerate(policy.agents):
        wanted.append(
            (
                agent_path,
                ConfigProblem(
                    file,
                    f"$.agents[{i}]",
                    f"agent file not found: {display_path(agent_path)}",
                    None,
                    line_of(("agents", i)),
                ),
            )
        )
    for extra in extra_agent_files:
        try:
            path = config_file_path(extra, "agent file (given with --agent)")
        except ConfigError as exc:
            problems.extend(exc.problems)
            continue
        named = os.path.join(os.getcwd(), os.fspath(extra))
        wanted.append((named, ConfigProblem(path, None, "agent file not found (given with --agent)")))
    agents: list[LoadedAgent] = []
    seen_files: set[str] = set()
    slugs: dict[str, str] = {}
    for named, missing in wanted:
        path = os.path.realpath(named)
        if path in seen_files:
            continue
        seen_files.add(path)
        if not os.path.exists(path):
            problems.append(missing)
            continue
        try:
            agent = replace(load_agent_file(named, environ), named=named)
        except ConfigError as exc:
            problems.extend(exc.problems)
            continue
        if agent.slug in slugs:
            problems.append(
                ConfigProblem(
                    agent.file,
                    f"{agent.prefix}.slug",
                    f"agent slug {agent.slug!r} is already used by {display_path(slugs[agent.slug])}",
                    "a slug unique among the agents",
                )
            )
            continue
        slugs[agent.slug] = agent.file
        agents.append(agent)
    if problems:
        raise ConfigError(problems)
    return LoadedConfig(policy, file, tuple(agents), tuple(_warnings(policy, file, agents, line_of)))


def _warnings(policy: Policy, file: str, agents: list[LoadedAgent], line_of: Any) -> list[str]:
    out = [w for agent in agents for w in agent.warnings]
    names = {tb.name for agent in agents for tb in agent.toolboxes()}
    names |= {f"{agent.slug}/{tb.name}" for agent in agents for tb in agent.toolboxes()}
    for key in policy.toolboxes:
        if key not in names:
            known = ", ".join(sorted(n for n in names if "/" not in n)) or "none loaded"
            out.append(
                str(
                    ConfigProblem(
                        file,
                        f"$.toolboxes.{key}",
                        f"no loaded toolbox is named {key!r}; its settings apply to nothing",
                        f"one of {known}",
                        line_of(("toolboxes", key)),
                    )
                )
            )
    for i, path in enumerate(policy.system_paths):
        if not os.path.lexists(path) and not path.startswith("/proc/self"):
            out.append(
                str(
                    ConfigProblem(
                        file,
                        f"$.system_paths[{i}]",
                        f"{path} does not exist on this machine; workers get nothing for it",
                        None,
                        line_of(("system_paths", i)),
                    )
                )
            )
    return out


# ----------------------------------------------------------------------------------------------- agent files
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
