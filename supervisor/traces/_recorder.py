"""The trace recorder: one JSON object per line, appended to the policy's trace file.

Every record has ``ts`` (Unix time, float), ``event`` (the kind) and the event's fields. Kinds written by the
supervisor: ``supervisor_start``, ``supervisor_stop``, ``policy_compiled``, ``worker_spawn``, ``worker_exit``,
``worker_restart``, ``worker_start_failed``, ``crash_loop``, ``crash_loop_recovered``, ``protocol_violation``,
``call_start``, ``call_end``, ``portal_refusal``, ``limit_hit``, ``denial`` (a kernel refusal explained:
``supervisor.workers._kernel_audit``), ``kernel_audit`` (whether audit records are read), ``egress``, ``load_error``,
``signal``, ``internal_error``, ``otel_export_failed``, ``policy_reload``, ``trace_moved`` (a reload moved the file: the
last record of the old file and the first of the new, each naming both),
``worker_event`` (untrusted events a worker sent, tagged with its toolbox), and for sub-agent loops ``agent_start``,
``agent_step``, ``agent_end``, ``model_retry``, ``model_continuation_dropped``; ``sessions_pruned``; and for the
zygote (``supervisor.workers._spawner``) ``zygote_started``, ``zygote_died``, ``zygote_fallback``,
``zygote_spawn_failed`` (each of the last three also one stderr line, with its ``reason``). Secrets
never enter a record: callers pass only what is safe to keep.

Records are strict JSON, one complete record per line, whatever a worker or an argument put in a field: NaN and
infinities become the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``, lone surrogates become U+FFFD, values
nested deeper than :data:`MAX_DEPTH` or beyond :data:`MAX_VALUES` are cut with a marker, and a record longer than
:data:`MAX_RECORD_CHARS` has its long strings shortened (``"trace_truncated": true`` says so). Records are written
whole (a reader never sees half a line from us). For speed, ``call_start``, ``egress`` and ``denial`` records are
buffered and written at most ``FLUSH_INTERVAL_S`` later (or when the buffer passes ``FLUSH_BYTES``); every other
record, ``call_end`` included, is written at once together with whatever is buffered (one ``write``); the portal
buffers a frontend's ``call_end`` too (:meth:`TraceRecorder.record_buffered`) and flushes it, with the other calls
that ended at the same time, before it hands the results back (``supervisor/calls/_group_commit.py``). So a
finished call's records (its ``call_start``, what was buffered before, and its ``call_end``) are in the kernel's
hands before anyone sees its result: a
supervisor killed with SIGKILL loses at most the ``call_start`` of calls still running and the last
``FLUSH_INTERVAL_S`` of egress decisions and denials not followed by a call's end (a machine crash may lose what
the kernel had not written to disk: there is no ``fsync``); a clean stop loses nothing.
:meth:`TraceRecorder.record_raw` takes fields already encoded as JSON (the portal's arguments, encoded once for
the trace and the session store).

With ``max_bytes``, the file is rotated once a write takes it past that size: it becomes ``<path>.1`` (replacing an
older ``.1``) and a new file is started, so the trace never takes more than about twice ``max_bytes`` of disk,
however many calls, refusals or egress decisions the workers cause. Rotation happens between writes: a record is
never split.
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["FLUSH_BYTES", "FLUSH_INTERVAL_S", "MAX_RECORD_CHARS", "TraceRecorder", "strict_json"]

FLUSH_INTERVAL_S = 0.2
FLUSH_BYTES = 256 * 1024
_BUFFERED = frozenset({"call_start", "egress", "denial"})
#: Bounds of one record: nesting, values, characters of the whole line (a longer one has its strings shortened).
MAX_DEPTH = 32
MAX_VALUES = 20_000
MAX_RECORD_CHARS = 256 * 1024
#: How long each string of an over-long record may stay.
_SHORT_STRING = 2000
_NON_FINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}


def _clean_string(text: str, limit: int | None) -> str:
    if limit is not None and len(text) > limit:
        text = text[:limit] + f"... ({len(text) - limit} more characters)"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates (a worker's or an agent's bytes): replaced, never passed on
        text = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return text


def strict_json(value: Any, *, string_limit: int | None = None) -> Any:
    """``value`` as plain, strict JSON: finite numbers, valid Unicode, string keys, bounded depth and size.

    Recursion is bounded by :data:`MAX_DEPTH`; at most :data:`MAX_VALUES` values are kept. Other objects become
    their ``repr`` (shortened). Never raises.
    """
    budget = [MAX_VALUES]

    def walk(item: Any, depth: int) -> Any:
        budget[0] -= 1
        if budget[0] < 0:
            return "<trace: more values left out>"
        if item is None or isinstance(item, bool | int):
            return item
        if isinstance(item, float):
            return item if math.isfinite(item) else _NON_FINITE.get(item, "NaN")
        if isinstance(item, str):
            return _clean_string(item, string_limit)
        if depth >= MAX_DEPTH:
            return "<trace: nested too deeply>"
        if isinstance(item, dict):
            return {_clean_string(str(k), 200): walk(v, depth + 1) for k, v in list(item.items())}
        if isinstance(item, list | tuple | set | frozenset):
            return [walk(v, depth + 1) for v in list(item)]
        try:
            text = repr(item)
        except Exception:  # a repr that fails (or recurses) must not cost the record
            text = f"<{type(item).__name__}>"
        return _clean_string(text, _SHORT_STRING)

    return walk(value, 0)


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
        self._encoder = json.JSONEncoder(ensure_ascii=False, allow_nan=False, default=repr, separators=(",", ":"))
        self._raw_keys: dict[str, str] = {}  # a raw field's name -> ``,"name":`` (record_raw)
        #: also told of every record (``trace.otel``, ``supervisor/traces/_otel.py``); must not raise
        self.sink: Callable[[str, dict[str, Any]], None] | None = None
        #: also told of every record while registered (MCP sessions' logging, ``frontends/_mcp_logging.py``);
        #: each must be quick and must not raise
        self.listeners: set[Callable[[str, dict[str, Any]], None]] = set()
        if path:
            self._open()  # its folder made by open_file

    def _open(self) -> None:
        if self.path is None:
            return
        self._fd = self.open_file(self.path)
        self._file_size = os.fstat(self._fd).st_size

    @staticmethod
    def open_file(path: str) -> int:
        """``path`` opened for appending records (made, mode 0600, its folder too), for :meth:`move_to`.

        Raises:
            OSError: it cannot be made or opened.
        """
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def move_to(self, path: str, fd: int) -> None:
        """Go on at ``path`` (``fd``: it opened by :meth:`open_file`): a ``trace_moved`` record ends the old file
        and begins the new one, each naming the other. Never raises."""
        old = self.path
        self.record("trace_moved", to=path, **{"from": old})
        self.flush()
        if self._fd is not None:
            os.close(self._fd)
        self.path, self._fd = path, fd
        self._file_size = os.fstat(fd).st_size
        self.record("trace_moved", to=path, **{"from": old})

    def record(self, event: str, **fields: Any) -> None:
        """Add one record. Never raises for an unserialisable field (it is written as its ``repr``)."""
        if self.sink is not None:
            self.sink(event, fields)
        if self.listeners:
            for listener in tuple(self.listeners):
                listener(event, fields)
        if self._fd is None:
            return
        self._add(event, self._line({"ts": round(time.time(), 6), "event": event, **fields}) + "\n")

    def record_buffered(self, event: str, **fields: Any) -> None:
        """:meth:`record`, buffered whatever its kind: the caller :meth:`flush`-es before what the record tells of
        can be seen (the portal's group commit of a frontend's ``call_end``)."""
        if self.sink is not None:
            self.sink(event, fields)
        if self.listeners:
            for listener in tuple(self.listeners):
                listener(event, fields)
        if self._fd is None:
            return
        self._add(event, self._line({"ts": round(time.time(), 6), "event": event, **fields}) + "\n", buffered=True)

    def record_raw(self, event: str, raw: dict[str, str], **fields: Any) -> None:
        """:meth:`record` with the fields of ``raw`` given as JSON text already (valid JSON, encodable as UTF-8, at
        most a few KiB each: the caller vouches for that); they are copied into the line as they are."""
        if self.sink is not None or self.listeners:
            merged = {**fields, **raw}
            if self.sink is not None:
                self.sink(event, merged)
            for listener in tuple(self.listeners):  # (a session's log learns its own calls from call_start)
                listener(event, merged)
        if self._fd is None:
            return
        line = self._line({"ts": round(time.time(), 6), "event": event, **fields})
        spliced = [line[:-1]]
        for key, value in raw.items():
            prefix = self._raw_keys.get(key)
            if prefix is None:  # the portal's few key names: each encoded once
                prefix = self._raw_keys[key] = f",{self._encoder.encode(key)}:"
            spliced += (prefix, value)
        spliced.append("}\n")
        self._add(event, "".join(spliced))

    def _add(self, event: str, line: str, *, buffered: bool = False) -> None:
        first = not self._buffer  # (then it is the oldest record, just now: not old enough to flush)
        if first:
            self._oldest = time.monotonic()
        self._buffer.append(line)
        self._size += len(line)
        if (
            not (buffered or event in _BUFFERED)
            or self._size >= FLUSH_BYTES
            or (not first and time.monotonic() - self._oldest >= FLUSH_INTERVAL_S)
        ):
            self.flush()

    def _line(self, record: dict[str, Any]) -> str:
        """One strict-JSON line for ``record`` of at most about :data:`MAX_RECORD_CHARS` characters."""
        try:
            line = self._encoder.encode(record)
            if not line.isascii():  # O(1) for str; only text beyond ASCII can hold a lone surrogate
                line.encode("utf-8")
        except (ValueError, TypeError, RecursionError):  # NaN, lone surrogates, nesting, a failing repr...
            line = self._encoder.encode(strict_json(record))
        if len(line) > MAX_RECORD_CHARS:
            line = self._encoder.encode({**strict_json(record, string_limit=_SHORT_STRING), "trace_truncated": True})
            if len(line) > MAX_RECORD_CHARS:
                line = self._encoder.encode(
                    {
                        "ts": record["ts"],
                        "trace_truncated": True,
                        "event": strict_json(record["event"], string_limit=200),
                    }
                )
        return line

    def flush(self) -> None:
        """Write every buffered record now (one ``write`` when it fits)."""
        if self._fd is None or not self._buffer:
            return
        data = "".join(self._buffer).encode("utf-8", "replace")
        self._buffer.clear()
        self._size = 0
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
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
