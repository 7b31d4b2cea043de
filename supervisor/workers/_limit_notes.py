"""Say which resource limit stopped a call: the worker's cgroup (``limits.processes``, ``limits.memory_bytes``) or an
rlimit whose signal killed the tool's process (``limits.cpu_seconds``, ``limits.file_size_bytes``).

How: the counters of the worker's cgroup (``sandbox._cgroup_events``) are read lazily. :meth:`LimitWatch.begin`
reads nothing on the hot path: it only makes sure the worker's group has a baseline (read once, at the first call
of each worker). The finisher it returns reads the counters again only when the result did not pass (``failed``
or ``error``, a dead worker's included) and compares them with the baseline, which then moves to that reading. A
counter that rose, or a result whose process died of ``SIGXCPU``/``SIGXFSZ``, becomes a :class:`LimitHit`: a
note appended to the result's text (status, summary and structured value unchanged, like the attachment store's
refusal notes), a ``limit_hit`` metadata pair, and a ``limit_hit`` trace record (toolbox, limit, value, call id).
:func:`limit_hits` and :func:`note` are pure. A call that passed is never annotated (a limit that stopped it would
have made it fail), so its result costs no read: about 0.1 ms a call saved (two opens and reads of kernel files).

Attribution: a counter is the group's, not the call's: a call that does not pass gets the note for every rise since
the last reading of its worker's group, so a limit hit by another call running at the same time, by a process an
earlier call left in the background, or during an earlier call that passed all the same (a script that survived a
refused fork) is named on it too. A worker killed whole (a v2 group with ``memory.oom.group``, or the worker itself
the largest process in v1) loses its group before the counters are read again: that call gets the restart's
error, not a note.
"""

from __future__ import annotations

import signal
import weakref
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from sandbox import CounterFiles, LimitCounters, counter_files, read_counters, rises

if TYPE_CHECKING:
    from collections.abc import Callable

    from supervisor.traces import TraceRecorder
    from toolboxes import ToolResult

__all__ = ["LimitHit", "LimitWatch", "explained_limits", "limit_hits", "note", "signal_of"]

_SIGNAL_LIMITS = {
    int(signal.SIGXCPU): ("cpu_seconds", "CPU time"),
    int(signal.SIGXFSZ): ("file_size_bytes", "file size"),
}


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


def limit_hits(
    rose: dict[str, int],
    sig: int | None,
    *,
    pids_max: int | None,
    memory_bytes: int | None,
    cpu_seconds: int | None,
    file_size_bytes: int | None,
) -> list[LimitHit]:
    """The limits that stopped a call, from the cgroup counters that rose during it (:func:`rises`) and the
    signal that killed its process (pure)."""
    hits = []
    if rose.get("pids_max"):
        hits.append(
            LimitHit(
                "processes",
                pids_max,
                f"the kernel refused {rose['pids_max']} fork(s) or thread(s): the toolbox's cgroup "
                f"already held its pids.max of {pids_max} processes and threads",
            )
        )
    if rose.get("oom_kills"):
        hits.append(
            LimitHit(
                "memory_bytes",
                memory_bytes,
                f"the kernel's OOM killer killed {rose['oom_kills']} process(es) of the toolbox: its "
                f"cgroup reached its memory limit of {memory_bytes} bytes",
            )
        )
    if sig in _SIGNAL_LIMITS:
        key, what = _SIGNAL_LIMITS[sig]
        value = cpu_seconds if key == "cpu_seconds" else file_size_bytes
        name = signal.Signals(sig).name
        unit = "s of CPU time" if key == "cpu_seconds" else "bytes"
        hits.append(
            LimitHit(
                key,
                value,
                f"the process was killed by {name}: it reached its {what} limit "
                f"(RLIMIT_{'CPU' if key == 'cpu_seconds' else 'FSIZE'}) of {value} {unit}",
            )
        )
    return hits


def explained_limits(
    *, pids_max: int | None, memory_bytes: int | None, cpu_seconds: int | None, file_size_bytes: int | None
) -> list[str]:
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


def note(toolbox: str, hit: LimitHit, agent: str = "") -> str:
    """The note an agent reads: what stopped the call and which policy key would have to change (pure). With
    ``agent`` the key is agent-qualified (``toolboxes.<agent>/<toolbox>``), which is right even when another agent
    has a toolbox of the same name."""
    key = f"{agent}/{toolbox}" if agent else toolbox
    return (
        f"[limit reached: {hit.what}. This is the policy's limits.{hit.limit} for toolbox {toolbox!r}; "
        f"the call may succeed with less work, or an operator can raise toolboxes.{key}.limits.{hit.limit} "
        f"(or limits.{hit.limit}) in the policy]"
    )


class _Baseline:
    """One worker group's counter files and the counters last read from them."""

    __slots__ = ("files", "seen")

    def __init__(self, files: CounterFiles) -> None:
        self.files = files
        self.seen = read_counters(files)


class LimitWatch:
    """Explains the limits a call hit, reading a worker's cgroup counters only for calls that did not pass."""

    #: a call's finish never waits (the counters are read at once)
    longest_wait_s = 0.0

    def __init__(self, trace: TraceRecorder) -> None:
        self.trace = trace
        #: per worker (gone with it): its group's files and last reading
        self._baselines: weakref.WeakKeyDictionary[Any, _Baseline] = weakref.WeakKeyDictionary()

    def _baseline(self, runner: Any) -> _Baseline | None:
        worker = getattr(runner, "worker", None)
        if worker is None:
            return None
        try:
            return self._baselines[worker]
        except KeyError:
            pass
        except TypeError:  # a worker that cannot be weakly referenced (a test double): no counters
            return None
        plan = getattr(getattr(runner, "spec", None), "cgroup", None)
        instance = getattr(worker, "cgroup", None)
        if plan is None or instance is None:
            return None
        baseline = self._baselines[worker] = _Baseline(counter_files(plan.layout, instance))
        return baseline

    def begin(self, tool: Any, call_id: str) -> Callable[[ToolResult], ToolResult]:
        """Before ``tool``'s call is sent (no read but a worker's first); the returned function explains its
        result."""
        return partial(self.finish, tool, call_id, self._baseline(tool.runner))

    def finish(self, tool: Any, call_id: str, baseline: _Baseline | None, result: ToolResult) -> ToolResult:
        """Annotate ``result`` with the limits it hit (unchanged when it passed or hit none)."""
        if result.status == "passed":
            return result
        rose: dict[str, int] = {}
        if baseline is not None:
            now = read_counters(baseline.files)
            rose = rises(baseline.seen, now)
            baseline.seen = LimitCounters(  # an unknown reading (the group gone) keeps what was known
                now.pids_max if now.pids_max is not None else baseline.seen.pids_max,
                now.oom_kills if now.oom_kills is not None else baseline.seen.oom_kills,
            )
        sig = signal_of(result)
        if not rose and sig not in _SIGNAL_LIMITS:
            return result
        spec = getattr(tool.runner, "spec", None)
        plan = getattr(spec, "cgroup", None)
        rlimits = getattr(getattr(spec, "plan", None), "rlimits", None)
        hits = limit_hits(
            rose,
            sig,
            pids_max=getattr(plan, "pids_max", None),
            memory_bytes=getattr(plan, "memory_bytes", None),
            cpu_seconds=getattr(rlimits, "cpu_seconds", None),
            file_size_bytes=getattr(rlimits, "file_size_bytes", None),
        )
        notes = [note(tool.toolbox, h, tool.agent) for h in hits]
        result.data = "\n".join([result.data, *notes] if result.data else notes)
        for h in hits:
            result.metadata.append(("limit_hit", f"limits.{h.limit}"))
            self.trace.record(
                "limit_hit",
                call_id=call_id,
                tool=tool.name,
                toolbox=tool.toolbox,
                agent=tool.agent,
                limit=f"limits.{h.limit}",
                value=h.value,
                what=h.what,
            )
        return result
