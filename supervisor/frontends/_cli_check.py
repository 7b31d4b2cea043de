"""``agents-supervise check``: the compiled policy shown (a summary, ``--detail`` or ``--json``); nothing starts.

Nothing starts and nothing changes: the policy is compiled without preparing anything (no folder made, no worker
code staged, no identity or uid recorded, no CA written: ``compile_policy(prepare=False)``), a credential's
``command:`` source is not run (its ``env`` and ``file`` sources are read, which changes nothing), and the kernel
is only asked (Landlock's ABI, the audit status, the rule paths opened ``O_PATH`` as the launcher will open them).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ._check_detail import render_detail
from ._check_summary import render_summary, summarize
from ._cli import _fail
from ._cli_agents import check_slug as _check_slug

if TYPE_CHECKING:
    import argparse

__all__ = ["check", "check_report"]


def check_report(args: argparse.Namespace) -> dict[str, Any]:
    """What each toolbox's worker will get (of ``args.slug``'s toolboxes only, when given), as plain data: what
    ``--json`` prints and both printers read. Raises ``ValueError`` for a slug no loaded agent has, and what
    loading and compiling raise (``ConfigError``, ``PolicyRefused``)."""
    import trio

    from supervisor.agents import model_report
    from supervisor.calls import BudgetPolicy
    from supervisor.config import expand_agents, load_config
    from supervisor.plan import bound_elsewhere, compile_policy, launcher_refusals
    from supervisor.workers import host_explanations

    loaded = load_config(args.policy, args.agent)  # sub-agents' toolboxes get workers too
    tree = expand_agents(loaded, bound_elsewhere=bound_elsewhere(args.state_dir or loaded.policy.state_dir))
    config = tree.config
    compiled = compile_policy(config, state_dir=args.state_dir, prepare=False)
    _check_slug(args.slug, [a.slug for a in config.agents])
    specs = [s for s in compiled.specs if args.slug in (None, s.agent)]
    toolboxes = []
    for s in specs:
        entry = {"toolbox": s.toolbox, "kind": s.kind, "agent": s.agent, **s.report}
        entry["warnings"] = [*entry.get("warnings", ()), *launcher_refusals(s.plan)]
        toolboxes.append(entry)
    return {
        "policy": config.policy_file,
        "state_dir": compiled.state_dir,
        "landlock_abi": compiled.landlock_abi,
        "landlock_min_abi": config.policy.landlock_min_abi,
        "strict": config.policy.strict,
        "max_call_depth": compiled.max_call_depth,
        "kernel_audit": config.policy.kernel_audit,
        "denial_explanations": host_explanations(config.policy.kernel_audit),
        "toolboxes": toolboxes,
        "warnings": compiled.warnings,
        "budgets": BudgetPolicy.from_policy(config.policy).report(),
        "model_requests": trio.run(
            model_report,
            config.policy,
            tree.subagents,
            [
                (a.slug, a.description.model_url)
                for a in config.agents
                if a.description.model_url and args.slug in (None, a.slug)
            ],
        ),
        "subagents": [
            {
                "agent": link.agent,
                "subagent": link.slug,
                "file": link.file,
                "source": link.source,
                "allowed": link.allowed,
                "why": link.why,
            }
            for link in tree.links
            if args.slug in (None, link.agent)
        ],
        "load_errors": [
            dict(e) for e in (*tree.load_errors, *compiled.load_errors) if args.slug in (None, e.get("agent"))
        ],
    }


def check(args: argparse.Namespace) -> int:
    """``agents-supervise check``: the summary (one line per worker, then the warnings and load errors), every
    worker in full with ``--detail``, or the report as JSON with ``--json``; nothing starts. Returns the exit
    status."""
    try:
        report = check_report(args)
    except ValueError as exc:
        return _fail(str(exc))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        lines = render_detail(report) if getattr(args, "detail", False) else render_summary(summarize(report))
        print("\n".join(lines))
    return 0
