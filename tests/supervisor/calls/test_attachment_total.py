"""``context.max_total_bytes``: all of one result's attachments together are bounded, after each class's own limit;
the ones past it are refused with a note naming the key, the others are stored."""

from __future__ import annotations

from typing import TYPE_CHECKING

from labkit import png_bytes
from supervisor.calls import AttachmentStore
from supervisor.config._media_limits import Context
from toolboxes import Attachment, ToolResult

if TYPE_CHECKING:
    from pathlib import Path


def test_attachments_past_the_total_are_refused_with_a_note(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    picture = png_bytes(padding=3000)
    for name in ("a.png", "b.png", "c.png"):
        (work / name).write_bytes(picture)
    limits = Context.model_validate({"images": {"max_bytes": 4096}, "max_total_bytes": 2 * len(picture) + 10})
    store = AttachmentStore(str(tmp_path / "state"), limits.media_limits())
    result = ToolResult.passed("three pictures", attachments=[Attachment("image/png", f"{n}.png") for n in "abc"])
    stored = store.store(str(work), result)
    assert [a.path for a in stored.attachments] == ["a.png", "b.png"]
    assert all(a.size == len(picture) for a in stored.attachments)
    (note,) = [v for k, v in stored.metadata if k == "attachment_refused"]
    assert note.startswith("[attachment 'c.png' refused: it is ") and "context.max_total_bytes" in note
    assert note in (stored.data or "") and stored.status == "passed"
