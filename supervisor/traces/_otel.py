"""Optional OpenTelemetry export of the trace (policy ``trace.otel``, off by default; docs/TRACES.md).

:class:`OtelExport` is a sink of the :class:`~supervisor.traces._recorder.TraceRecorder`: it sees every record the
supervisor writes and turns them into spans sent over OTLP/HTTP (protobuf) by the official SDK's ``BatchSpanProcessor``:

- one span per tool call, from ``call_start`` to ``call_end``, named after the tool, with the attributes
  ``call_id``, ``toolbox``, ``agent``, ``session``, ``depth``, ``caller``, then ``status``, ``summary`` and
  ``duration_s``; its parent is the span of ``parent_call_id`` while that call is in flight, so a frontend call and
  every call made inside it (Lua ``tools.call``, sub-agents) form one trace. Status ``passed`` is span status OK,
  ``failed`` and ``error`` are ERROR with the summary. Arguments are exported (``args``, as traced) only with
  ``include_arguments: true``;
- a ``portal_refusal`` is an event on the span of the call that made the refused call, else a span of its own;
- an ``egress`` decision is an event on the span of its toolbox's call when exactly one is in flight, else a span
  of its own; worker lifecycle records (``worker_exit``, ``worker_restart``, ``crash_loop``, ...) are spans of
  their own and events on the spans of that toolbox's calls in flight.

``opentelemetry`` is imported only here, and only when export is enabled. Spans are handed to the processor's
thread; the call path never waits for the collector. Export failures are counted (and the exporter's log lines
kept, at most one a minute let through); :meth:`OtelExport.poll` (run by the supervisor's flush loop, on the trio
thread) writes an ``otel_export_failed`` trace record at most once a minute.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from supervisor._errors import PolicyRefused

if TYPE_CHECKING:
    from collections.abc import Callable

    from supervisor.config import OtelExport as OtelPolicy

    from ._recorder import TraceRecorder

__all__ = ["REPORT_INTERVAL_S", "OtelExport", "open_otel"]

_log = logging.getLogger("supervisor.otel")
#: at most one ``otel_export_failed`` record (and one exporter log line) per this many seconds
REPORT_INTERVAL_S = 60.0
_MAX_STRING = 4096
_CALL_KEYS = ("call_id", "parent_call_id", "toolbox", "agent", "session", "conversation", "turn", "depth", "caller")
_WORKER_EVENTS = frozenset(
    {"worker_spawn", "worker_exit", "worker_restart", "worker_start_failed", "crash_loop", "protocol_violation"}
)
_EXPORTER_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.common.http",
    "opentelemetry.sdk._shared_internal",
)


def _value(value: Any) -> Any:
    """An attribute value OpenTelemetry accepts (``None``: leave the attribute out)."""
    if value is None or isinstance(value, bool | int | float):
        return value
    if not isinstance(value, str):
        try:
            value = json.dumps(value, ensure_ascii=False, default=repr)
        except (TypeError, ValueError, RecursionError):
            value = f"<{type(value).__name__}>"
    return value[:_MAX_STRING]


def _attributes(fields: dict[str, Any], keys: tuple[str, ...] | None = None) -> dict[str, Any]:
    items = ((k, fields.get(k)) for k in keys) if keys is not None else fields.items()
    out = {}
    for key, raw in items:
        value = _value(raw)
        if value is not None:
            out[str(key)[:64]] = value
    return out


def _traces_url(endpoint: str) -> str:
    return endpoint if endpoint.endswith("/v1/traces") else endpoint + "/v1/traces"


class _Failures(logging.Filter):
    """Counts failed exports (from the processor's thread) and thins out the exporter's log lines."""

    def __init__(self, clock: Callable[[], float]) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._clock = clock
        self._logged_at: float | None = None
        self.failures = 0
        self.spans_lost = 0
        self.last_error = ""

    def failed(self, spans: int, error: str = "") -> None:
        with self._lock:
            self.failures += 1
            self.spans_lost += spans
            if error:
                self.last_error = error[:500]

    def take(self) -> tuple[int, int, str]:
        with self._lock:
            out = (self.failures, self.spans_lost, self.last_error)
            self.failures = self.spans_lost = 0
            return out

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        with self._lock:
            self.last_error = record.getMessage()[:500]
            now = self._clock()
            if self._logged_at is not None and now - self._logged_at < REPORT_INTERVAL_S:
                return False
            self._logged_at = now
            return True


class OtelExport:
    """Turns trace records into spans (see the module docstring). Use from the trio thread only."""

    def __init__(
        self,
        policy: OtelPolicy,
        trace: TraceRecorder,
        *,
        clock: Callable[[], float] = time.monotonic,
        schedule_delay_s: float = 1.0,
    ) -> None:
        import requests
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
        from opentelemetry.trace import Status, StatusCode, set_span_in_context

        self._status, self._codes, self._in_context = Status, StatusCode, set_span_in_context
        self.policy = policy
        self.trace = trace
        self.endpoint = _traces_url(policy.endpoint)
        self._clock = clock
        self._reported_at: float | None = None
        self._failures = _Failures(clock)
        self._total_failures = 0
        self._spans: dict[str, Any] = {}
        self._by_toolbox: dict[str, set[str]] = {}
        failures = self._failures

        session = requests.Session()
        session.trust_env = False  # no proxy from the environment: the collector is named by the policy only
        inner = OTLPSpanExporter(
            endpoint=self.endpoint, headers=dict(policy.headers), timeout=policy.timeout_s, session=session
        )

        class _Counting(SpanExporter):
            def export(self, spans: Any) -> Any:
                try:
                    result = inner.export(spans)
                except Exception as exc:  # a broken exporter must not kill the processor's thread
                    failures.failed(len(spans), f"{type(exc).__name__}: {exc}")
                    return SpanExportResult.FAILURE
                if result is not SpanExportResult.SUCCESS:
                    failures.failed(len(spans))
                return result

            def shutdown(self) -> None:
                inner.shutdown()  # type: ignore[no-untyped-call]  # untyped in the SDK

            def force_flush(self, timeout_millis: int = 30000) -> bool:
                return True

        for name in _EXPORTER_LOGGERS:
            logging.getLogger(name).addFilter(failures)
        self._processor = BatchSpanProcessor(
            _Counting(), schedule_delay_millis=schedule_delay_s * 1000, export_timeout_millis=policy.timeout_s * 1000
        )
        self._provider = TracerProvider(
            resource=Resource.create({"service.name": policy.service_name}), shutdown_on_exit=False
        )
        self._provider.add_span_processor(self._processor)
        self._tracer = self._provider.get_tracer("agents-supervise")
        self._closed = False

    # -- records -> spans (the trio thread) ----------------------------------------------------------------------
    def observe(self, event: str, fields: dict[str, Any]) -> None:
        """The trace recorder's sink: never raises (a broken export must not break a call)."""
        if self._closed:
            return
        try:
            self._observe(event, fields)
        except Exception:
            _log.exception("OpenTelemetry export of a %s record failed", event)

    def _observe(self, event: str, fields: dict[str, Any]) -> None:
        if event == "call_start":
            self._start_call(fields)
        elif event == "call_end":
            self._end_call(fields)
        elif event == "portal_refusal":
            attrs = _attributes(fields)
            parent = self._spans.get(fields.get("parent_call_id") or "")
            if parent is not None:
                parent.add_event("portal_refusal", attrs)
            else:
                self._standalone("portal_refusal", attrs, error=str(fields.get("kind") or "refused"))
        elif event == "egress":
            attrs = _attributes(fields)
            in_flight = self._by_toolbox.get(str(fields.get("toolbox")), set())
            if len(in_flight) == 1:
                self._spans[next(iter(in_flight))].add_event("egress", attrs)
            else:
                self._standalone("egress", attrs)
        elif event in _WORKER_EVENTS:
            attrs = _attributes(fields)
            for call_id in self._by_toolbox.get(str(fields.get("toolbox")), ()):
                self._spans[call_id].add_event(event, attrs)
            self._standalone(
                event,
                attrs,
                error=str(fields.get("reason") or event)
                if event in ("crash_loop", "worker_start_failed", "protocol_violation")
                else None,
            )

    def _start_call(self, fields: dict[str, Any]) -> None:
        from opentelemetry.context import Context

        call_id = str(fields.get("call_id"))
        parent = self._spans.get(fields.get("parent_call_id") or "")
        context = self._in_context(parent) if parent is not None else Context()
        attrs = _attributes(fields, _CALL_KEYS)
        if self.policy.include_arguments and "args" in fields:
            attrs["args"] = _value(
                fields["args"]
                if isinstance(fields["args"], str)
                else json.dumps(fields["args"], ensure_ascii=False, default=repr)
            )
        span = self._tracer.start_span(str(fields.get("tool")), context=context, attributes=attrs)
        self._spans[call_id] = span
        self._by_toolbox.setdefault(str(fields.get("toolbox")), set()).add(call_id)

    def _end_call(self, fields: dict[str, Any]) -> None:
        call_id = str(fields.get("call_id"))
        span = self._spans.pop(call_id, None)
        if span is None:
            return
        calls = self._by_toolbox.get(str(fields.get("toolbox")))
        if calls is not None:
            calls.discard(call_id)
        span.set_attributes(_attributes(fields, ("status", "summary", "duration_s")))
        status = fields.get("status")
        if status == "passed":
            span.set_status(self._status(self._codes.OK))
        else:
            span.set_status(self._status(self._codes.ERROR, str(fields.get("summary") or status)[:_MAX_STRING]))
        span.end()

    def _standalone(self, name: str, attrs: dict[str, Any], *, error: str | None = None) -> None:
        from opentelemetry.context import Context

        span = self._tracer.start_span(name, context=Context(), attributes=attrs)
        if error is not None:
            span.set_status(self._status(self._codes.ERROR, error[:_MAX_STRING]))
        span.end()

    # -- failures, stop --------------------------------------------------------------------------------------------
    def poll(self) -> None:
        """Write an ``otel_export_failed`` record when exports failed, at most once per ``REPORT_INTERVAL_S``."""
        now = self._clock()
        if self._reported_at is not None and now - self._reported_at < REPORT_INTERVAL_S:
            return
        failures, lost, error = self._failures.take()
        if not failures:
            return
        self._reported_at = now
        self._total_failures += failures
        _log.warning(
            "OpenTelemetry export to %s failed %d time(s) (%d spans lost): %s",
            self.endpoint,
            failures,
            lost,
            error or "no reason given",
        )
        self.trace.record(
            "otel_export_failed",
            endpoint=self.endpoint,
            failures=failures,
            spans_lost=lost,
            total_failures=self._total_failures,
            error=error,
        )

    @property
    def failures_pending(self) -> bool:
        return bool(self._failures.failures)

    def close(self) -> None:
        """End the spans of calls still in flight, send what is queued (``timeout_s`` per batch of 512), stop.

        Blocking: the supervisor runs it on a thread.
        """
        if self._closed:
            return
        self._closed = True
        for span in self._spans.values():
            span.set_status(self._status(self._codes.ERROR, "supervisor stopped"))
            span.end()
        self._spans.clear()
        self._by_toolbox.clear()
        try:
            self._processor.shutdown()  # type: ignore[no-untyped-call]  # one export a queued batch, bounded
        except Exception:
            _log.exception("stopping the OpenTelemetry export failed")
        finally:
            for name in _EXPORTER_LOGGERS:
                logging.getLogger(name).removeFilter(self._failures)


def open_otel(policy: OtelPolicy, trace: TraceRecorder) -> OtelExport | None:
    """An exporter hooked into ``trace`` when ``policy.enabled``, else ``None`` (nothing imported).

    ``PolicyRefused`` when export is enabled and the SDK is not installed (nothing started yet)."""
    if not policy.enabled:
        return None
    try:
        import opentelemetry.exporter.otlp.proto.http.trace_exporter
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError as exc:
        raise PolicyRefused(
            f"trace.otel is enabled but the OpenTelemetry SDK cannot be imported ({exc}); install the "
            "'otel' extra (pip install 'agents-supervise[otel]'; scripts/setup does), or set "
            "trace.otel: false"
        ) from None
    export = OtelExport(policy, trace)
    trace.sink = export.observe
    return export
