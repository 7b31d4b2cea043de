"""The base of the policy's models: strict, frozen, refusing unknown keys (and naming the known ones); and the one
way an override of a section is typed (:func:`overrides`) and applied (:meth:`Override.applied_to`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from ._errors import check_known_keys

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["Override", "StrictModel", "overrides"]

_Base = TypeVar("_Base", bound="StrictModel")
_Over = TypeVar("_Over", bound="Override")


class StrictModel(BaseModel):
    """Strict, frozen, refuses unknown keys and names the known ones."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        return check_known_keys(cls, data)


class Override(StrictModel):
    """An override of a section (a toolbox's ``limits``, a tenant's ``budget``): the keys of its base with the
    base's checks, none required (:func:`overrides` makes its fields). Only the keys written replace the base's;
    ``null`` is written, and means what it means in the base (no limit, where the base allows it)."""

    def applied_to(self, base: _Base) -> _Base:
        """``base`` with the keys this override wrote replaced."""
        return base.model_copy(update={key: getattr(self, key) for key in self.model_fields_set})


def overrides(base: type[StrictModel]) -> Callable[[type[_Over]], type[_Over]]:
    """A class decorator: the decorated :class:`Override` subclass gets every field of ``base``, with the same type,
    checks and description, and no default (``None`` stands for "not written": it is never validated).

    The checker sees the class as written (no fields: it is read through :meth:`Override.applied_to`); pydantic
    validates the one it returns, a subclass of it of the same name.
    """

    def decorate(cls: type[_Over]) -> type[_Over]:
        fields: dict[str, Any] = {}
        for name, info in base.model_fields.items():
            typed = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
            fields[name] = (typed, Field(default=None, alias=info.alias, description=info.description))
        return create_model(cls.__name__, __base__=cls, __module__=cls.__module__, __doc__=cls.__doc__, **fields)

    return decorate
