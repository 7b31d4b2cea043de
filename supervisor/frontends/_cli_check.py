"""``agents-supervise check``: the compiled policy shown (a summary, ``--detail`` or ``--json``); nothing starts.

Nothing starts and nothing changes (what the report holds and how it is made: :mod:`supervisor._check_report`).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ._check_detail import render_detail
from ._check_summary import render_summary, summarize
from ._cli_agents import check_slug as _check_slug
from ._cli_errors import fail

if TYPE_CHECKING:
    import argparse

__all__ = ["check", "check_report"]


def check_report(args: argparse.Namespace) -> dict[str, Any]:
    """What each toolbox's worker will get (of ``args.slug``'s toolboxes only, when given), as plain data
    (:func:`supervisor._face.check_report`). Raises ``ValueError`` for a slug no loaded agent has, and what
    loading and compiling raise (``ConfigError``, ``PolicyRefused``)."""
    from supervisor._face import agent_tree
    from supervisor._face import check_report as report_of
    from supervisor.config import load_config

    tree = agent_tree(load_config(args.policy, args.agent), args.state_dir)  # sub-agents' toolboxes get workers too
    _check_slug(args.slug, [a.slug for a in tree.config.agents])
    return report_of(tree, state_dir=args.state_dir, slug=args.slug)


def check(args: argparse.Namespace) -> int:
    """``agents-supervise check``: the summary (one line per worker, then the warnings and load errors), every
    worker in full with ``--detail``, or the report as JSON with ``--json``; nothing starts. Returns the exit
    status."""
    try:
        report = check_report(args)
    except ValueError as exc:
        return fail(str(exc))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        lines = render_detail(report) if getattr(args, "detail", False) else render_summary(summarize(report))
        print("\n".join(lines))
    return 0
