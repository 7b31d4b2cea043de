"""Worker processes: spawning, the protocol connection, restarts, limit notes, one-shot confined runs."""

from ._confined_exec import ConfinedOutcome, run_confined
from ._launch import launcher_argv
from ._limit_notes import LimitWatch, explained_limits
from ._pipes import send_whole
from ._runner import SupervisionPolicy, ToolboxRunner
from ._staging import stage_worker_code
from ._tool_cache import tool_cache_path
from ._worker import Worker, WorkerSpec

__all__ = [
    "ConfinedOutcome",
    "LimitWatch",
    "SupervisionPolicy",
    "ToolboxRunner",
    "Worker",
    "WorkerSpec",
    "explained_limits",
    "launcher_argv",
    "run_confined",
    "send_whole",
    "stage_worker_code",
    "tool_cache_path",
]
