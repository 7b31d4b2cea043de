"""Worker processes: spawning, the protocol connection, restarts, limit notes and kernel denials explained,
one-shot children (confined runs, and the supervisor's own programs)."""

from ._audit_reach import host_explanations
from ._confined_exec import ConfinedOutcome, run_confined
from ._kernel_audit import KernelAudit
from ._launch import launcher_argv
from ._limit_notes import LimitWatch, explained_limits
from ._one_shot import ChildOutcome, run_child
from ._pipes import ChunkReader, send_whole
from ._runner import ToolboxRunner
from ._spawner import LauncherSpawner, Spawner, ZygoteSpawner, preload_modules
from ._staging import stage_worker_code
from ._tool_cache import tool_cache_path
from ._worker import EventHandler, RequestHandler, Worker, WorkerSpec
from ._zygote_client import Zygote, ZygoteGone

__all__ = [
    "ChildOutcome",
    "ChunkReader",
    "ConfinedOutcome",
    "EventHandler",
    "KernelAudit",
    "LauncherSpawner",
    "LimitWatch",
    "RequestHandler",
    "Spawner",
    "ToolboxRunner",
    "Worker",
    "WorkerSpec",
    "Zygote",
    "ZygoteGone",
    "ZygoteSpawner",
    "explained_limits",
    "host_explanations",
    "launcher_argv",
    "preload_modules",
    "run_child",
    "run_confined",
    "send_whole",
    "stage_worker_code",
    "tool_cache_path",
]
