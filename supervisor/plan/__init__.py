"""A loaded policy planned into one worker spec per toolbox, then applied: plan (pure), then apply (effects).

The interface, in the order a start or a reload calls it:

- ``stage_code(config, state_dir=...) -> StagedCode`` (an effect: the state dir made, the worker code copied into
  it; a zygote can start on it at once). Its failure is not raised: every toolbox's load error.
- ``await run_credential_commands(policy.credentials) -> command_values``: the credentials' ``command:`` sources
  run through the supervisor's one child runner (the trio loop serves meanwhile). ``check`` never calls it.
- ``read_host_facts(config, state_dir=..., command_values=...) -> HostFacts``: everything planning needs of the
  host, read once (the supervisor's uid, Landlock ABI, cgroup layout, agent files' owners, the identity table and
  uid registry as they are, the credentials' values, the supervisor's CA); nothing is made, changed or run
  (``command_values`` ``None``: the command sources' values stay unresolved, as ``check`` shows them).
- ``plan_policy(config, facts, python=..., staged=...) -> PolicyPlan`` (pure): ``PolicyPlan.compiled`` is the
  ``CompiledPolicy`` (specs, warnings, load errors) the supervisor runs; raises ``ConfigError`` or
  ``PolicyRefused`` for what cannot start. Tests make facts of their own (``dataclasses.replace``) and plan
  without root.
- ``apply_plan(plan) -> AppliedPlan`` (the effects, synchronous: run it off the trio thread): identities recorded
  in the state dir's table and the host-wide registry, the CA's certificate written, each worker's folders made;
  ``AppliedPlan.compiled`` is the policy to run (a toolbox whose folders cannot be made is a load error there);
  ``AppliedPlan.rollback()`` takes back the folders and CA file it made (identity records stay: a number is never
  given twice), what a start or reload that fails before its switch calls; ``AppliedPlan.keep()`` once it switched.
  Raises ``IdentitiesChanged`` (read the facts and plan again; nothing recorded) when another supervisor recorded
  identities since the facts were read.
- ``plan_and_apply(config, python=..., staged=..., command_values=...) -> AppliedPlan``: facts, plan and apply
  with the retry;
  ``compile_policy(config, prepare=...)`` returns its ``compiled`` (``prepare=False``: facts and plan only, what
  ``check`` shows).
- Then ``prepare_git_sources`` clones the skills' git sources of the started supervisor (async), and a running
  supervisor holds ``UidHold(*compiled.uid_claim)`` while its state dir's uids are in use.
"""

from ._apply import AppliedPlan, apply_plan
from ._ceilings import agent_bounds, model_host_refusals, tenant_reach
from ._compile import compile_policy, plan_and_apply, stage_code, worker_modules
from ._compiled import CompiledPolicy, StagedCode
from ._credential_values import run_credential_commands
from ._host_facts import HostFacts, read_host_facts
from ._identities import IdentitiesChanged
from ._identity_store import bound_elsewhere, rebind_agent
from ._kinds import KIND_PLANS, KindPlan, kind_plan
from ._launcher_links import launcher_refusals
from ._policy_plan import PolicyPlan, plan_policy
from ._skill_clones import prepare_git_sources
from ._uid_registry import UidHold, registry_dir
from ._uid_release import ReleaseRefused, files_warning, list_state_dirs, release_state_dir, uid_ranges
from ._worker_plan import WORKER_PROCESS_ENV

__all__ = [
    "KIND_PLANS",
    "WORKER_PROCESS_ENV",
    "AppliedPlan",
    "CompiledPolicy",
    "HostFacts",
    "IdentitiesChanged",
    "KindPlan",
    "PolicyPlan",
    "ReleaseRefused",
    "StagedCode",
    "UidHold",
    "agent_bounds",
    "apply_plan",
    "bound_elsewhere",
    "compile_policy",
    "files_warning",
    "kind_plan",
    "launcher_refusals",
    "list_state_dirs",
    "model_host_refusals",
    "plan_and_apply",
    "plan_policy",
    "prepare_git_sources",
    "read_host_facts",
    "rebind_agent",
    "registry_dir",
    "release_state_dir",
    "run_credential_commands",
    "stage_code",
    "tenant_reach",
    "uid_ranges",
    "worker_modules",
]
