"""The policy's ``validation`` block: the seed's ``ValidationConfig`` (``allowExtraProperties``, ``strictMode``),
for every tool and per toolbox (``toolboxes.<name>.validation``). What the switches do to a call's arguments is
``supervisor.tools._relax``; both default to the strict check (extra properties and strings standing for numbers
or booleans are refused)."""

from __future__ import annotations

from pydantic import Field

from ._model import Override, StrictModel, overrides

__all__ = ["Validation", "ValidationOverride"]


class Validation(StrictModel):
    """How tool-call arguments are checked (the seed's ``ValidationConfig``)."""

    allow_extra_properties: bool = Field(
        default=False,
        description="the seed's allowExtraProperties: a property a tool's schema does not allow is left out of "
        "what the tool receives (with a validation_warning) instead of refusing the call",
    )
    strict_mode: bool = Field(
        default=True,
        description="the seed's strictMode: false reads a string that spells what the schema expects ('42' for a "
        "number, 'true' for a boolean) as that value (with a validation_warning); true refuses it",
    )


@overrides(Validation)
class ValidationOverride(Override):
    """A toolbox's own ``validation`` (only the keys written change the policy's)."""
