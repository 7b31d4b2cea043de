"""The base of the policy's models: strict, frozen, refusing unknown keys (and naming the known ones)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from ._errors import check_known_keys

__all__ = ["StrictModel"]


class StrictModel(BaseModel):
    """Strict, frozen, refuses unknown keys and names the known ones."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        return check_known_keys(cls, data)
