"""The agent file's file sandboxes: a ``FileSandbox`` written in place (the seed's ``FileSandboxConfig``:
predicate, size limit, name) or ``{"ref": NAME}``, one of the agent's ``fileSandboxes`` (followed in
:mod:`supervisor.config._agent_toolboxes`)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Discriminator, Field, Tag

from sandbox import DEFAULT_MAX_FILE_SIZE, AlwaysDeny, predicate_to_json

from ._model import StrictModel
from ._types import Predicate

__all__ = ["DEFAULT_MAX_FILE_SIZE_BYTES", "FileSandbox", "FileSandboxConfig", "FileSandboxRef"]

#: ``fsbMaxFileSize`` when the key is absent (``null`` means no limit): the seed's, defined once in
#: ``sandbox/_file_sandbox.py``.
DEFAULT_MAX_FILE_SIZE_BYTES = DEFAULT_MAX_FILE_SIZE


class FileSandboxConfig(StrictModel):
    """The seed's ``FileSandboxConfig``: predicate, size limit (default 50 MiB, ``null`` = none), name."""

    predicate: Predicate = Field(default=AlwaysDeny(), alias="fsbPredicate")
    max_file_size: int | None = Field(default=DEFAULT_MAX_FILE_SIZE_BYTES, ge=0, alias="fsbMaxFileSize")
    name: str | None = Field(default=None, alias="fsbName")

    def to_json(self) -> dict[str, Any]:
        """The seed's JSON form, paths resolved."""
        return {
            "fsbPredicate": predicate_to_json(self.predicate),
            "fsbMaxFileSize": self.max_file_size,
            "fsbName": self.name,
        }


class FileSandboxRef(StrictModel):
    """``{"ref": NAME}``: the agent's ``fileSandboxes[NAME]``."""

    ref: str


def _sandbox_kind(value: Any) -> str:
    return "FileSandboxRef" if isinstance(value, dict) and "ref" in value else "FileSandboxInline"


FileSandbox = Annotated[
    Annotated[FileSandboxConfig, Tag("FileSandboxInline")] | Annotated[FileSandboxRef, Tag("FileSandboxRef")],
    Discriminator(_sandbox_kind),
]
