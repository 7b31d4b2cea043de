"""Host facts for planning tests: this host's, read as ``check`` reads them, with what a test says instead (a root
supervisor, a cgroup layout, a Landlock ABI), so that plans a root supervisor would make are tested without root."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from supervisor.plan import HostFacts, plan_policy, read_host_facts

if TYPE_CHECKING:
    from sandbox import CgroupLayout
    from supervisor.config import LoadedConfig
    from supervisor.plan import CompiledPolicy

#: A cgroup v2 layout (pids, memory and cpu controllers), as a root supervisor on a systemd host sees it; the plan
#: only names it (nothing is made from a plan).
V2_LAYOUT_BASE = "/sys/fs/cgroup/agents-supervise.test"


def v2_layout() -> CgroupLayout:
    from sandbox import CgroupLayout

    return CgroupLayout("v2", V2_LAYOUT_BASE, V2_LAYOUT_BASE, "/sys/fs/cgroup", V2_LAYOUT_BASE)


def facts_as(config: LoadedConfig, state_dir: str, *, root: bool = True, **changes: Any) -> HostFacts:
    """This host's facts for ``config`` and ``state_dir``; with ``root``, those of a root supervisor (uid 0, a
    cgroup v2 layout, Landlock ABI 7 at least unless ``changes`` say otherwise); then ``changes``."""
    facts = read_host_facts(config, state_dir=state_dir)
    if root:
        facts = dataclasses.replace(
            facts,
            euid=0,
            egid=0,
            landlock_abi=max(facts.landlock_abi, 7),
            cgroup_layout=v2_layout(),
            cgroup_problem="",
        )
    return dataclasses.replace(facts, **changes)


def plan_as_root(config: LoadedConfig, state_dir: str | None = None, **changes: Any) -> CompiledPolicy:
    """``config`` planned as a root supervisor on this host plans it (:func:`facts_as`), in ``state_dir`` (default
    the policy's): what ``check`` shows as root, without root."""
    return plan_policy(config, facts_as(config, state_dir or config.policy.state_dir, **changes)).compiled
