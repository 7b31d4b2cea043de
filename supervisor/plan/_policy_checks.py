"""Checks of a whole policy's plan, beside each toolbox's own (pure): bare toolbox keys that name two agents'
toolboxes, agent files (and the policy file) a worker can write, an interpreter or staged code the workers cannot
read."""

from __future__ import annotations

from typing import TYPE_CHECKING

from supervisor._errors import PolicyRefused
from supervisor.config import ConfigError, ConfigProblem

from ._ceilings import ToolboxRefused
from ._compiled import load_error
from ._writable_agents import file_writers, writers_text

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from supervisor.config import LoadedConfig, LoadError, ToolboxConfig
    from supervisor.workers import WorkerSpec

    from ._host_view import HostView

__all__ = ["check_toolbox_keys", "refuse_writable_agent_files", "unreadable_runtime"]


def check_toolbox_keys(config: LoadedConfig) -> None:
    """A bare ``toolboxes.<name>`` key of the policy may name the toolbox of one agent only: settings (hosts,
    limits, env) meant for one tenant must not reach another's toolbox of the same name. ``agent/name`` keys
    always say whose.

    Raises:
        ConfigError: a bare key matches toolboxes of two or more agents.
    """
    problems = []
    keys = [(key, f"$.toolboxes.{key}") for key in config.policy.toolboxes]
    keys += [
        (key, f"$.shared_groups[{i}].toolboxes")
        for i, g in enumerate(config.policy.shared_groups)
        for key in g.toolboxes
    ]
    for key, where in keys:
        if "/" in key:
            continue
        owners = sorted({tb.agent_slug for tb in config.toolboxes() if tb.name == key})
        if len(owners) > 1:
            problems.append(
                ConfigProblem(
                    config.policy_file,
                    where,
                    f"the key {key!r} matches the toolboxes {key!r} of agents {', '.join(owners)}: whose settings are "
                    "these?",
                    "one agent-qualified key per toolbox: " + ", ".join(f"{o}/{key}" for o in owners),
                )
            )
    if problems:
        raise ConfigError(problems)


def refuse_writable_agent_files(
    config: LoadedConfig, specs: Sequence[WorkerSpec], origins: Mapping[tuple[str, str], ToolboxConfig]
) -> tuple[list[WorkerSpec], list[LoadError], list[str]]:
    """The policy file and agent files some worker of ``specs`` can write (``_writable_agents.py``): under a strict
    policy the policy file refuses the start and an agent file every toolbox of its agent (a load error each);
    otherwise each is a warning. Returns ``(specs kept, load errors, warnings)``.

    Raises:
        PolicyRefused: a strict policy whose file a worker can write.
    """
    warnings: list[str] = []
    strict = config.policy.strict
    policy_writers = file_writers({"policy": config.policy_file}, specs).get("policy")
    if policy_writers:
        text = writers_text(config.policy_file, policy_writers, "policy file")
        if strict:
            raise PolicyRefused(text + ". A strict policy does not start while a worker can write it.")
        warnings.append(text + " (not refused: the policy is not strict)")
    files = {a.slug: a.file for a in config.agents}
    kept = list(specs)
    errors: list[LoadError] = []
    for slug, writers in file_writers(files, specs).items():
        text = writers_text(files[slug], writers)
        if not strict:
            warnings.append(f"agent {slug}: {text} (not refused: the policy is not strict)")
            continue
        refused = ToolboxRefused(text + ". A strict policy refuses every toolbox of the agent until then.")
        for spec in [s for s in kept if s.agent == slug]:
            kept.remove(spec)
            errors.append(load_error(origins[(spec.agent, spec.toolbox)], "its agent file", refused))
    return kept, errors, warnings


def unreadable_runtime(paths: Sequence[str], uid: int, gid: int, host: HostView) -> str | None:
    """Why no worker of ``uid``/``gid`` could start when one of ``paths`` (the interpreter, the staged code) is
    unreadable to it (``None``: all are readable)."""
    for path in paths:
        if not host.readable_by(path, uid, gid):
            return (
                f"the sandbox uid {uid} cannot read {path}, so no worker could start. Run the supervisor "
                "with an interpreter every user can read, such as the venv scripts/setup makes "
                "(/opt/agents-supervise/venv/bin/agents-supervise)."
            )
    return None
