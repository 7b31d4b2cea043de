"""Compiling a loaded policy into one worker spec per toolbox (identities, grants, skill sources)."""

from ._compile import CompiledPolicy, compile_policy
from ._identities import rebind_agent
from ._kinds import KIND_PLANS, KindPlan, kind_plan
from ._skill_sources import prepare_git_sources

__all__ = [
    "KIND_PLANS",
    "CompiledPolicy",
    "KindPlan",
    "compile_policy",
    "kind_plan",
    "prepare_git_sources",
    "rebind_agent",
]
