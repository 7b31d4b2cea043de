"""The PostgREST toolbox: tools over the tables, views and functions a PostgREST server describes.

Config (the seed's ``PostgRESTServer`` contents): ``SpecUrl`` (usually the server's root, which serves the Swagger
2.0 description; or a file), ``BaseUrl`` (requests go to ``BaseUrl/<table>`` and ``BaseUrl/rpc/<fn>``),
``AllowedMethods`` (narrows the methods the description lists; by default every one it lists). The description is
read once, at worker start; when it cannot be read the toolbox has no tools and a load error says why.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._entry import output_cap
from .._http import DEFAULT_TIMEOUT_S, send_request
from .._result import ToolResult
from ..openapi import SpecToolSet, load_spec
from ._query import build_request
from ._tools import TableTool, build_tools

if TYPE_CHECKING:
    from .._toolbox import CallContext, ToolSpec, WorkerEnv

__all__ = ["PostgrestToolbox", "open_toolbox"]


class PostgrestToolbox:
    """The tools of one PostgREST server, inside its worker."""

    def __init__(self, config: dict[str, Any], env: WorkerEnv) -> None:
        self.env = env
        self.base_url = str(config.get("BaseUrl") or "")
        self.max_bytes = output_cap(config, env.limits)
        spec_url = str(config.get("SpecUrl") or "")
        given = config.get("AllowedMethods")
        methods = None if given is None else [str(m) for m in given]
        self._tools: SpecToolSet[TableTool] = SpecToolSet.read(
            spec_url,
            lambda: build_tools(load_spec(spec_url, timeout_s=DEFAULT_TIMEOUT_S), env.toolbox_name, methods),
        )

    def tools(self) -> list[ToolSpec]:
        return self._tools.specs()

    def load_errors(self) -> list[dict[str, str]]:
        return list(self._tools.errors)

    def call(self, tool: str, args: dict[str, Any], ctx: CallContext) -> ToolResult:
        t = self._tools.by_name.get(tool)
        if t is None:
            return ToolResult.error(f"unknown tool {tool!r}")
        request = build_request(t, args, self.base_url)
        effect = "read" if t.method == "GET" else "mutate"
        return send_request(
            request,
            ctx,
            max_bytes=self.max_bytes,
            workdir=self.env.workdir,
            state_effect=effect,
            resource_id=f"postgrest:{self.base_url.rstrip('/')}{t.path}",
        )

    def close(self) -> None:
        pass


def open_toolbox(config: dict[str, Any], env: WorkerEnv) -> PostgrestToolbox:
    """Open the PostgREST toolbox described by ``config``."""
    return PostgrestToolbox(config, env)
