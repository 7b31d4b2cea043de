"""The trace recorder: one JSON object per line, appended to the policy's trace file.

Every record has ``ts`` (Unix time, float), ``event`` (the kind) and the event's fields. Kinds written by the
supervisor: ``supervisor_start``, ``supervisor_stop``, ``policy_compiled``, ``worker_spawn``, ``worker_exit``,
``worker_restart``, ``worker_start_failed``, ``crash_loop``, ``protocol_violation``, ``call_start``, ``call_end``,
``portal_refusal``, ``limit_hit``, ``egress``, ``load_error``, ``worker_event`` (untrusted events a worker sent,
tagged with its toolbox). Secrets never enter a record: callers pass only what is safe to keep.

Each record is written with one ``write`` of a whole line and flushed, so a crash loses at most the record being
written and readers never see half a line from us.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, TextIO

__all__ = ["TraceRecorder"]


class TraceRecorder:
    """Appends trace records to ``path`` (``None``: records are dropped)."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._file: TextIO | None = None
        if path:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            self._file = os.fdopen(fd, "a", encoding="utf-8", buffering=1)

    def record(self, event: str, **fields: Any) -> None:
        """Write one record. Never raises for an unserialisable field (it is written as its ``repr``)."""
        if self._file is None:
            return
        line = json.dumps({"ts": round(time.time(), 6), "event": event, **fields}, ensure_ascii=False,
                          default=repr, separators=(",", ":"))
        self._file.write(line + "\n")

    def close(self) -> None:
        """Flush and close; safe to call twice."""
        if self._file is not None:
            self._file.close()
            self._file = None
