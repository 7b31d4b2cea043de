"""A worker's files: the Landlock rules it gets and its own folders (pure; one step of ``_worker_plan.plan_worker``).

The rules, in the order they are gathered: the policy's system paths and the interpreter's trees read-only, the
staged worker code read-only, the policy's device paths read-write, the worker's own work and state folders
read-write, the agent file's and the policy's read grants for this toolbox, what its kind needs (``_kinds.py``: an
MCP server's package tree, a skills toolbox's clones, a spec's folder, a database), its agent file's write grants,
then its FileSandbox compiled to rules (``sandbox._fs_compile``: the predicate over-approximated by folders, checked
exactly in the worker). A path the host says does not exist is left out with a warning, except the folders the
supervisor makes before the worker starts; one rule per path remains, the widest mode winning. A path the agent
file names that grants nothing by itself (an MCP server's argument, ``_mcp_args.py``) must lie within those rules.

What the kernel enforces is the launcher's (it opens every rule's path again, ``sandbox._path_walk``); what the
host says of a path here comes from :class:`~._host_view.HostView` (one compile's answers) and decides only what is
planned and warned about.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sandbox import READ, WRITE, FsRule
from supervisor._errors import PolicyRefused

from ._ceilings import ToolboxRefused, path_refusals
from ._kinds import GrantInputs
from ._mcp_args import canonical_rule_path, outside_message, paths_outside

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from supervisor.config import Policy, ToolboxConfig

    from ._ceilings import Bound
    from ._host_view import HostView
    from ._kinds import KindPlan

__all__ = ["WorkerFiles", "keep_existing", "plan_file_sandbox", "plan_files", "worker_folders"]


def worker_folders(state_dir: str, tb: ToolboxConfig) -> tuple[str, str]:
    """``(work folder, state folder)`` of ``tb``'s worker under ``state_dir``: its HOME (with ``tmp``) and the
    folder its toolbox keeps state in; the supervisor makes both, owned by the worker's uid, before it starts."""
    return (
        os.path.join(state_dir, "work", tb.agent_slug, tb.name),
        os.path.join(state_dir, "toolbox-state", tb.agent_slug, tb.name),
    )


@dataclass
class WorkerFiles:
    """What :func:`plan_files` decided for one worker."""

    #: the worker config after its kind's grants (a skills toolbox's git sources become its clones' folders)
    cfg: dict[str, Any]
    #: one rule per existing path (or folder made at start), the widest mode winning
    rules: list[FsRule]
    workdir: str
    state: str
    #: the folders among the rules that the supervisor makes before the worker starts (they need not exist now)
    made_at_start: tuple[str, ...]
    #: ``check``'s account of the FileSandbox (``None``: the toolbox has none)
    file_sandbox: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)


def plan_file_sandbox(
    tb: ToolboxConfig, *, writes: bool, runs_code: bool, policy: Policy, warnings: list[str]
) -> tuple[list[FsRule], dict[str, Any] | None]:
    """The rules of ``tb``'s FileSandbox and ``check``'s account of it; ``([], None)`` without one. ``writes``: the
    toolbox writes files on the agent's behalf (its FileSandbox is granted read-write); ``runs_code``: it runs code
    the agent controls (an inexact predicate is then refused or warned about, ``inexact_predicates``).

    Raises:
        PolicyRefused: a strict policy and a predicate that reaches the whole filesystem, or code that runs under a
            predicate the kernel cannot enforce exactly when the policy says ``inexact_predicates: refuse``.
    """
    if tb.file_sandbox is None:
        return [], None
    from sandbox import compile_predicate

    mode = WRITE if writes else READ
    comp = compile_predicate(tb.file_sandbox.predicate, mode)
    report = {
        "mode": mode,
        "exact": comp.exact,
        "residual": comp.residual,
        "rules": [{"path": r.path, "mode": r.mode} for r in comp.rules],
        "lines": comp.describe(),
        "missing": list(comp.missing),
    }
    if comp.unbounded:
        if policy.strict:
            raise PolicyRefused(
                f"toolbox {tb.name} (agent {tb.agent_slug}): its FileSandbox reaches the whole filesystem "
                "(AlwaysAllow, or a pattern/extension/size/Not without a directory around it); a strict policy "
                "refuses it. Intersect it with DirectoryRecursive of the trees the toolbox needs."
            )
        warnings.append(
            f"{tb.name}: its FileSandbox reaches the whole filesystem; the kernel grants '/' "
            "read-only (never read-write) and the in-worker check does the rest"
        )
    warnings += [
        f"{tb.name}: FileSandbox path {p} does not exist; nothing is granted there until restart" for p in comp.missing
    ]
    if not comp.exact and runs_code:
        message = (
            f"toolbox {tb.name} (agent {tb.agent_slug}) runs arbitrary code but its FileSandbox cannot be "
            f"enforced exactly by the kernel ({comp.residual}); code it runs could reach more than the "
            "predicate allows"
        )
        if policy.inexact_predicates == "refuse":
            raise PolicyRefused(message + ". The policy says inexact_predicates: refuse.")
        warnings.append(message)
    return list(comp.rules), report


def keep_existing(
    rules: Sequence[FsRule], host: HostView, made_at_start: Iterable[str], name: str
) -> tuple[list[FsRule], list[str]]:
    """``rules`` without the paths the host says do not exist (one warning each, ``name`` the toolbox's), except
    ``made_at_start``; then one rule per path, ``WRITE`` where any rule of that path writes (order kept)."""
    made = set(made_at_start)
    missing = sorted({r.path for r in rules if r.path not in made and not host.exists(r.path)})
    warnings = [f"{name}: {p} does not exist and is not granted" for p in missing]
    merged: dict[str, str] = {}
    for r in rules:
        if r.path not in missing:
            merged[r.path] = WRITE if WRITE in (merged.get(r.path), r.mode) else READ
    return [FsRule(p, m) for p, m in merged.items()], warnings


def plan_files(
    policy: Policy,
    tb: ToolboxConfig,
    kind: KindPlan,
    *,
    state_dir: str,
    runtime_dir: str,
    runtime_paths: Sequence[str],
    host: HostView,
    root: bool,
    bounds: Sequence[Bound] = (),
) -> WorkerFiles:
    """The rules and folders of ``tb``'s worker (module docstring). ``runtime_dir``: the staged worker code;
    ``runtime_paths``: the interpreter's trees; ``root``: the supervisor runs as root (``_kinds.GrantInputs``);
    ``bounds``: the ceilings of its agent (their ``paths`` bound every path its agent file names).

    Raises:
        PolicyRefused: what :func:`plan_file_sandbox` or the kind's grants refuse.
        ToolboxRefused: a path the agent file names past a ceiling's ``paths``.
        ToolboxRefused: (strict) a path the agent file names that grants nothing by itself (an MCP server's
            argument, ``_mcp_args.py``) lies outside every rule.
    """
    warnings: list[str] = []
    workdir, state = worker_folders(state_dir, tb)
    overrides = policy.toolbox_policy(tb.name, tb.agent_slug)
    grants = kind.grants(tb, kind.worker_config(tb.worker_config()), GrantInputs(state_dir, policy, root), warnings)
    rules = [FsRule(p, READ) for p in (*policy.system_paths, *runtime_paths, runtime_dir)]
    rules += [FsRule(p, WRITE) for p in policy.device_paths]
    rules += [FsRule(workdir, WRITE), FsRule(state, WRITE)]
    rules += [FsRule(p, READ) for p in (*tb.read_paths, *overrides.read_paths)]  # the policy's: this toolbox alone
    rules += grants.rules
    rules += [FsRule(p, WRITE) for p in tb.write_paths]
    sandboxed, report = plan_file_sandbox(
        tb, writes=kind.writes_files(grants.cfg), runs_code=kind.runs_code(grants.cfg), policy=policy, warnings=warnings
    )
    made_at_start = (workdir, state, runtime_dir, *grants.made_at_start)
    named = [(p, "a path it reads") for p in tb.read_paths] + [(p, "a path it writes") for p in tb.write_paths]
    named += [(r.path, f"granted {r.mode} for it") for r in grants.rules if r.path not in grants.made_at_start]
    named += [(p, "a git source it clones") for p in grants.reads_for_it]
    named += [(r.path, f"its FileSandbox, {r.mode}") for r in sandboxed]
    if any(b.ceiling.paths is not None for b in bounds):
        anyway = (*policy.system_paths, *runtime_paths, *policy.device_paths, *overrides.read_paths)
        past = path_refusals(named, bounds, granted=[canonical_rule_path(p, root=root) for p in anyway])
        if past:
            raise ToolboxRefused("; ".join(past))
    kept, missing = keep_existing([*rules, *sandboxed], host, made_at_start, tb.name)
    warnings += missing
    outside = paths_outside(grants.read_within, kept, lambda p: canonical_rule_path(p, root=root))
    if outside:
        text = outside_message(outside, toolbox=tb.name, agent=tb.agent_slug, source=tb.source)
        if policy.strict:
            raise ToolboxRefused(text + ". A strict policy refuses a setting that cannot hold.")
        warnings.append(text + "; it is passed to the server without a grant")
    return WorkerFiles(grants.cfg, kept, workdir, state, made_at_start, report, warnings)
