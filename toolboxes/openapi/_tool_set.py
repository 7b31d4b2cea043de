"""The tools a spec described, by name, with the load errors of reading it (:class:`SpecToolSet`), and the toolbox
around them (:class:`SpecToolbox`): what the OpenAPI and PostgREST toolboxes share. Each call of such a toolbox is
one HTTP request through the egress proxy; a kind says only how a call's request is made."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from .._entry import output_cap
from .._hints import http_method_hints
from .._http import send_request
from .._result import ToolResult
from .._toolbox import ToolSpec
from ._refs import SpecError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from .._http import HttpRequest
    from .._toolbox import CallContext, WorkerEnv

__all__ = ["SpecTool", "SpecToolSet", "SpecToolbox"]


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

    def narrowed(self, methods: Iterable[str] | None) -> SpecToolSet[T]:
        """The set with only the tools whose HTTP method is among ``methods`` (the policy's ceilings,
        ``config["policy"]["http_methods"]``); ``None``: unchanged. Names stay what the whole spec gave them."""
        if methods is None:
            return self
        allowed = {m.upper() for m in methods}
        return SpecToolSet({n: t for n, t in self.by_name.items() if t.method.upper() in allowed}, self.errors)

    def specs(self) -> list[ToolSpec]:
        """The tools as the worker lists them, with the hints their HTTP method implies."""
        return [
            ToolSpec(t.tool, t.description, t.input_schema, hints=http_method_hints(t.method))
            for t in self.by_name.values()
        ]


class SpecToolbox(Generic[T]):
    """A toolbox of a spec's tools (``toolboxes._toolbox.Toolbox``): its tools and load errors are the set's; a call
    finds its tool, makes its request (:meth:`request`, the kind's own) and sends it within the call's deadline,
    its answer cut at the toolbox's output cap."""

    def __init__(self, config: dict[str, Any], env: WorkerEnv, tools: SpecToolSet[T]) -> None:
        self.env = env
        self.max_bytes = output_cap(config, env.limits)
        self._tools = tools.narrowed((config.get("policy") or {}).get("http_methods"))

    def tools(self) -> list[ToolSpec]:
        return self._tools.specs()

    def load_errors(self) -> list[dict[str, str]]:
        return list(self._tools.errors)

    def request(self, tool: T, args: dict[str, Any]) -> tuple[HttpRequest, str]:
        """The request of a call of ``tool`` (arguments already validated against its schema) and the call's
        ``resource_id``."""
        raise NotImplementedError

    def call(self, tool: str, args: dict[str, Any], ctx: CallContext) -> ToolResult:
        found = self._tools.by_name.get(tool)
        if found is None:
            return ToolResult.error(f"unknown tool {tool!r}")
        request, resource_id = self.request(found, args)
        return send_request(
            request,
            ctx,
            max_bytes=self.max_bytes,
            workdir=self.env.workdir,
            state_effect="read" if found.method in _READ_METHODS else "mutate",
            resource_id=resource_id,
        )

    def close(self) -> None:
        pass


#: Methods whose calls only read (``state_effect`` ``read``; the others ``mutate``).
_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
