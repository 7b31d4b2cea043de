"""From a finished run (:class:`ProcessOutcome`) to a :class:`ToolResult` (pure code; media files are written through
a callback).

- could not start, timed out, cancelled: ``error`` with the reason (and what the script printed before the end);
- non-zero exit or death by a signal: ``failed`` with the exit code (metadata ``exit_code``), stderr and stdout;
- exit 0: ``passed`` with stdout as text (decoded as UTF-8; invalid bytes are replaced and a note says so), or the
  ``empty-result`` text when stdout is exactly empty; with ``output-media-type``, stdout is that media: an image
  (png, jpeg, gif, webp) becomes an attachment, anything else a file named by ``data_path``.

Output past the cap is cut and the result has ``truncated`` set, with a note giving the full size. """

from __future__ import annotations

import base64
import binascii
import signal
from collections.abc import Callable

from .._result import Attachment, ToolResult
from ._process import ProcessOutcome
from ._spec import ScriptSpec

__all__ = ["IMAGE_TYPES", "decode_text", "outcome_to_result", "sniff_image"]

#: Image types that travel as attachments (seed 000), with their leading bytes.
IMAGE_TYPES: dict[str, tuple[bytes, ...]] = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),
}

#: ``save(data, media_type) -> path relative to the work folder``.
SaveMedia = Callable[[bytes, str], str]


def sniff_image(data: bytes, media_type: str) -> bool:
    """Whether ``data`` starts like an image of ``media_type``."""
    if media_type == "image/webp":
        return data[:4] == b"RIFF" and data[8:12] == b"WEBP"
    return any(data.startswith(magic) for magic in IMAGE_TYPES.get(media_type, ()))


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


def _decode_media(data: bytes, media_type: str) -> bytes | None:
    """The image bytes in ``data``: raw, or base64 text of them (the anchor's form). ``None`` when neither fits."""
    if sniff_image(data, media_type):
        return data
    try:
        decoded = base64.b64decode(b"".join(data.split()), validate=True)
    except (binascii.Error, ValueError):
        return None
    return decoded if sniff_image(decoded, media_type) else None


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
            name = (
                signal.Signals(outcome.signal).name
                if outcome.signal in signal.Signals
                else str(outcome.signal)
            )
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
        return ToolResult.failed(
            f"{tool} declares {media_type} output but printed nothing", summary="empty media"
        )
    if media_type in IMAGE_TYPES:
        image = _decode_media(outcome.stdout, media_type)
        if image is None:
            return ToolResult.failed(
                f"{tool} declares {media_type} output but what it printed is not a {media_type} image",
                summary="invalid image",
            )
        path = save(image, media_type)
        return ToolResult.passed(
            f"{media_type} image, {len(image)} bytes, attached ({path})",
            attachments=[Attachment(media_type, path)],
        )
    path = save(outcome.stdout, media_type)
    return ToolResult.passed(
        f"{media_type} output, {len(outcome.stdout)} bytes, saved as {path} in the work folder",
        data_path=path,
        metadata=[("media_type", media_type)],
    )
