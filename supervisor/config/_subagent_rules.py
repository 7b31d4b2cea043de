"""Which sub-agents each agent may prompt: the policy's rules on the agent files ``extraAgents`` and
``toolDirectory`` name (pure: ``_agent_tree.py`` reads the files and hands their facts here).

A sub-agent runs as itself: its loop calls its own toolboxes, whose workers have its uids and its files, its slug
bound to its file. An agent file naming another file as its sub-agent therefore asks for that agent's identity, and
the policy decides whether it gets it. A link (one agent naming one file) is allowed when:

1. **Paths.** The file lies within every ``paths`` of the ceilings that bound the naming agent: ``ceilings."*"``,
   ``ceilings.<slug>`` and the ceiling of each tenant that reaches the naming agent.
2. **Agents the policy gives.** A sub-agent the policy names itself (one of its ``agents``, or listed in some
   ``tenants.<name>.agents``) is the policy's to give: every tenant that reaches the naming agent must list it.
3. **Owners.** Any other sub-agent is a part of the agent naming it: its file must be root's or the naming file's
   owner's (an agent file adopts no other user's agent).
4. **One tenant's, or shared on purpose.** Such a part reached by several tenants must be reached by all of them
   through one naming agent (which the policy gives to all of them); otherwise one agent, one set of workers, would
   serve tenants the policy never put together, and it is refused for each.

An agent naming its own slug (the seed's kimi example) is its own sub-agent and always allowed. A tenant reaches the
agents it lists and, transitively, the sub-agents of allowed links. A refused link is a load problem of the naming
agent: that sub-agent is left out of its tools (and not loaded when nothing else reaches it), everything else loads.
One agent has one set of tools, so a link refused for one tenant is refused for all. The rules are applied until
nothing changes: rules 1 and 2 tenant by tenant along what each reaches, then rule 4 on what they reach then.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ._errors import display_path

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from ._policy import Policy

__all__ = ["AgentFileFacts", "SubagentLink", "judge_links", "path_within"]


@dataclasses.dataclass(frozen=True)
class AgentFileFacts:
    """What the rules need of one loaded agent file: its slug, canonical path and owner (uid; ``None``: unknown)."""

    slug: str
    file: str
    owner: int | None


@dataclasses.dataclass(frozen=True)
class SubagentLink:
    """One agent naming one file as its sub-agent, and the verdict on it.

    ``source`` says where (``<agent file> $.extraAgents[0]``), ``slug`` is the sub-agent's (``None``: its file did not
    load), ``why`` says why it is allowed or refused, in words an operator can act on (a refusal names the key that
    would allow it)."""

    agent: str
    file: str
    source: str
    slug: str | None
    allowed: bool = True
    why: str = ""

    def refuse(self, why: str) -> SubagentLink:
        """This link refused for ``why``."""
        return dataclasses.replace(self, allowed=False, why=why)

    @property
    def name(self) -> str:
        """How messages name the sub-agent: its slug and file."""
        shown = display_path(self.file)
        return f"sub-agent {self.slug} ({shown})" if self.slug else f"sub-agent file {shown}"


def path_within(path: str, top: str) -> bool:
    """``path`` is ``top`` or lies beneath it (both canonical)."""
    return path == top or top == "/" or path.startswith(top.rstrip("/") + "/")


def _traverse(
    policy: Policy, links: Sequence[SubagentLink], judge: Callable[[str, SubagentLink], str | None] | None = None
) -> tuple[dict[str, set[str]], dict[str, set[int]], dict[int, str]]:
    """Tenant by tenant, what it reaches along the allowed links: ``(reached slugs, traversed link indices)`` per
    tenant, and the links ``judge(tenant, link)`` refused on the way (index -> why; not followed)."""
    by_agent: dict[str, list[int]] = {}
    for i, link in enumerate(links):
        if link.allowed and link.slug is not None and link.slug != link.agent:
            by_agent.setdefault(link.agent, []).append(i)
    reached: dict[str, set[str]] = {}
    traversed: dict[str, set[int]] = {}
    refused: dict[int, str] = {}
    for name in sorted(policy.tenants):
        seen = set(policy.tenants[name].agents)
        queue = sorted(seen)
        used: set[int] = set()
        while queue:
            for i in by_agent.get(queue.pop(0), ()):
                why = judge(name, links[i]) if judge is not None else None
                if why is not None:
                    refused.setdefault(i, why)
                    continue
                used.add(i)
                slug = links[i].slug
                if slug is not None and slug not in seen:
                    seen.add(slug)
                    queue.append(slug)
        reached[name], traversed[name] = seen, used
    return reached, traversed, refused


def _static_refusal(policy: Policy, agents: Mapping[str, AgentFileFacts], given: set[str], link: SubagentLink) -> str:
    """Why ``link`` is refused whoever reaches its agent (rule 1 for the agent's own ceilings, and rule 3); ``""``
    when it is not."""
    if link.slug == link.agent:
        return ""
    for key, trees in _own_paths(policy, link.agent):
        if not any(path_within(link.file, top) for top in trees):
            return _outside(link, key, trees)
    if link.slug is None or link.slug in given:
        return ""
    owner, naming = agents[link.slug].owner, agents[link.agent].owner
    if owner in (0, naming):
        return ""
    who = "unknown" if owner is None else f"uid {owner}"
    return (
        f"{link.name} is owned by {who}, neither root nor the owner of agent {link.agent}'s file "
        f"({'unknown' if naming is None else f'uid {naming}'}): an agent file adopts no other user's agent; the "
        f"policy's key that would allow it: list its file among the policy's agents (and its slug in "
        f"tenants.<name>.agents of each tenant that uses {link.agent})"
    )


def _own_paths(policy: Policy, slug: str) -> list[tuple[str, list[str]]]:
    """``(key, trees)`` of the ``paths`` of ``ceilings."*"`` and ``ceilings.<slug>``, where they are set."""
    out = []
    for key in dict.fromkeys(("*", slug)):
        ceiling = policy.ceilings.get(key)
        if ceiling is not None and ceiling.paths is not None:
            out.append(('ceilings."*"' if key == "*" else f"ceilings.{key}", ceiling.paths))
    return out


def _outside(link: SubagentLink, key: str, trees: Sequence[str]) -> str:
    return (
        f"{link.name} lies outside the policy's ceiling {key}.paths ({', '.join(trees) or 'none'}); the key that "
        f"would allow it: add a folder holding it to {key}.paths"
    )


def _tenant_judge(policy: Policy, given: set[str]) -> Callable[[str, SubagentLink], str | None]:
    """Rules 1 (a tenant's ceiling) and 2, for a link the tenant reaches."""

    def judge(name: str, link: SubagentLink) -> str | None:
        tenant = policy.tenants[name]
        ceiling = tenant.ceiling
        if (
            ceiling is not None
            and ceiling.paths is not None
            and not any(path_within(link.file, t) for t in ceiling.paths)
        ):
            return _outside(link, f"tenants.{name}.ceiling", ceiling.paths)
        if link.slug in given and link.slug not in tenant.agents:
            return (
                f"{link.name} is an agent the policy gives on its own (not a part of {link.agent}), and not to "
                f"tenant {name}, which uses {link.agent}: a tenant reaches no agent the policy does not give it; the "
                f"key that would allow it: add {link.slug} to tenants.{name}.agents"
            )
        return None

    return judge


def _shared_refusals(policy: Policy, given: set[str], links: Sequence[SubagentLink]) -> dict[int, str]:
    """Rule 4: the links into a part that tenants reach through no one naming agent."""
    reached, traversed, _ = _traverse(policy, links)
    out: dict[int, str] = {}
    for slug in sorted({link.slug for link in links if link.slug and link.slug not in given}):
        tenants = sorted(name for name, seen in reached.items() if slug in seen)
        into = [i for i, link in enumerate(links) if link.allowed and link.slug == slug and link.agent != slug]
        if len(tenants) < 2 or any(all(i in traversed[t] for t in tenants) for i in into):
            continue
        for i in into:
            users = [t for t in tenants if i in traversed[t]]
            if users:
                out[i] = (
                    f"{links[i].name} is reached by another tenant too, through another agent: one agent (its "
                    f"workers' uids and files) would be shared between tenant {', '.join(users)} and a tenant the "
                    f"policy does not put with it; the key that would allow it: add {slug} to tenants.<name>.agents "
                    "of every tenant that uses it (or give each tenant its own copy under another slug)"
                )
    return out


def _allowed_why(
    policy: Policy, agents: Mapping[str, AgentFileFacts], top: set[str], link: SubagentLink, users: Sequence[str]
) -> str:
    """Why the allowed ``link`` is allowed (``users``: the tenants that reach its agent)."""
    if link.slug == link.agent:
        return f"the agent itself: io_prompt_agent_{link.agent} prompts it again (bounded by max_call_depth)"
    slug = link.slug or ""
    bounded = [key for key, _ in _own_paths(policy, link.agent)]
    bounded += [f"tenants.{t}.ceiling" for t in users if (c := policy.tenants[t].ceiling) and c.paths is not None]
    listed = [t for t in policy.tenants if slug in policy.tenants[t].agents]
    if slug in top or listed:
        parts = ["the policy gives it" + (" (one of its agents)" if slug in top else " (tenants.<name>.agents)")]
        parts.append(
            f"every tenant that uses {link.agent} lists it ({', '.join(f'tenants.{t}.agents' for t in users)})"
            if users
            else f"no tenant uses {link.agent}"
        )
    else:
        owner = agents[slug].owner
        parts = [
            "a part of the agent: its file is "
            + ("root's" if owner == 0 else "the naming file's owner's" + (f" (uid {owner})" if owner else "")),
            f"reached by tenant {', '.join(users)}" if users else f"no tenant uses {link.agent}",
        ]
    if bounded:
        parts.append(f"within {', '.join(k + '.paths' for k in bounded)}")
    return "; ".join(parts)


def judge_links(
    policy: Policy, agents: Mapping[str, AgentFileFacts], top: Sequence[str], links: Sequence[SubagentLink]
) -> list[SubagentLink]:
    """Every link of ``links`` judged by the rules (module docstring): those already refused (a file that did not
    load) stay so, each allowed one gets why. ``agents``: the facts of every loaded agent file by slug (the
    policy's ``top`` and the parts), every link's agent and slug among them."""
    given = set(top) | {s for t in policy.tenants.values() for s in t.agents}
    out = [
        link.refuse(why) if link.allowed and (why := _static_refusal(policy, agents, given, link)) else link
        for link in links
    ]
    judge = _tenant_judge(policy, given)
    while True:
        refusals = _traverse(policy, out, judge)[2] or _shared_refusals(policy, given, out)
        if not refusals:
            break
        out = [link.refuse(refusals[i]) if i in refusals else link for i, link in enumerate(out)]
    reached = _traverse(policy, out)[0]
    users = {link.agent: sorted(t for t, seen in reached.items() if link.agent in seen) for link in out}
    return [
        dataclasses.replace(link, why=_allowed_why(policy, agents, set(top), link, users[link.agent]))
        if link.allowed
        else link
        for link in out
    ]
