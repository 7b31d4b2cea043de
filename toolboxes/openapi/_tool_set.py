"""The tools a spec described, by name, with the load errors of reading it: what the OpenAPI and PostgREST
toolboxes both hold once their worker has read the spec."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from .._hints import http_method_hints
from .._toolbox import ToolSpec
from ._refs import SpecError

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["SpecTool", "SpecToolSet"]


class SpecTool(Protocol):
    """What a tool built from a spec has: its name, description, argument schema and HTTP method."""

    @property
    def tool(self) -> str: ...
    @property
    def method(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def input_schema(self) -> dict[str, Any]: ...


T = TypeVar("T", bound=SpecTool)


class SpecToolSet(Generic[T]):
    """The tools of one spec by name, and the load errors (each naming the spec and the part that failed).

    :meth:`read` never raises for a spec that cannot be read: the set is then empty and its one load error says
    why, so the worker still starts (a restart tries again)."""

    def __init__(self, tools: dict[str, T], errors: list[dict[str, str]]) -> None:
        self.by_name = tools
        self.errors = errors

    @classmethod
    def read(cls, spec_url: str, build: Callable[[], tuple[list[T], list[dict[str, str]]]]) -> SpecToolSet[T]:
        """Run ``build`` (read the spec at ``spec_url`` and make its tools) and keep what it made."""
        try:
            tools, errors = build()
        except SpecError as exc:
            return cls({}, [{"source": spec_url, "message": str(exc)}])
        return cls(
            {t.tool: t for t in tools},
            [{"source": f"{spec_url}: {e['source']}", "message": e["message"]} for e in errors],
        )

    def specs(self) -> list[ToolSpec]:
        """The tools as the worker lists them, with the hints their HTTP method implies."""
        return [
            ToolSpec(t.tool, t.description, t.input_schema, hints=http_method_hints(t.method))
            for t in self.by_name.values()
        ]
