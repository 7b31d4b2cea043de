"""Say which resource limit stopped a call: the worker's cgroup (``limits.processes``, ``limits.memory_bytes``) or an
rlimit whose signal killed the tool's process (``limits.cpu_seconds``, ``limits.file_size_bytes``).

How: :meth:`LimitWatch.begin` reads the counters of the worker's cgroup (``sandbox._cgroup_events``) right before
the call is sent; the finisher it returns reads them again once the result is back. A counter that rose in between,
or a result whose process died of ``SIGXCPU``/``SIGXFSZ``, becomes a :class:`LimitHit`: a note appended to the
result's text (status, summary and structured value unchanged, like the attachment store's refusal notes), a
``limit_hit`` metadata pair, and a ``limit_hit`` trace record (toolbox, limit, value, call id).
:func:`limit_hits` and :func:`note` are pure.

Attribution: a counter is the group's, not the call's: a call that runs while another call (or a process an earlier
call left in the background) hits the limit on the same worker gets the note too. A worker killed whole (a v2 group
with ``memory.oom.group``, or the worker itself the largest process in v1) loses its group before the counters are
read again: that call gets the restart's error, not a note.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sandbox._cgroup_events import LimitCounters, counter_files, read_counters, rises
from supervisor.traces import TraceRecorder
from toolboxes._result import ToolResult

__all__ = ["LimitHit", "LimitWatch", "explained_limits", "limit_hits", "note", "signal_of"]

_SIGNAL_LIMITS = {int(signal.SIGXCPU): ("cpu_seconds", "CPU time"),
                  int(signal.SIGXFSZ): ("file_size_bytes", "file size")}


@dataclass(frozen=True)
class LimitHit:
    """One limit that stopped (part of) a call."""

    #: the policy key, without ``limits.``: ``processes``, ``memory_bytes``, ``cpu_seconds``, ``file_size_bytes``
    limit: str
    #: the limit's value in force (``None``: not known)
    value: int | None
    #: what the kernel did, in words
    what: str


def signal_of(result: ToolResult) -> int | None:
    """The signal the toolbox says killed the call's process, or ``None`` (pure).

    Read from what the toolboxes report: the bash tools' ``exit_code`` metadata (``-N`` for signal N) and
    execute-command's ``exitCode`` (``-N``). A shell that reports ``128 + N`` for a child is not read as a signal
    (any program may exit with such a code)."""
    code: Any = result.meta("exit_code")
    if code is None and isinstance(result.structured, dict):
        code = result.structured.get("exitCode")
    try:
        value = int(code) if code is not None and not isinstance(code, bool) else 0
    except (TypeError, ValueError):
        return None
    return -value if value < 0 else None


def limit_hits(rose: dict[str, int], sig: int | None, *, pids_max: int | None, memory_bytes: int | None,
               cpu_seconds: int | None, file_size_bytes: int | None) -> list[LimitHit]:
    """The limits that stopped a call, from the cgroup counters that rose during it (:func:`rises`) and the
    signal that killed its process (pure)."""
    hits = []
    if rose.get("pids_max"):
        hits.append(LimitHit("processes", pids_max,
                             f"the kernel refused {rose['pids_max']} fork(s) or thread(s): the toolbox's cgroup "
                             f"already held its pids.max of {pids_max} processes and threads"))
    if rose.get("oom_kills"):
        hits.append(LimitHit("memory_bytes", memory_bytes,
                             f"the kernel's OOM killer killed {rose['oom_kills']} process(es) of the toolbox: its "
                             f"cgroup reached its memory limit of {memory_bytes} bytes"))
    if sig in _SIGNAL_LIMITS:
        key, what = _SIGNAL_LIMITS[sig]
        value = cpu_seconds if key == "cpu_seconds" else file_size_bytes
        name = signal.Signals(sig).name
        unit = "s of CPU time" if key == "cpu_seconds" else "bytes"
        hits.append(LimitHit(key, value, f"the process was killed by {name}: it reached its {what} limit "
                                         f"(RLIMIT_{'CPU' if key == 'cpu_seconds' else 'FSIZE'}) of {value} {unit}"))
    return hits


def explained_limits(*, pids_max: int | None, memory_bytes: int | None, cpu_seconds: int | None,
                     file_size_bytes: int | None) -> list[str]:
    """The limits in force whose hits a result will name, with how each is seen, for ``check`` (pure)."""
    out = []
    if pids_max is not None:
        out.append("limits.processes (pids.events)")
    if memory_bytes is not None:
        out.append("limits.memory_bytes (OOM kills in the group)")
    if cpu_seconds is not None:
        out.append("limits.cpu_seconds (SIGXCPU)")
    if file_size_bytes is not None:
        out.append("limits.file_size_bytes (SIGXFSZ)")
    return out


def note(toolbox: str, hit: LimitHit) -> str:
    """The note an agent reads: what stopped the call and which policy key would have to change (pure)."""
    return (f"[limit reached: {hit.what}. This is the policy's limits.{hit.limit} for toolbox {toolbox!r}; "
            f"the call may succeed with less work, or an operator can raise toolboxes.{toolbox}.limits.{hit.limit} "
            f"(or limits.{hit.limit}) in the policy]")


class LimitWatch:
    """Reads a worker's cgroup counters around each call and explains the limits a call hit."""

    def __init__(self, trace: TraceRecorder) -> None:
        self.trace = trace

    def begin(self, tool: Any, call_id: str) -> Callable[[ToolResult], ToolResult]:
        """Read the counters of ``tool``'s worker now; the returned function explains ``tool``'s result."""
        runner = tool.runner
        spec = getattr(runner, "spec", None)
        worker = getattr(runner, "worker", None)
        plan = getattr(spec, "cgroup", None)
        instance = getattr(worker, "cgroup", None)
        files = counter_files(plan.layout, instance) if plan is not None and instance is not None else None
        before = read_counters(files) if files is not None else LimitCounters()

        def finish(result: ToolResult) -> ToolResult:
            rose = rises(before, read_counters(files)) if files is not None else {}
            sig = signal_of(result)
            if not rose and sig not in _SIGNAL_LIMITS:
                return result
            rlimits = getattr(getattr(spec, "plan", None), "rlimits", None)
            hits = limit_hits(rose, sig, pids_max=getattr(plan, "pids_max", None),
                              memory_bytes=getattr(plan, "memory_bytes", None),
                              cpu_seconds=getattr(rlimits, "cpu_seconds", None),
                              file_size_bytes=getattr(rlimits, "file_size_bytes", None))
            notes = [note(tool.toolbox, h) for h in hits]
            result.data = "\n".join([result.data, *notes] if result.data else notes)
            for h in hits:
                result.metadata.append(("limit_hit", f"limits.{h.limit}"))
                self.trace.record("limit_hit", call_id=call_id, tool=tool.name, toolbox=tool.toolbox,
                                  limit=f"limits.{h.limit}", value=h.value, what=h.what)
            return result

        return finish
