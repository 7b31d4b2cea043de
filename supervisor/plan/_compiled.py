"""What a plan gives the supervisor: :class:`CompiledPolicy` (one worker spec per toolbox, and the policy's settings
the rest of the supervisor reads), the staged worker code it is planned with, and a toolbox's load error."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from supervisor.config import LoadError, toolbox_not_loaded

if TYPE_CHECKING:
    from supervisor.config import LoadedConfig, Supervision, ToolboxConfig
    from supervisor.workers import WorkerSpec

    from ._skill_sources import GitSource

__all__ = [
    "ROOTLESS_WARNING",
    "STARTS_PER_CPU",
    "ZYGOTE_STARTS_PER_CPU",
    "CompiledPolicy",
    "StagedCode",
    "load_error",
]

#: Workers started at once per CPU by the launcher when ``supervision.parallel_starts`` is not set: a launcher's
#: start is mostly the worker's own CPU (a fresh interpreter, its imports, confinement: about 200 ms), so more at once
#: only shares the CPUs thinner and brings every one of them nearer its ``start_timeout_s``; a few per CPU keep the
#: CPUs busy while others wait on I/O.
STARTS_PER_CPU = 4
#: The same, for starts the zygote forks: each is about 12 ms of the worker's CPU and 5 ms of the supervisor's, and
#: much of a start's time is waiting in the kernel (namespace, mount and cgroup changes wait for RCU grace periods,
#: which concurrent waiters share), so more at once finish sooner: 100 toolboxes were ready about 1.5x sooner with
#: 32 a CPU than with 4. At this many a start is still well within its ``start_timeout_s`` on a loaded machine
#: (docs/DECISIONS.md, "Start to ready (issue 18)").
ZYGOTE_STARTS_PER_CPU = 32
#: Said at every start and by ``check`` when the supervisor is not root (docs/CONFINEMENT.md, "Without root").
ROOTLESS_WARNING = (
    "the supervisor is not root: every worker runs as its uid {uid} in a user namespace of its own (Landlock, the "
    "private view, the network namespace and seccomp hold as with root); what needs root is off: a uid per worker "
    "(workers' files are apart only by Landlock, not by file modes), shared_groups, cgroup limits (memory_bytes, "
    "cpus; processes is only RLIMIT_NPROC), the kernel's audit records, and inodes of a worker's own for /dev nodes"
)


@dataclass
class CompiledPolicy:
    """Everything the supervisor needs to start, derived once from the loaded config."""

    config: LoadedConfig
    specs: list[WorkerSpec]
    state_dir: str
    trace_path: str | None
    max_call_depth: int
    session_max_calls: int | None
    session_max_concurrent: int | None
    media_limits: dict[str, int]
    #: the policy's ``supervision`` (the runners' restart settings)
    supervision: Supervision
    landlock_abi: int
    #: workers started at once by the launcher (``supervision.parallel_starts``, default :data:`STARTS_PER_CPU` a CPU)
    parallel_starts: int = 8
    #: workers started at once when the zygote forks them (``supervision.parallel_starts``, default
    #: :data:`ZYGOTE_STARTS_PER_CPU` a CPU)
    zygote_parallel_starts: int = 32
    warnings: list[str] = field(default_factory=list)
    #: SkillGitRepo sources to clone at start (their worker configs already name the clones' folders)
    git_sources: list[GitSource] = field(default_factory=list)
    #: toolboxes left out because they could not be compiled (``{"toolbox", "agent", "kind", "source", "message"}``)
    load_errors: list[LoadError] = field(default_factory=list)
    #: the staged worker code every spec's launcher command puts first on ``sys.path`` (``None``: not staged)
    runtime_dir: str | None = None
    #: the interpreter of every spec's launcher command
    python: str = ""
    #: ``(registry directory, state id)`` where this state dir's uids are claimed host-wide (``None``: no uids, or
    #: not applied): a running supervisor holds it (``_uid_registry.UidHold``) so ``uids release`` refuses
    uid_claim: tuple[str, str] | None = None


@dataclass(frozen=True)
class StagedCode:
    """The worker code staged in a state directory (``_compile.stage_code``), or why it could not be."""

    state_dir: str
    #: the staged folder (``None``: not staged, see ``error``)
    runtime_dir: str | None
    error: BaseException | None = None


def load_error(tb: ToolboxConfig, source: str, exc: BaseException) -> LoadError:
    """The load error of ``tb``: it did not load because of ``exc`` while ``source`` (what was being done)."""
    return toolbox_not_loaded(tb.name, tb.agent_slug, source, f"{type(exc).__name__}: {exc}", kind=tb.kind)
