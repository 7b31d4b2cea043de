"""Compile a loaded policy for a starting supervisor: stage the worker code, read the host's facts, plan, apply.

The steps, each its own module:

1. :func:`stage_code` (an effect): the worker code copied where the sandbox uids read it, apart so that the zygote
   can start on it while the rest compiles;
2. ``_host_facts.read_host_facts``: what the plan needs of the host, read once (nothing is made or changed);
3. ``_policy_plan.plan_policy`` (pure): one worker spec per toolbox, and what applying will do;
4. ``_apply.apply_plan`` (the effects): identities recorded, the CA written, the workers' folders made.

:func:`compile_policy` runs them in order (and plans again when another supervisor recorded identities between
steps 3 and 4); ``check`` runs only steps 2 and 3 (``compile_policy(prepare=False)``). A policy that cannot be
enforced raises :class:`~supervisor._errors.PolicyRefused` before anything starts; anything else that goes wrong for
one toolbox is its load error (:attr:`CompiledPolicy.load_errors`): it gets no worker and the others compile.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from sandbox import open_anchor
from supervisor.workers import preload_modules, stage_worker_code

from ._apply import apply_plan
from ._compiled import CompiledPolicy, StagedCode
from ._host_facts import read_host_facts
from ._identities import IdentitiesChanged
from ._policy_plan import plan_policy
from ._worker_plan import WORKER_ENTRY

if TYPE_CHECKING:
    from collections.abc import Mapping

    from supervisor.config import LoadedConfig

    from ._apply import AppliedPlan

__all__ = ["PLAN_ATTEMPTS", "compile_policy", "plan_and_apply", "stage_code", "worker_modules"]

#: How many times :func:`plan_and_apply` plans when identities change under it (another supervisor on the same
#: state dir or registry recording uids at that moment): each attempt is a few milliseconds, and each one that
#: fails means another supervisor made progress.
PLAN_ATTEMPTS = 5


def stage_code(config: LoadedConfig, *, state_dir: str | None = None) -> StagedCode:
    """Make the state directory (``state_dir``, default the policy's) and stage the worker code in it; the first
    step of :func:`compile_policy`, apart so that the zygote can be started on the staged code while the rest
    compiles (it needs nothing else). Raises ``OSError`` when the state directory cannot be made; code that
    cannot be staged is not raised: every toolbox's load error (``StagedCode.error``)."""
    state_dir = os.path.abspath(state_dir or config.policy.state_dir)
    os.close(open_anchor(state_dir, mode=0o711))
    try:
        return StagedCode(state_dir, stage_worker_code(state_dir))
    except Exception as exc:  # every toolbox's load error in compile_policy; the supervisor still starts
        return StagedCode(state_dir, None, exc)


def worker_modules(config: LoadedConfig) -> list[str]:
    """What the workers of ``config``'s toolboxes import first (their entry's module, their kind's package): what a
    zygote preloads for them (the same list as ``workers.preload_modules`` of the compiled specs)."""
    return preload_modules([(WORKER_ENTRY, tb.kind) for tb in config.toolboxes()])


def plan_and_apply(
    config: LoadedConfig, *, python: str, staged: StagedCode, command_values: Mapping[str, str]
) -> AppliedPlan:
    """Steps 2 to 4 for the state dir ``staged`` is in: read the facts, plan, apply; planned again (facts read
    again) when :class:`IdentitiesChanged`, at most :data:`PLAN_ATTEMPTS` times. ``command_values``: the outputs of
    the credentials' ``command:`` sources (``run_credential_commands``, awaited first: nothing here runs a program).
    The caller keeps ``AppliedPlan.rollback`` for a start or reload that fails later.

    Raises:
        ConfigError, PolicyRefused: what planning or applying raise (``IdentitiesChanged`` after the last attempt).
    """
    for attempt in range(1, PLAN_ATTEMPTS + 1):
        facts = read_host_facts(config, state_dir=staged.state_dir, command_values=command_values)
        plan = plan_policy(config, facts, python=python, staged=staged)
        try:
            return apply_plan(plan)
        except IdentitiesChanged:
            if attempt == PLAN_ATTEMPTS:
                raise
    raise AssertionError("unreachable")


def compile_policy(
    config: LoadedConfig,
    *,
    python: str | None = None,
    state_dir: str | None = None,
    prepare: bool = True,
    staged: StagedCode | None = None,
    command_values: Mapping[str, str] | None = None,
) -> CompiledPolicy:
    """Compile ``config`` (module docstring); without ``prepare`` (``check``) only read and plan: nothing is
    staged, made, recorded, written or run. With ``prepare``, ``staged`` says where :func:`stage_code` staged the
    code (for the same state directory; ``None``: staged now) and ``command_values`` gives the outputs of the
    credentials' ``command:`` sources (``run_credential_commands``, awaited first: this function runs no program).

    Raises:
        ConfigError: a bare toolbox key of two agents, an agent slug bound to another file.
        PolicyRefused: what the policy cannot hold on this host.
    """
    python = python or sys.executable
    state_dir = os.path.abspath(state_dir or config.policy.state_dir)
    commands = [n for n, c in config.policy.credentials.items() if c.source.command]
    if prepare and command_values is None and commands:
        raise ValueError("compile_policy(prepare=True) needs the credential commands' values (command_values)")
    if not prepare:
        return plan_policy(config, read_host_facts(config, state_dir=state_dir), python=python).compiled
    if staged is None:
        staged = stage_code(config, state_dir=state_dir)
    elif staged.state_dir != state_dir:
        raise ValueError(f"the code was staged for {staged.state_dir}, not {state_dir}")
    return plan_and_apply(config, python=python, staged=staged, command_values=command_values or {}).compiled
