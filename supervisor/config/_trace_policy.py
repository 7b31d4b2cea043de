"""The policy's ``trace``: the JSONL file and its rotation, and the OpenTelemetry export of it
(``trace.otel``, ``supervisor/traces/_otel.py``, docs/TRACES.md)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field

from ._errors import problem
from ._model import StrictModel
from ._policy_fields import PolicyPath, Size

__all__ = ["OtelExport", "Trace"]


_HEADER_NAME_RE = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}$")


def _otel_endpoint(value: str) -> str:
    match = re.match(r"^https?://[^/\s?#]+(/[^\s?#]*)?$", value)
    if not match:
        raise problem(f"invalid OTLP endpoint {value!r}", "an http:// or https:// URL such as http://127.0.0.1:4318")
    return value.rstrip("/")


def _otel_headers(values: dict[str, str]) -> dict[str, str]:
    for name, value in values.items():
        if not _HEADER_NAME_RE.match(name):
            raise problem(f"invalid HTTP header name {name!r}", "letters, digits and -")
        if any(c in value for c in "\r\n\x00"):
            raise problem(f"the value of header {name} contains a line break or NUL")
    return values


class OtelExport(StrictModel):
    """OpenTelemetry export of the trace (``supervisor/traces/_otel.py``, docs/TRACES.md); off unless ``enabled``."""

    enabled: bool = Field(default=False, description="export one span per tool call over OTLP/HTTP")
    endpoint: Annotated[str, AfterValidator(_otel_endpoint)] = Field(
        default="http://127.0.0.1:4318", description="OTLP/HTTP base URL (/v1/traces is added) or the full URL"
    )
    service_name: str = Field(default="agents-supervise", min_length=1, max_length=256)
    headers: Annotated[dict[str, str], AfterValidator(_otel_headers)] = Field(
        default={}, description="HTTP headers of every export request (never traced)"
    )
    timeout_s: float = Field(default=5.0, gt=0, le=60, description="one export request; also the flush at stop")
    include_arguments: bool = Field(default=False, description="export call arguments (may hold secrets)")


class Trace(StrictModel):
    path: PolicyPath | None = Field(default=None, description="JSONL file; default <state_dir>/trace.jsonl")
    max_bytes: Size | None = Field(
        default=256 * 1024**2,
        ge=4096,
        description="rotate the file to <path>.1 past this size (disk use stays under about twice it); null = never",
    )
    otel: Annotated[OtelExport, BeforeValidator(lambda v: {"enabled": v} if isinstance(v, bool) else v)] = Field(
        default=OtelExport(), description="OpenTelemetry export: false, true (the defaults) or a section"
    )
