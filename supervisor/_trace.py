"""The trace recorder: one JSON object per line, appended to the policy's trace file.

Every record has ``ts`` (Unix time, float), ``event`` (the kind) and the event's fields. Kinds written by the
supervisor: ``supervisor_start``, ``supervisor_stop``, ``policy_compiled``, ``worker_spawn``, ``worker_exit``,
``worker_restart``, ``worker_start_failed``, ``crash_loop``, ``protocol_violation``, ``call_start``, ``call_end``,
``portal_refusal``, ``limit_hit``, ``egress``, ``load_error``, ``signal``, ``internal_error``, ``otel_export_failed``,
``worker_event`` (untrusted events a worker sent, tagged with its toolbox), and for sub-agent loops ``agent_start``,
``agent_step``, ``agent_end``, ``model_retry``, ``model_continuation_dropped``; and ``sessions_pruned``. Secrets
never enter a record: callers pass only what is safe to keep.

Records are written whole (a reader never sees half a line from us). For speed, the per-call records
(``call_start``, ``call_end``, ``egress``) are buffered and written at most ``FLUSH_INTERVAL_S`` later (or when the
buffer passes ``FLUSH_BYTES``); every other record, being rare and worth keeping across a crash, is written at once
together with whatever is buffered. So a supervisor killed with SIGKILL loses at most the last
``FLUSH_INTERVAL_S`` of call records; a clean stop loses nothing.

With ``max_bytes``, the file is rotated once a write takes it past that size: it becomes ``<path>.1`` (replacing an
older ``.1``) and a new file is started, so the trace never takes more than about twice ``max_bytes`` of disk,
however many calls, refusals or egress decisions the workers cause. Rotation happens between writes: a record is
never split.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

__all__ = ["FLUSH_BYTES", "FLUSH_INTERVAL_S", "TraceRecorder"]

FLUSH_INTERVAL_S = 0.2
FLUSH_BYTES = 256 * 1024
_BUFFERED = frozenset({"call_start", "call_end", "egress"})


class TraceRecorder:
    """Appends trace records to ``path`` (``None``: records are dropped). Not thread-safe: use from trio.

    ``max_bytes``: rotate the file to ``<path>.1`` once it grows past this size (``None``: never).
    """

    def __init__(self, path: str | None, max_bytes: int | None = None) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self._fd: int | None = None
        self._file_size = 0
        self._buffer: list[str] = []
        self._size = 0
        self._oldest = 0.0
        self._encoder = json.JSONEncoder(ensure_ascii=False, default=repr, separators=(",", ":"))
        #: also told of every record (``trace.otel``, ``supervisor/_otel.py``); must not raise
        self.sink: Callable[[str, dict[str, Any]], None] | None = None
        if path:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self._open()

    def _open(self) -> None:
        if self.path is None:
            return
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._file_size = os.fstat(self._fd).st_size

    def record(self, event: str, **fields: Any) -> None:
        """Add one record. Never raises for an unserialisable field (it is written as its ``repr``)."""
        if self.sink is not None:
            self.sink(event, fields)
        if self._fd is None:
            return
        now = time.time()
        line = self._encoder.encode({"ts": round(now, 6), "event": event, **fields}) + "\n"
        if not self._buffer:
            self._oldest = time.monotonic()
        self._buffer.append(line)
        self._size += len(line)
        if (event not in _BUFFERED or self._size >= FLUSH_BYTES
                or time.monotonic() - self._oldest >= FLUSH_INTERVAL_S):
            self.flush()

    def flush(self) -> None:
        """Write every buffered record now (one ``write`` when it fits)."""
        if self._fd is None or not self._buffer:
            return
        data = "".join(self._buffer).encode("utf-8", "replace")
        self._buffer.clear()
        self._size = 0
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]
        self._file_size += len(data)
        if self.max_bytes is not None and self._file_size >= self.max_bytes:
            self._rotate()

    def _rotate(self) -> None:
        """``<path>`` becomes ``<path>.1`` (an older one is replaced); records go to a new file from now on."""
        if self.path is None or self._fd is None:
            return
        os.close(self._fd)
        self._fd = None
        os.replace(self.path, self.path + ".1")
        self._open()

    def pending(self) -> bool:
        """Whether records wait in the buffer (the supervisor's flusher calls :meth:`flush` then)."""
        return bool(self._buffer)

    def close(self) -> None:
        """Flush and close; safe to call twice."""
        if self._fd is not None:
            self.flush()
            os.close(self._fd)
            self._fd = None
