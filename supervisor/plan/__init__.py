"""Compiling a loaded policy into one worker spec per toolbox (identities, grants, skill sources)."""

from ._ceilings import agent_bounds, model_host_refusals, tenant_reach
from ._compile import WORKER_PROCESS_ENV, CompiledPolicy, StagedCode, compile_policy, stage_code, worker_modules
from ._credential_values import run_credential_commands
from ._identities import rebind_agent
from ._kinds import KIND_PLANS, KindPlan, kind_plan
from ._launcher_links import launcher_refusals
from ._skill_sources import prepare_git_sources

__all__ = [
    "KIND_PLANS",
    "WORKER_PROCESS_ENV",
    "CompiledPolicy",
    "KindPlan",
    "StagedCode",
    "agent_bounds",
    "compile_policy",
    "kind_plan",
    "launcher_refusals",
    "model_host_refusals",
    "prepare_git_sources",
    "rebind_agent",
    "run_credential_commands",
    "stage_code",
    "tenant_reach",
    "worker_modules",
]
