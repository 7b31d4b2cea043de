"""Which agent a CLI command acts as: ``--agent SLUG``, ``--serve-agent SLUG``, or the agent of an ``--agent FILE``.

``--agent`` is read by its form: a slug (only ``A-Z a-z 0-9 _ -``) names the agent to act as; anything else (a path,
with a ``/`` or a ``.``) is an agent file to load besides the policy's, and the agent it describes is then the one
the command acts as (a stdio session serves it, ``call`` calls its tool, ``tools`` and ``check`` show it), unless a
slug says otherwise. ``--agent-file FILE`` only loads a file. Without either, a command acts as no agent in
particular (a stdio session serves the policy's first agent).
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

    from supervisor.config import LoadedConfig

__all__ = ["acting_agent", "check_slug", "config_for", "split_agents"]

#: what an ``--agent`` value that names an agent (not a file) looks like: a slug (config/_types.py's names)
SLUG = re.compile(r"[A-Za-z0-9_-]{1,64}")


def split_agents(args: argparse.Namespace) -> str | None:
    """Sort ``--agent`` values into agent files and the slug of the agent to act as (returned; ``--serve-agent``'s
    too). Sets ``args.agent`` to every agent file to load (``--agent``'s, then ``--agent-file``'s) and
    ``args.named_files`` to those given with ``--agent`` (the ones that name the agent to act as).

    Raises:
        ValueError: two different slugs are given.
    """
    values = list(getattr(args, "agent", []) or [])
    slugs = [v for v in values if SLUG.fullmatch(v)]
    args.named_files = [v for v in values if not SLUG.fullmatch(v)]
    args.agent = args.named_files + list(getattr(args, "agent_files", []) or [])
    if getattr(args, "serve_agent", None):
        slugs.append(args.serve_agent)
    if len(set(slugs)) > 1:
        raise ValueError(
            f"one agent at a time: --agent/--serve-agent name {', '.join(slugs)}; an agent file is "
            "given by its path (with a '/' or a '.') or with --agent-file"
        )
    return slugs[0] if slugs else None


def acting_agent(config: LoadedConfig, named_files: list[str]) -> str | None:
    """The slug of the agent the files given with ``--agent`` describe (``None`` when none is given).

    Raises:
        ValueError: they describe two or more agents (the message names them and how to pick one).
    """
    wanted = [os.path.realpath(f) for f in named_files]
    slugs = {a.file: a.slug for a in config.agents}
    named = list(dict.fromkeys(slugs[f] for f in wanted if f in slugs))
    if len(named) > 1:
        raise ValueError(
            f"the agent files given with --agent describe {len(named)} agents ({', '.join(named)}); say which one "
            f"to act as with --agent SLUG (or --serve-agent SLUG), and load the others with --agent-file"
        )
    return named[0] if named else None


def check_slug(slug: str | None, served: list[str]) -> None:
    """Raises ``ValueError`` when ``slug`` is given and not one of ``served``."""
    if slug is not None and slug not in served:
        raise ValueError(
            f"no agent {slug!r} is loaded; the loaded agents are {', '.join(served) or 'none'} (an "
            "agent file is given by its path, with a '/' or a '.', or with --agent-file)"
        )


def config_for(args: argparse.Namespace) -> LoadedConfig | int:
    """The loaded config of ``tools``/``call`` (and ``serve`` bound to a slug), or the exit status when ``--agent
    SLUG`` names no loaded agent (said before any worker starts)."""
    from supervisor.config import expand_agents, load_config

    from ._cli_errors import fail

    config = load_config(args.policy, args.agent)
    try:
        check_slug(args.slug, [a.slug for a in expand_agents(config).config.agents])
    except ValueError as exc:
        return fail(str(exc))
    return config
