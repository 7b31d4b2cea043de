"""The policy's ``context``: how large the media a result carries may be, per class and all together."""

from __future__ import annotations

from pydantic import Field

from ._model import StrictModel
from ._policy_fields import Size

__all__ = ["Audio", "Context", "Files", "Images"]


class Images(StrictModel):
    max_bytes: Size = Field(default=5 * 1024**2, ge=1, description="largest image a result may carry")


class Audio(StrictModel):
    max_bytes: Size = Field(default=10 * 1024**2, ge=1, description="largest audio a result may carry")


class Files(StrictModel):
    max_bytes: Size = Field(
        default=10 * 1024**2, ge=1, description="largest other media (PDF, video, binary, text file) a result may carry"
    )


class Context(StrictModel):
    """Limits on the media a result carries, per class (``toolboxes/_media.class_of``); larger ones are refused
    with a note."""

    images: Images = Images()
    audio: Audio = Audio()
    files: Files = Files()
    max_total_bytes: Size = Field(
        default=32 * 1024**2,
        ge=1,
        description="all media of one result together; attachments past it are refused with a note (each is also "
        "held to its class's max_bytes)",
    )

    def media_limits(self) -> dict[str, int]:
        """Each class's limit, and ``total``: all of one result's media together."""
        return {
            "images": self.images.max_bytes,
            "audio": self.audio.max_bytes,
            "files": self.files.max_bytes,
            "total": self.max_total_bytes,
        }
