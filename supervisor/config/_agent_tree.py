"""Sub-agents: which agent files the policy's agents reach through ``extraAgents`` and ``toolDirectory``.

:func:`expand_agents` follows, from the policy's agents, every ``extraAgents`` entry (``{slug, path}``, the path
relative to the agent file that names it) and every ``*.json`` file directly in a ``toolDirectory`` (in name
order), loads each file once (by canonical path), has the policy judge every link (``_subagent_rules.py``: the
paths ceiling, agents the policy gives, owners, tenants) and returns the config with every sub-agent reached through
allowed links appended (so their toolboxes get workers too) and, per agent, the slugs of the sub-agents it may
prompt. Cycles are allowed (A names B, B names A): they are bounded at run time by ``max_call_depth``, not here.

Nothing an agent file names as a sub-agent stops the supervisor: every problem of a link is a load problem of the
agent naming it (:attr:`AgentTree.load_errors`, shown by ``check``, ``tools`` and the logs; the link with its
verdict in :attr:`AgentTree.links`), that sub-agent is left out of its tools and, when nothing else reaches it, not
loaded; everything else loads. Such problems: a file that does not exist, is not resolved (a link on its way neither
root nor the file's owner made), does not load (its own problems, named), says another slug than the
``extraAgents`` entry, claims the slug of one of the policy's agents (which keeps it) or of another sub-agent file
(both are left out: which one is meant cannot be told), or is refused by the policy's rules.

An ``extraAgents`` entry that names the agent's *own* slug (the seed's kimi example: ``local_lrmlua`` lists
``{"slug": "local_lrmlua", "path": "kimi-10.lrmlua.json"}``) makes the agent its own sub-agent
(``io_prompt_agent_<slug>`` prompts it again, bounded by ``max_call_depth`` like any cycle). One slug is one agent,
so the other file is not loaded as a second one; a warning says so.
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING

from sandbox import UnsafeTreeError, resolve_named_path

from ._agent_loader import load_agent_file
from ._credentials import reference_environ
from ._errors import ConfigError, ConfigProblem, display_path
from ._load_errors import LoadError
from ._subagent_rules import AgentFileFacts, SubagentLink, judge_links

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ._agent_toolboxes import LoadedAgent
    from ._loader import LoadedConfig

__all__ = ["AgentTree", "expand_agents"]


@dataclasses.dataclass(frozen=True)
class AgentTree:
    """Every agent the supervisor serves and the sub-agent slugs of each (in declaration order)."""

    config: LoadedConfig
    subagents: Mapping[str, tuple[str, ...]]
    #: sub-agents left out (``{"agent", "source", "message"}``): the naming agent's load problems
    load_errors: tuple[LoadError, ...] = ()
    #: every sub-agent file a loaded agent names, with the verdict and why (``check`` shows them)
    links: tuple[SubagentLink, ...] = ()

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


@dataclasses.dataclass
class _Found:
    """What following the links from the policy's agents found: every link (refused ones with why), the sub-agent
    files loaded (by canonical path; a string: why the file does not load) and the warnings."""

    links: list[SubagentLink] = dataclasses.field(default_factory=list)
    files: dict[str, LoadedAgent | str] = dataclasses.field(default_factory=dict)
    #: ``(agent slug, warning)``
    warnings: list[tuple[str, str]] = dataclasses.field(default_factory=list)


def _load_problem(exc: ConfigError) -> str:
    return "; ".join(str(p) for p in exc.problems[:3]) + (" ..." if len(exc.problems) > 3 else "")


def _follow(top: tuple[LoadedAgent, ...], parts: Mapping[str, LoadedAgent], environ: Mapping[str, str]) -> _Found:
    """Every link from ``top`` on, each file loaded once (``parts``: sub-agent files loaded already)."""
    found = _Found(files=dict(parts))
    by_file = {a.file: a for a in top}
    queue = list(top)
    followed = set(by_file)
    while queue:
        agent = queue.pop(0)
        for declared, path, where, refused in _subagent_entries(agent):
            link = SubagentLink(agent.slug, path, f"{display_path(agent.file)} {where}", declared)
            if refused is not None:
                found.links.append(link.refuse(f"sub-agent file not resolved: {refused}"))
                continue
            sub = by_file.get(path) or found.files.get(path)
            if sub is None and declared == agent.slug:
                found.warnings.append(
                    (
                        agent.slug,
                        str(
                            ConfigProblem(
                                agent.file,
                                f"{where}.slug",
                                f"extraAgents names the agent's own slug {declared!r}: the agent is its own sub-agent "
                                f"(io_prompt_agent_{declared} prompts it again, bounded by max_call_depth); "
                                f"{display_path(path)} is not loaded as a second agent with that slug",
                            )
                        ),
                    )
                )
                sub = agent
            if sub is None:
                if not os.path.exists(path):
                    found.links.append(link.refuse(f"sub-agent file not found: {display_path(path)}"))
                    continue
                # a sibling in the agent's Kubernetes volume is named there too (``_volume_folders``)
                name = path
                if agent.folder is not None and os.path.dirname(path) == os.path.dirname(agent.file):
                    name = os.path.join(agent.folder, os.path.basename(path))
                try:
                    sub = load_agent_file(name, environ)
                except ConfigError as exc:
                    sub = _load_problem(exc)
                else:
                    if sub.folder is not None:
                        sub = dataclasses.replace(sub, named=name)
                found.files[path] = sub
            if not isinstance(sub, str) and sub.file not in followed:
                followed.add(sub.file)
                queue.append(sub)
            if isinstance(sub, str):
                found.links.append(link.refuse(f"sub-agent file {display_path(path)} does not load: {sub}"))
            elif declared is not None and declared != sub.slug:
                found.links.append(
                    link.refuse(
                        f"{where}.slug: extraAgents names slug {declared!r} but {display_path(sub.file)} says "
                        f"{sub.slug!r}"
                    )
                )
            else:
                found.links.append(dataclasses.replace(link, slug=sub.slug))
    return found


def _clashes(top: tuple[LoadedAgent, ...], parts: list[LoadedAgent]) -> dict[str, str]:
    """Sub-agent files whose slug another file claims too (canonical path -> why it is left out): one of the
    policy's agents keeps its slug; two sub-agent files are both left out."""
    owners = {a.slug: a.file for a in top}
    by_slug: dict[str, list[str]] = {}
    for part in parts:
        by_slug.setdefault(part.slug, []).append(part.file)
    out: dict[str, str] = {}
    for slug, files in by_slug.items():
        for file in files:
            if slug in owners:
                out[file] = (
                    f"its slug {slug!r} is already used by {display_path(owners[slug])}, one of the policy's agents"
                )
            elif len(files) > 1:
                others = ", ".join(display_path(f) for f in files if f != file)
                out[file] = (
                    f"its slug {slug!r} is claimed by another sub-agent file too ({others}, left out as well: which "
                    "one is meant cannot be told); give each a slug of its own"
                )
    return out


def expand_agents(
    config: LoadedConfig,
    environ: Mapping[str, str] | None = None,
    *,
    bound_elsewhere: Callable[[LoadedAgent], str | None] | None = None,
) -> AgentTree:
    """The config with every allowed sub-agent loaded, and the sub-agent slugs of each agent (module docstring).

    ``bound_elsewhere`` (the plan's, from the state dir's identity table) says why a sub-agent file cannot have its
    slug there (bound to another file): that sub-agent is left out as a load error of the agents naming it, where the
    plan's binding would stop the whole start. Idempotent: expanding an expanded config gives the same tree. Raises
    nothing of its own: what an agent file names as a sub-agent is at most a load problem of that agent.
    """
    environ = reference_environ(config.policy.credentials, os.environ if environ is None else environ)
    top = tuple(a for a in config.agents if a.slug not in config.parts)
    found = _follow(top, {a.file: a for a in config.agents if a.slug in config.parts}, environ)
    parts = [a for a in found.files.values() if not isinstance(a, str)]
    clashes = _clashes(top, parts)
    for part in parts:
        if bound_elsewhere is not None and part.file not in clashes and (why := bound_elsewhere(part)) is not None:
            clashes[part.file] = why
    links = [
        link.refuse(f"sub-agent file {display_path(link.file)}: {clashes[link.file]}")
        if link.allowed and link.file in clashes
        else link
        for link in found.links
    ]
    facts = {a.slug: AgentFileFacts(a.slug, a.file, a.owner) for a in (*top, *parts) if a.file not in clashes}
    judged = judge_links(config.policy, facts, [a.slug for a in top], links)
    served = _served(top, judged)
    agents = [*top, *(a for a in parts if a.file not in clashes and a.slug in served)]
    kept = [link for link in judged if link.agent in served]
    subagents = {
        a.slug: tuple(dict.fromkeys(link.slug for link in kept if link.agent == a.slug and link.allowed and link.slug))
        for a in agents
    }
    load_errors = tuple(
        LoadError(agent=link.agent, source=link.source, message=f"{link.why}; that sub-agent is left out")
        for link in kept
        if not link.allowed
    )
    expanded = dataclasses.replace(
        config,
        agents=tuple(agents),
        warnings=tuple(
            dict.fromkeys(
                [
                    *config.warnings,
                    *(w for slug, w in found.warnings if slug in served),
                    *(w for a in agents for w in a.warnings),
                ]
            )
        ),
        subagents=subagents,
        parts=frozenset(a.slug for a in agents) - {a.slug for a in top},
    )
    return AgentTree(expanded, subagents, load_errors, tuple(kept))


def _served(top: tuple[LoadedAgent, ...], links: list[SubagentLink]) -> set[str]:
    """The slugs of the policy's agents and of every sub-agent their allowed links reach."""
    served = {a.slug for a in top}
    queue = list(served)
    while queue:
        slug = queue.pop()
        for link in links:
            if link.agent == slug and link.allowed and link.slug and link.slug not in served:
                served.add(link.slug)
                queue.append(link.slug)
    return served
