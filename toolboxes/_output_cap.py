"""One call's output bounded by ``limits.output_bytes``, whatever kind of toolbox made it (pure).

Applied twice with the same limit: by the worker to every result before it goes on the pipe (``toolboxes._worker``,
every kind, so a result never breaks the pipe's frame limit), and by the supervisor to every result it receives
(``supervisor.calls._tool_output``: the worker is untrusted, and a sub-agent's answer is made in the supervisor).

Each part is held to ``max_bytes`` (UTF-8 bytes) on its own. A part is left as it is up to :data:`ENVELOPE_BYTES`
past the limit: the kinds cut their own content first (rows, a response body, a process's output) and wrap it in a
little more (column names, counts, the JSON text of the rows beside the rows), and that envelope must not turn a
result a kind bounded well into one cut again, nor drop its structured value. A part larger than that is cut to
``max_bytes`` itself:

- ``data`` (the text the model sees) is cut at a character boundary and ends with a note saying so, the note
  counted in the limit: ``[output cut at N bytes by limits.output_bytes: data was M bytes]``;
- ``summary`` is cut at a character boundary;
- ``structured`` (its compact JSON text) is dropped when larger: JSON cut short is not JSON, and a client that
  checks it against the tool's output schema would refuse it anyway; the note says so.

A result that was cut is marked ``truncated`` and carries a metadata pair ``output_truncated`` naming what was cut
and the limit. Attachments are not counted here: each is bounded by its media class's limit and all of a result's
together by ``context.max_total_bytes`` (``supervisor.calls._attachments``).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._result import ToolResult

__all__ = ["ENVELOPE_BYTES", "JSON_PER_MSGPACK_BYTE", "OUTPUT_LIMIT_KEY", "TRUNCATED_KEY", "cap_output", "json_bytes"]

#: The policy key that sets the limit (named in the notes).
OUTPUT_LIMIT_KEY = "limits.output_bytes"
#: The metadata key of the pair that says what was cut.
TRUNCATED_KEY = "output_truncated"
#: How far past the limit a part may be before it is cut (the envelope a kind adds around content it cut itself).
ENVELOPE_BYTES = 16 * 1024
#: A value decoded from ``n`` bytes of msgpack is less than this many times ``n`` bytes as compact JSON (UTF-8): a
#: string's byte becomes at most six (``\u001f``), a one-byte ``false`` or ``null`` five with its comma, a
#: container's header byte its two brackets, a nine-byte float at most 24 characters; text is UTF-8 in both. So a
#: result read from a frame of ``n`` bytes has no part larger than ``6n`` (``ToolResult.parts_within``;
#: ``tests/toolboxes/test_output_cap.py`` checks the bound on random values).
JSON_PER_MSGPACK_BYTE = 6


def _size(text: str, limit: int) -> int:
    """The UTF-8 size of ``text``, or a cheap bound when it is clearly within ``limit`` (at most 4 bytes a char)."""
    return len(text) if len(text) * 4 <= limit else len(text.encode("utf-8", "surrogatepass"))


def _cut(text: str, max_bytes: int) -> str:
    """``text`` cut to at most ``max_bytes`` UTF-8 bytes, at a character boundary."""
    return text.encode("utf-8", "surrogatepass")[: max(0, max_bytes)].decode("utf-8", "ignore")


#: one encoder for every size asked (``json.dumps`` with options builds a new encoder per call)
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def json_bytes(value: Any) -> int:
    """The size of ``value`` as compact JSON text (what a frontend sends as structured content)."""
    text = _ENCODER.encode(value)
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def cap_output(result: ToolResult, max_bytes: int | None) -> ToolResult:
    """``result`` itself when every part fits in ``max_bytes`` (or ``max_bytes`` is ``None``), else a copy cut as
    the module docstring says."""
    if max_bytes is None:
        return result
    cuts: list[str] = []
    allowed = max_bytes + ENVELOPE_BYTES
    within = result.parts_within
    if (
        within is not None
        and within[3] <= allowed
        and within[0] is result.data
        and within[1] is result.summary
        and within[2] is result.structured
    ):
        return result  # every part is known to fit, without measuring it (ToolResult.parts_within)
    data_size = _size(result.data, allowed) if result.data is not None else 0
    summary_size = _size(result.summary, allowed) if result.summary is not None else 0
    structured_size = json_bytes(result.structured) if result.structured is not None else 0
    if data_size > allowed:
        cuts.append(f"data was {data_size} bytes")
    if summary_size > allowed:
        cuts.append(f"summary was {summary_size} bytes")
    if structured_size > allowed:
        cuts.append(f"the structured value was {structured_size} bytes of JSON and was dropped")
    if not cuts:
        return result
    what = "; ".join(cuts)
    note = f"[output cut at {max_bytes} bytes by {OUTPUT_LIMIT_KEY}: {what}]"
    data, summary = result.data, result.summary
    if data_size > allowed or structured_size > allowed:
        body = data or ""
        room = max_bytes - len(note.encode()) - (1 if body else 0)
        if room < 0:  # a limit smaller than the note: the text alone, cut (the metadata still says why)
            data = _cut(body, max_bytes)
        else:
            body = _cut(body, room)
            data = f"{body}\n{note}" if body else note
    if summary is not None and summary_size > allowed:
        summary = _cut(summary, max_bytes)
    return replace(
        result,
        data=data,
        summary=summary,
        structured=None if structured_size > allowed else result.structured,
        truncated=True,
        metadata=[*result.metadata, (TRUNCATED_KEY, f"{what} (limit {max_bytes} bytes, {OUTPUT_LIMIT_KEY})")],
    )
