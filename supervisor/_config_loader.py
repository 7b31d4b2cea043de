"""Loading a policy and the agent files it names: the one entry point from files to validated config.

:func:`load_config` reads the YAML policy, validates it (:class:`~supervisor._policy.Policy`), loads every
agent file it lists plus the ones given on the command line (``--agent``), and returns a
:class:`LoadedConfig`. Every problem in an operator's file becomes a
:class:`~supervisor._config_errors.ConfigError` naming the file, the JSON path (and the line, for YAML) and
what was expected; problems in several agent files are reported together. Nothing here starts a process or
touches the network; checking that the kernel can enforce the policy is left to the supervisor.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import ValidationError

from ._agent_toolboxes import LoadedAgent, ToolboxConfig, load_agent_file
from ._config_errors import ConfigError, ConfigProblem, display_path, problems_from_validation_error
from ._policy import Policy

__all__ = [
    "ConfigError",
    "ConfigProblem",
    "LoadedAgent",
    "LoadedConfig",
    "ToolboxConfig",
    "load_config",
    "load_policy",
]

Loc = tuple[int | str, ...]


@dataclass(frozen=True)
class LoadedConfig:
    """A validated policy and its agents. ``warnings`` are one line each, ready to print."""

    policy: Policy
    policy_file: str
    agents: tuple[LoadedAgent, ...]
    warnings: tuple[str, ...]

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
    try:
        with open(file, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError as exc:
        raise ConfigError.one(file, None, "policy file not found") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError.one(file, None, f"cannot read policy file: {exc}") from exc
    loader = yaml.SafeLoader(text)
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
    finally:
        loader.dispose()
    lines: dict[Loc, int] = {}
    dups: list[tuple[Loc, str, int]] = []
    if node is not None:
        _yaml_positions(node, (), lines, dups)
    if dups:
        from ._config_errors import format_json_path

        raise ConfigError(
            [ConfigProblem(file, format_json_path(loc), msg, "each key once", line) for loc, msg, line in dups]
        )
    return data, lines


def _line_finder(lines: Mapping[Loc, int]) -> Any:
    def line_of(loc: Loc) -> int | None:
        for end in range(len(loc), 0, -1):
            if loc[:end] in lines:
                return lines[loc[:end]]
        return None

    return line_of


def load_policy(policy_path: str) -> tuple[Policy, str, dict[Loc, int]]:
    """Read and validate the policy file; returns the policy, its canonical path and the line of each key.

    Raises:
        ConfigError: missing or unreadable file, malformed YAML (line and column), or validation problems.
    """
    file = os.path.realpath(policy_path)
    data, lines = _read_yaml(file)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError.one(file, "$", "wrong type: the policy must be a mapping of keys", "a YAML mapping", 1)
    try:
        policy = Policy.model_validate(data, context={"base_dir": os.path.dirname(file)})
    except ValidationError as exc:
        raise ConfigError(problems_from_validation_error(exc, file, line_of=_line_finder(lines))) from exc
    return policy, file, lines


def load_config(
    policy_path: str, extra_agent_files: Iterable[str] = (), environ: Mapping[str, str] | None = None
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
    wanted: list[tuple[str, ConfigProblem]] = []
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
        path = os.path.realpath(extra)
        wanted.append((path, ConfigProblem(path, None, "agent file not found (given with --agent)")))
    problems: list[ConfigProblem] = []
    agents: list[LoadedAgent] = []
    seen_files: set[str] = set()
    slugs: dict[str, str] = {}
    for path, missing in wanted:
        if path in seen_files:
            continue
        seen_files.add(path)
        if not os.path.exists(path):
            problems.append(missing)
            continue
        try:
            agent = load_agent_file(path, environ)
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
