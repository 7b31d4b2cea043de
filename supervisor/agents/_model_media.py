"""Images of tool results for a model, in the OpenAI chat format: ``image_url`` content parts with data URLs.

An agent loop (``supervisor/agents/_loop.py``) gives the model each tool result as a ``tool`` message (text: the chat
format has no images in tool messages), and then, after the tool messages of that step, one ``user`` message with
the images the step's results carried: a text part naming the call and the file, then an ``image_url`` part
``data:<type>;base64,...``. Only the types models take are sent (png, jpeg, gif, webp), each within
``context.images.max_bytes``; an SVG or another kind of attachment is named in the text instead (the model can ask
for it another way). Pure but for ``read``, which returns an attachment's stored bytes.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

from toolboxes import IMAGE_TYPES

if TYPE_CHECKING:
    from collections.abc import Callable

    from toolboxes import Attachment

__all__ = ["MODEL_IMAGE_TYPES", "attachment_label", "image_parts"]

#: The image types OpenAI-compatible chat endpoints take as ``image_url`` data URLs: seed 000's image types.
MODEL_IMAGE_TYPES = IMAGE_TYPES


def attachment_label(a: Attachment) -> str:
    """How a model is told about an attachment: its name (else its path), type and size."""
    size = f", {a.size} bytes" if a.size is not None else ""
    return f"{a.name or a.path.rsplit('/', 1)[-1]} ({a.media_type}{size})"


def image_parts(
    call: str, attachments: list[Attachment], read: Callable[[Attachment], bytes], max_bytes: int
) -> tuple[list[dict[str, Any]], list[str]]:
    """The content parts that show ``call``'s images to a model, and notes for the attachments not shown."""
    parts: list[dict[str, Any]] = []
    notes: list[str] = []
    for a in attachments:
        label = attachment_label(a)
        if a.media_type not in MODEL_IMAGE_TYPES:
            notes.append(f"{label} is not shown to you: models take images as png, jpeg, gif or webp")
            continue
        try:
            data = read(a)
        except (OSError, KeyError):
            notes.append(f"{label} is no longer available")
            continue
        if len(data) > max_bytes:
            notes.append(f"{label} is not shown to you: it is larger than context.images.max_bytes ({max_bytes})")
            continue
        parts.append({"type": "text", "text": f"Image from the call {call}: {label}"})
        parts.append(
            {
                "type": "image_url",
                "image_url": {"url": f"data:{a.media_type};base64,{base64.b64encode(data).decode('ascii')}"},
            }
        )
    return parts, notes
