"""The PostgREST toolbox: tools over the tables, views and functions a PostgREST server describes.

Config (the seed's ``PostgRESTServer`` contents): ``SpecUrl`` (usually the server's root, which serves the Swagger
2.0 description; or a file), ``BaseUrl`` (requests go to ``BaseUrl/<table>`` and ``BaseUrl/rpc/<fn>``),
``AllowedMethods`` (default ``["GET"]``). The description is read once, at worker start; when it cannot be read
the toolbox has no tools and a load error says why.
"""

from __future__ import annotations

from typing import Any

from .._entry import output_cap
from .._hints import http_method_hints
from .._http import DEFAULT_TIMEOUT_S, send_request
from .._result import ToolResult
from .._toolbox import CallContext, ToolSpec, WorkerEnv
from ..openapi import SpecError, load_spec
from ._query import build_request
from ._tools import TableTool, build_tools

__all__ = ["PostgrestToolbox", "open_toolbox"]


class PostgrestToolbox:
    """The tools of one PostgREST server, inside its worker."""

    def __init__(self, config: dict[str, Any], env: WorkerEnv) -> None:
        self.env = env
        self.base_url = str(config.get("BaseUrl") or "")
        self.max_bytes = output_cap(config, env.limits)
        self._tools: dict[str, TableTool] = {}
        self._errors: list[dict[str, str]] = []
        spec_url = str(config.get("SpecUrl") or "")
        methods = config.get("AllowedMethods") or ["GET"]
        try:
            resolver = load_spec(spec_url, timeout_s=DEFAULT_TIMEOUT_S)
            tools, errors = build_tools(resolver, env.toolbox_name, list(methods))
        except SpecError as exc:
            self._errors.append({"source": spec_url, "message": str(exc)})
            return
        self._tools = {t.tool: t for t in tools}
        self._errors = [{"source": f"{spec_url}: {e['source']}", "message": e["message"]} for e in errors]

    def tools(self) -> list[ToolSpec]:
        return [
            ToolSpec(t.tool, t.description, t.input_schema, hints=http_method_hints(t.method))
            for t in self._tools.values()
        ]

    def load_errors(self) -> list[dict[str, str]]:
        return list(self._errors)

    def call(self, tool: str, args: dict[str, Any], ctx: CallContext) -> ToolResult:
        t = self._tools.get(tool)
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
