"""Loading a policy and the agent files it names: the one entry point from files to validated config.

:func:`load_config` reads the YAML policy, validates it (:class:`~supervisor.config._policy.Policy`), loads every
agent file it lists plus the ones given on the command line (``--agent``), and returns a
:class:`LoadedConfig`. Every problem in an operator's file becomes a
:class:`~supervisor.config._errors.ConfigError` naming the file, the JSON path (and the line, for YAML) and
what was expected; problems in several agent files are reported together. Nothing here starts a process or
touches the network; checking that the kernel can enforce the policy is left to the supervisor.

Reading one file is :mod:`._policy_file` (the policy's YAML) and :mod:`._agent_loader` (an agent file's JSON).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ._agent_loader import load_agent_file
from ._bounds import config_file_path
from ._credentials import reference_environ
from ._errors import ConfigError, ConfigProblem, display_path
from ._policy_file import line_finder, load_policy

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from ._agent_toolboxes import LoadedAgent, ToolboxConfig
    from ._policy import Policy

__all__ = ["LoadedConfig", "load_config"]


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
    line_of = line_finder(lines)
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
