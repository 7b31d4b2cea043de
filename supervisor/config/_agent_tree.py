"""Sub-agents: which agent files the policy's agents reach through ``extraAgents`` and ``toolDirectory``.

:func:`expand_agents` follows, from the policy's agents, every ``extraAgents`` entry (``{slug, path}``, the path
relative to the agent file that names it) and every ``*.json`` file directly in a ``toolDirectory`` (in name
order), loads each file once (by canonical path) and returns the config with every reached agent appended (so their
toolboxes get workers too) and, per agent, the slugs of its sub-agents. Cycles are allowed (A names B, B names A):
they are bounded at run time by ``max_call_depth``, not here.

Refused with a :class:`~supervisor.config._errors.ConfigError` naming the files: two different files with the same
slug, an ``extraAgents`` entry whose slug differs from its file's, a file that does not load.

Not refused:

- a sub-agent file that does not exist is a load error of the agent that names it (:attr:`AgentTree.load_errors`,
  shown by ``check`` and ``tools``); that sub-agent is left out and everything else loads;
- an ``extraAgents`` entry that names the agent's *own* slug (the seed's kimi example: ``local_lrmlua`` lists
  ``{"slug": "local_lrmlua", "path": "kimi-10.lrmlua.json"}``) makes the agent its own sub-agent
  (``io_prompt_agent_<slug>`` prompts it again, bounded by ``max_call_depth`` like any cycle). One slug is one agent,
  so the other file is not loaded as a second one; a warning says so.
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING

from sandbox import UnsafeTreeError, resolve_named_path

from ._credentials import reference_environ
from ._errors import ConfigError, ConfigProblem, display_path
from ._loader import LoadedConfig, load_agent_file

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ._agent_toolboxes import LoadedAgent

__all__ = ["AgentTree", "expand_agents", "subagent_files"]


@dataclasses.dataclass(frozen=True)
class AgentTree:
    """Every agent the supervisor serves and the sub-agent slugs of each (in declaration order)."""

    config: LoadedConfig
    subagents: Mapping[str, tuple[str, ...]]
    #: sub-agents left out (``{"agent", "source", "message"}``): their file does not exist
    load_errors: tuple[dict[str, str], ...] = ()

    @property
    def subagent_slugs(self) -> list[str]:
        """Every slug some agent names as a sub-agent (each once, in first-seen order)."""
        return list(dict.fromkeys(s for subs in self.subagents.values() for s in subs))


def _subagent_entries(agent: LoadedAgent) -> list[tuple[str | None, str, str, str | None]]:
    """``(declared slug or None, canonical path, JSON path for messages, why it is refused or None)`` of the
    agent's sub-agent files. Paths are resolved as the agent file's own are (``_types.py``): a link on the way
    that neither root nor the file's owner made is not followed, and that sub-agent is refused."""
    out: list[tuple[str | None, str, str, str | None]] = []
    desc = agent.description
    for i, extra in enumerate(desc.extra_agents):  # resolved when the agent file was validated
        out.append((extra.slug, extra.path, f"{agent.prefix}.extraAgents[{i}]", agent.refused_paths.get(extra.path)))
    directory = desc.tool_directory
    if directory is None or directory in agent.refused_paths or not os.path.isdir(directory):
        return out
    trusted = None if os.geteuid() != 0 else frozenset({0} if agent.owner is None else {0, agent.owner})
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".json"):
            continue
        where = f"{agent.prefix}.toolDirectory ({name})"
        try:
            resolved = resolve_named_path(os.path.join(directory, name), trusted)
        except UnsafeTreeError as exc:
            out.append((None, os.path.join(directory, name), where, str(exc)))
            continue
        except OSError:
            continue
        if resolved.exists and os.path.isfile(resolved.canonical):
            out.append((None, resolved.canonical, where, None))
    return out


def subagent_files(agent: LoadedAgent) -> list[tuple[str | None, str, str]]:
    """``(declared slug or None, canonical path, JSON path for messages)`` of the agent's sub-agent files (those
    whose path is resolved: a refused one is a load error of :func:`expand_agents`)."""
    return [(declared, path, where) for declared, path, where, why in _subagent_entries(agent) if why is None]


def expand_agents(config: LoadedConfig, environ: Mapping[str, str] | None = None) -> AgentTree:
    """The config with every reachable sub-agent loaded, and the sub-agent slugs of each agent.

    Idempotent: expanding an expanded config adds nothing. Raises ``ConfigError`` (see the module docstring).
    """
    environ = reference_environ(config.policy.credentials, os.environ if environ is None else environ)
    by_file: dict[str, LoadedAgent] = {a.file: a for a in config.agents}
    by_slug: dict[str, LoadedAgent] = {a.slug: a for a in config.agents}
    agents = list(config.agents)
    subagents: dict[str, tuple[str, ...]] = {}
    problems: list[ConfigProblem] = []
    load_errors: list[dict[str, str]] = []
    warnings: list[str] = []
    queue = list(config.agents)
    while queue:
        agent = queue.pop(0)
        slugs: list[str] = []
        for declared, path, where, refused in _subagent_entries(agent):
            if refused is not None:
                load_errors.append(
                    {
                        "agent": agent.slug,
                        "source": f"{display_path(agent.file)} {where}",
                        "message": f"sub-agent file not resolved: {refused}; that sub-agent is left out",
                    }
                )
                continue
            sub = by_file.get(path)
            if sub is None and declared == agent.slug:
                warnings.append(
                    str(
                        ConfigProblem(
                            agent.file,
                            f"{where}.slug",
                            f"extraAgents names the agent's own slug {declared!r}: the agent is its own sub-agent "
                            f"(io_prompt_agent_{declared} prompts it again, bounded by max_call_depth); "
                            f"{display_path(path)} is not loaded as a second agent with that slug",
                        )
                    )
                )
                sub = agent
            if sub is None:
                if not os.path.exists(path):
                    load_errors.append(
                        {
                            "agent": agent.slug,
                            "source": f"{display_path(agent.file)} {where}",
                            "message": f"sub-agent file not found: {display_path(path)}; that sub-agent is left out",
                        }
                    )
                    continue
                # a sibling in the agent's Kubernetes volume is named there too (``_volume_folders``)
                name = path
                if agent.folder is not None and os.path.dirname(path) == os.path.dirname(agent.file):
                    name = os.path.join(agent.folder, os.path.basename(path))
                try:
                    sub = load_agent_file(name, environ)
                except ConfigError as exc:
                    problems.extend(exc.problems)
                    continue
                if sub.folder is not None:
                    sub = dataclasses.replace(sub, named=name)
                other = by_slug.get(sub.slug)
                if other is not None:
                    problems.append(
                        ConfigProblem(
                            sub.file,
                            f"{sub.prefix}.slug",
                            f"agent slug {sub.slug!r} is already used by {display_path(other.file)}",
                            "a slug unique among all agents and sub-agents",
                        )
                    )
                    continue
                by_file[path] = sub
                by_slug[sub.slug] = sub
                agents.append(sub)
                queue.append(sub)
            if declared is not None and declared != sub.slug:
                problems.append(
                    ConfigProblem(
                        agent.file,
                        f"{where}.slug",
                        f"extraAgents names slug {declared!r} but {display_path(sub.file)} says {sub.slug!r}",
                        f"slug {sub.slug!r}",
                    )
                )
                continue
            if sub.slug not in slugs:
                slugs.append(sub.slug)
        subagents[agent.slug] = tuple(slugs)
    if problems:
        raise ConfigError(problems)
    expanded = dataclasses.replace(
        config,
        agents=tuple(agents),
        warnings=tuple(dict.fromkeys([*config.warnings, *warnings, *(w for a in agents for w in a.warnings)])),
    )
    return AgentTree(expanded, subagents, tuple(load_errors))
