"""What a worker that calls a tool through the portal gets of its attachments: the seed's ``UserToolResponse`` with
the bytes (``supervisor.calls.media_response``), pure (the store read by a function)."""

from __future__ import annotations

import base64

from supervisor.calls import media_response
from supervisor.calls._attachments import MAX_WORKER_MEDIA_BYTES
from toolboxes import Attachment, ToolResult

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 8
stored = {"png": PNG, "csv": b"a,b\n"}


def _read(a: Attachment) -> bytes:
    return stored[a.sha256 or ""]


def test_one_attachment_and_no_text_is_the_seeds_media_attachment() -> None:
    result = ToolResult.passed(
        None, summary="attached chart.png", attachments=[Attachment("image/png", "x", "png", len(PNG), "chart.png")]
    )
    out = media_response(result, _read)
    assert out.structured == {
        "mediaMimeType": "image/png",
        "mediaBase64Data": base64.b64encode(PNG).decode(),
        "mediaFilename": "chart.png",
    }
    assert out.summary == "attached chart.png" and out.attachments == result.attachments


def test_text_and_attachments_are_a_mixed_response() -> None:
    attachments = [
        Attachment("image/png", "tool-output/a.png", "png", len(PNG)),
        Attachment("text/csv", "b.csv", "csv", 4, "b.csv"),
    ]
    out = media_response(ToolResult.passed("here they are", attachments=attachments), _read)
    assert [list(p) for p in out.structured] == [
        ["text"],
        ["mediaMimeType", "mediaBase64Data", "mediaFilename"],
        ["mediaMimeType", "mediaBase64Data", "mediaFilename"],
    ]
    assert out.structured[1]["mediaFilename"] == "a.png" and out.structured[2]["mediaBase64Data"] == "YSxiCg=="


def test_unstored_structured_or_too_large_results() -> None:
    plain = ToolResult.passed("no media")
    assert media_response(plain, _read) is plain
    refused = ToolResult.passed("x", attachments=[Attachment("image/png", "x")])  # never stored: no sha256
    assert media_response(refused, _read) is refused
    shaped = ToolResult.json({"a": 1}, attachments=[Attachment("image/png", "x", "png", 1)])
    assert media_response(shaped, _read) is shaped
    big = Attachment("image/png", "x", "png", MAX_WORKER_MEDIA_BYTES + 1, "big.png")
    [part] = [media_response(ToolResult.passed(None, attachments=[big]), _read).structured]
    assert "mediaBase64Data" not in part and "past what one reply to a worker carries" in part["note"]
