"""The OpenAPI toolbox: one tool per operation of a spec, each call one HTTP request through the egress proxy.

Config (the seed's ``OpenAPIServer`` contents): ``SpecUrl`` (http(s) URL or a resolved file path), ``BaseUrl`` (every
request goes to ``BaseUrl`` + the operation's path; the spec's ``servers``/``host``/``basePath`` are not used, so
the agent file decides where calls go), ``Headers``, ``Token`` (``Authorization: Bearer``), ``Name``. The spec is
read once, when the worker starts; a spec that cannot be read or parsed leaves the toolbox without tools and with
a load error (the worker still starts; restart it to try again).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .._http import DEFAULT_TIMEOUT_S
from ._operations import Operation, build_operations
from ._request import build_request
from ._source import load_spec
from ._tool_set import SpecToolbox, SpecToolSet

if TYPE_CHECKING:
    from .._http import HttpRequest
    from .._toolbox import WorkerEnv

__all__ = ["OpenApiToolbox", "auth_headers", "open_toolbox"]


def auth_headers(config: dict[str, Any]) -> dict[str, str]:
    """``Headers`` plus ``Authorization: Bearer <Token>`` (the Token wins)."""
    headers = {str(k): str(v) for k, v in (config.get("Headers") or {}).items()}
    token = config.get("Token")
    if token:
        headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
        headers["Authorization"] = f"Bearer {token}"
    return headers


def spec_headers(config: dict[str, Any]) -> dict[str, str]:
    """Headers sent when fetching the spec: the auth headers only when the spec is on the BaseUrl's host (a
    Token is never sent to another host)."""
    spec, base = str(config.get("SpecUrl") or ""), str(config.get("BaseUrl") or "")
    same = "://" in spec and urlsplit(spec).netloc.lower() == urlsplit(base).netloc.lower()
    return auth_headers(config) if same else {}


class OpenApiToolbox(SpecToolbox[Operation]):
    """The tools of one OpenAPI spec, inside its worker."""

    def __init__(self, config: dict[str, Any], env: WorkerEnv) -> None:
        spec_url = str(config.get("SpecUrl") or "")
        tools: SpecToolSet[Operation] = SpecToolSet.read(
            spec_url,
            lambda: build_operations(
                load_spec(spec_url, headers=spec_headers(config), timeout_s=DEFAULT_TIMEOUT_S), env.toolbox_name
            ),
        )
        super().__init__(config, env, tools)
        self.base_url = str(config.get("BaseUrl") or "")
        self.headers = {str(k): str(v) for k, v in (config.get("Headers") or {}).items()}
        self.token = config.get("Token") or None

    def request(self, tool: Operation, args: dict[str, Any]) -> tuple[HttpRequest, str]:
        request = build_request(tool, args, self.base_url, self.headers, self.token)
        return request, f"openapi:{request.url}"


def open_toolbox(config: dict[str, Any], env: WorkerEnv) -> OpenApiToolbox:
    """Open the OpenAPI toolbox described by ``config`` (the seed's ``OpenAPIServer`` contents)."""
    return OpenApiToolbox(config, env)
