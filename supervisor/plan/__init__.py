"""Compiling a loaded policy into one worker spec per toolbox (identities, grants, skill sources)."""

from ._ceilings import agent_bounds, model_host_refusals, tenant_reach
from ._compile import WORKER_PROCESS_ENV, CompiledPolicy, StagedCode, compile_policy, stage_code, worker_modules
from ._credential_values import run_credential_commands
from ._identities import rebind_agent
from ._kinds import KIND_PLANS, KindPlan, kind_plan
from ._launcher_links import launcher_refusals
from ._skill_sources import prepare_git_sources
from ._uid_registry import UidHold, registry_dir
from ._uid_release import ReleaseRefused, files_warning, list_state_dirs, release_state_dir, uid_ranges

__all__ = [
    "KIND_PLANS",
    "WORKER_PROCESS_ENV",
    "CompiledPolicy",
    "KindPlan",
    "ReleaseRefused",
    "StagedCode",
    "UidHold",
    "agent_bounds",
    "compile_policy",
    "files_warning",
    "kind_plan",
    "launcher_refusals",
    "list_state_dirs",
    "model_host_refusals",
    "prepare_git_sources",
    "rebind_agent",
    "registry_dir",
    "release_state_dir",
    "run_credential_commands",
    "stage_code",
    "tenant_reach",
    "uid_ranges",
    "worker_modules",
]
