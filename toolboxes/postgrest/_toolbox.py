"""The PostgREST toolbox: tools over the tables, views and functions a PostgREST server describes.

Config (the seed's ``PostgRESTServer`` contents): ``SpecUrl`` (usually the server's root, which serves the Swagger
2.0 description; or a file), ``BaseUrl`` (requests go to ``BaseUrl/<table>`` and ``BaseUrl/rpc/<fn>``),
``AllowedMethods`` (narrows the methods the description lists; by default every one it lists). The description is
read once, at worker start; when it cannot be read the toolbox has no tools and a load error says why.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._http import DEFAULT_TIMEOUT_S
from ..openapi import SpecToolbox, SpecToolSet, load_spec
from ._query import build_request
from ._tools import TableTool, build_tools

if TYPE_CHECKING:
    from .._http import HttpRequest
    from .._toolbox import WorkerEnv

__all__ = ["PostgrestToolbox", "open_toolbox"]


class PostgrestToolbox(SpecToolbox[TableTool]):
    """The tools of one PostgREST server, inside its worker."""

    def __init__(self, config: dict[str, Any], env: WorkerEnv) -> None:
        spec_url = str(config.get("SpecUrl") or "")
        given = config.get("AllowedMethods")
        methods = None if given is None else [str(m) for m in given]
        tools: SpecToolSet[TableTool] = SpecToolSet.read(
            spec_url,
            lambda: build_tools(load_spec(spec_url, timeout_s=DEFAULT_TIMEOUT_S), env.toolbox_name, methods),
        )
        super().__init__(config, env, tools)
        self.base_url = str(config.get("BaseUrl") or "")

    def request(self, tool: TableTool, args: dict[str, Any]) -> tuple[HttpRequest, str]:
        return build_request(tool, args, self.base_url), f"postgrest:{self.base_url.rstrip('/')}{tool.path}"


def open_toolbox(config: dict[str, Any], env: WorkerEnv) -> PostgrestToolbox:
    """Open the PostgREST toolbox described by ``config``."""
    return PostgrestToolbox(config, env)
