"""What ``agents-supervise check`` shows: the compiled policy as plain data; nothing starts and nothing changes.

The policy is compiled without preparing anything (no folder made, no worker code staged, no identity or uid
recorded, no CA written: ``compile_policy(prepare=False)``), a credential's ``command:`` source is not run (its
``env`` and ``file`` sources are read, which changes nothing), and the kernel is only asked (Landlock's ABI, the
audit status, the rule paths opened ``O_PATH`` as the launcher will open them). The CLI prints it
(``frontends/_cli_check.py``: a summary, ``--detail`` or ``--json``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from supervisor.agents import model_report
from supervisor.calls import BudgetPolicy
from supervisor.plan import compile_policy, launcher_refusals
from supervisor.workers import host_explanations

if TYPE_CHECKING:
    from supervisor.config import AgentTree

__all__ = ["check_report"]


def check_report(tree: AgentTree, *, state_dir: str | None = None, slug: str | None = None) -> dict[str, Any]:
    """What each toolbox's worker of ``tree``'s policy will get (of agent ``slug``'s toolboxes only, when given),
    as plain data: what ``--json`` prints and both printers read (where model requests may go is asked of the
    resolver in a trio run of its own: not from inside one). Raises what compiling raises (``ConfigError``,
    ``PolicyRefused``)."""
    config = tree.config
    compiled = compile_policy(config, state_dir=state_dir, prepare=False)
    toolboxes = []
    for s in compiled.specs:
        if slug not in (None, s.agent):
            continue
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
                if a.description.model_url and slug in (None, a.slug)
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
            if slug in (None, link.agent)
        ],
        "load_errors": [dict(e) for e in (*tree.load_errors, *compiled.load_errors) if slug in (None, e.get("agent"))],
    }
