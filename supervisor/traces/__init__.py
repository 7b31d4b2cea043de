"""Traces: the JSONL recorder, the report over a trace file, the OpenTelemetry export."""

from ._otel import OtelExport, open_otel
from ._recorder import FLUSH_INTERVAL_S, TraceRecorder, strict_json
from ._report import load_trace, render_text, report

__all__ = [
    "FLUSH_INTERVAL_S",
    "OtelExport",
    "TraceRecorder",
    "load_trace",
    "open_otel",
    "render_text",
    "report",
    "strict_json",
]
