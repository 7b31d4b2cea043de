"""From a finished run (:class:`ProcessOutcome`) to a :class:`ToolResult` (pure code; media files are written through
a callback).

- could not start, timed out, cancelled: ``error`` with the reason (and what the script printed before the end);
- non-zero exit or death by a signal: ``failed`` with the exit code (metadata ``exit_code``), stderr and stdout;
- exit 0: ``passed`` with stdout as text (decoded as UTF-8; invalid bytes are replaced and a note says so), or the
  ``empty-result`` text when stdout is exactly empty; with ``output-media-type``, stdout is that media, delivered as
  what it is: ``application/json`` (and ``+json``) is the result's data and structured value, ``text/*`` (and XML)
  its data; any other type (images, SVG, audio, video, PDF, binary) becomes an attachment of that type, which the
  supervisor checks and delivers (image, audio or embedded resource; what fails the check is refused with a note,
  the status stays). Binary media may be printed raw or as base64.

Output past the cap is cut and the result has ``truncated`` set, with a note giving the full size."""

from __future__ import annotations

import base64
import binascii
import json
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING

from .._media import canonical, is_textual, mismatch
from .._result import Attachment, ToolResult

if TYPE_CHECKING:
    from .._bounded_run import ProcessOutcome
    from ._spec import ScriptSpec

__all__ = ["decode_text", "outcome_to_result"]

#: ``save(data, media_type) -> path relative to the work folder``.
SaveMedia = Callable[[bytes, str], str]


def decode_text(data: bytes) -> tuple[str, int]:
    """Decode UTF-8, replacing invalid bytes; returns the text and how many replacement characters were added."""
    try:
        return data.decode("utf-8"), 0
    except UnicodeDecodeError:
        text = data.decode("utf-8", errors="replace")
        return text, text.count("\ufffd") - data.decode("utf-8", errors="ignore").count("\ufffd")


def _text_with_notes(data: bytes, total: int, what: str) -> tuple[str, list[str]]:
    text, bad = decode_text(data)
    notes = []
    if bad:
        notes.append(f"{what} was not valid UTF-8: {bad} invalid byte sequence(s) were replaced with U+FFFD")
    if total > len(data):
        notes.append(f"{what} was truncated to the first {len(data)} of {total} bytes")
    return text, notes


def _printed(outcome: ProcessOutcome) -> tuple[str, list[str]]:
    out, out_notes = _text_with_notes(outcome.stdout, outcome.stdout_total, "stdout")
    err, err_notes = _text_with_notes(outcome.stderr, outcome.stderr_total, "stderr")
    parts = [f"stderr:\n{err}" if err else "stderr: (empty)", f"stdout:\n{out}" if out else "stdout: (empty)"]
    return "\n\n".join(parts), out_notes + err_notes


def _with_notes(text: str, notes: list[str]) -> str:
    return text + "".join(f"\n[note: {n}]" for n in notes)


def _decode_media(data: bytes, media_type: str) -> bytes:
    """The media bytes in ``data``: raw, or base64 text of them (the anchor's form) when only that decodes to
    ``media_type``; else ``data`` as printed (the supervisor's check then refuses it with a note)."""
    if mismatch(media_type, data) is None:
        return data
    try:
        decoded = base64.b64decode(b"".join(data.split()), validate=True)
    except (binascii.Error, ValueError):
        return data
    return decoded if decoded and mismatch(media_type, decoded) is None else data


def outcome_to_result(
    tool: str, spec: ScriptSpec, outcome: ProcessOutcome, limit_s: float, save: SaveMedia
) -> ToolResult:
    """Map a run to its result. ``limit_s`` is the wall-time limit the run had (for the timeout message)."""
    truncated = outcome.stdout_truncated or outcome.stderr_truncated
    if outcome.spawn_error is not None:
        return ToolResult.error(f"{tool}: the script could not be started: {outcome.spawn_error}")
    if outcome.timed_out or outcome.cancelled:
        why = (
            f"{tool} did not finish within its time limit of {limit_s:g} s"
            if outcome.timed_out
            else f"{tool} was cancelled"
        )
        printed, notes = _printed(outcome)
        summary = f"{why}; the script and its child processes were killed"
        data = _with_notes(f"{summary}.\n\n{printed}", notes)
        return ToolResult("error", summary=summary, data=data, truncated=truncated)
    if outcome.exit_code != 0:
        if outcome.signal is not None:
            try:  # ``int in signal.Signals`` raises TypeError before Python 3.12
                name = signal.Signals(outcome.signal).name
            except ValueError:
                name = str(outcome.signal)
            summary = f"{tool} was killed by signal {name}"
            code = str(-outcome.signal)
        else:
            summary = f"{tool} exited with code {outcome.exit_code}"
            code = str(outcome.exit_code)
        printed, notes = _printed(outcome)
        return ToolResult.failed(
            _with_notes(f"{summary}\n\n{printed}", notes),
            summary=summary,
            truncated=truncated,
            metadata=[("exit_code", code)],
        )
    if spec.output_media_type is not None:
        return _media_result(tool, spec.output_media_type, outcome, save)
    if outcome.stdout_total == 0 and spec.empty_result is not None:
        return ToolResult.passed(spec.empty_result)
    text, notes = _text_with_notes(outcome.stdout, outcome.stdout_total, "the output")
    return ToolResult.passed(
        _with_notes(text, notes),
        summary="; ".join(notes) if notes else None,
        truncated=outcome.stdout_truncated,
    )


def _media_result(tool: str, media_type: str, outcome: ProcessOutcome, save: SaveMedia) -> ToolResult:
    if outcome.stdout_truncated:
        return ToolResult.error(
            f"{tool} printed {outcome.stdout_total} bytes of {media_type}, more than the output limit of "
            f"{len(outcome.stdout)} bytes; the output was dropped",
            truncated=True,
        )
    if outcome.stdout_total == 0:
        return ToolResult.failed(f"{tool} declares {media_type} output but printed nothing", summary="empty media")
    media_type = canonical(media_type)
    if is_textual(media_type) and media_type != "image/svg+xml":
        return _text_media_result(tool, media_type, outcome)
    media = _decode_media(outcome.stdout, media_type)
    path = save(media, media_type)
    return ToolResult.passed(  # no data: the attachment is the answer (the seed's MediaResponse)
        None,
        summary=f"{media_type}, {len(media)} bytes, attached",
        attachments=[Attachment(media_type, path, name=f"{tool}{_suffix(path)}")],
        metadata=[("media_type", media_type)],
    )


def _suffix(path: str) -> str:
    name = path.rsplit("/", 1)[-1]
    return name[name.rfind(".") :] if "." in name else ""


def _text_media_result(tool: str, media_type: str, outcome: ProcessOutcome) -> ToolResult:
    """JSON and text output: the result's data (JSON also its structured value)."""
    text, notes = _text_with_notes(outcome.stdout, outcome.stdout_total, "the output")
    meta = [("media_type", media_type)]
    if media_type == "application/json" or media_type.endswith("+json"):
        problem = mismatch(media_type, outcome.stdout)
        if problem is None:
            return ToolResult.json(json.loads(text), metadata=meta)
        notes.append(f"{tool} declares {media_type} output but {problem}; it is given as text")
    return ToolResult.passed(_with_notes(text, notes), summary="; ".join(notes) if notes else None, metadata=meta)
