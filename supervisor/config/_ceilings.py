"""Policy ceilings: the most an agent file may grant its toolboxes, per agent (``ceilings.<slug>``, ``ceilings."*"``
for every agent) or per tenant (``tenants.<name>.ceiling``, for the agents it may use and their sub-agents).

A ceiling bounds what the tenant's side (the agent file) asks for; the operator's own per-toolbox grants
(``toolboxes.<agent>/<name>.allowed_hosts``) are not bounded by it. Enforced at load by
``supervisor/plan/_ceilings.py``: an agent file asking past a ceiling is a load error of that toolbox naming the key
that would open it; the egress proxy only ever holds entries that passed.
"""

from __future__ import annotations

import os
from typing import Annotated

from pydantic import AfterValidator, Field

from sandbox import resolve_named_path

from ._agent_builtins import DEVELOPER_CAPABILITIES, SYSTEM_CAPABILITIES
from ._errors import problem
from ._model import StrictModel as _Model
from ._types import check_host

__all__ = ["ANY_HOST", "HTTP_METHODS", "Ceiling"]

#: A ceiling's ``allowed_hosts`` entry for any name (addresses are judged as always: loopback and private ranges
#: stay closed unless the policy opens them to the toolbox)
ANY_HOST = "*"


def _ceiling_host(value: str) -> str:
    return ANY_HOST if value.strip() == ANY_HOST else check_host(value)


#: The HTTP methods an OpenAPI or PostgREST tool may have (a ceiling's ``http_methods`` names some of them)
HTTP_METHODS = ("GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE", "TRACE")


def _http_method(value: str) -> str:
    method = value.strip().upper()
    if method not in HTTP_METHODS:
        raise problem(f"unknown HTTP method {value!r}", "one of " + ", ".join(HTTP_METHODS))
    return method


def _tree(value: str) -> str:
    """A ceiling's ``paths`` entry: an absolute path, canonical (root's links followed, as the launcher does)."""
    if not value.startswith("/") or "\x00" in value:
        raise problem(f"not an absolute path: {value!r}", "an absolute path such as /srv/tenants/acme")
    try:
        return resolve_named_path(os.path.normpath(value), frozenset({0}) if os.geteuid() == 0 else None).canonical
    except OSError:  # a link not root's, a loop: the tree as written (it then holds nothing a walk reaches)
        return os.path.normpath(value)


def _capability(value: str) -> str:
    known = (*SYSTEM_CAPABILITIES, *DEVELOPER_CAPABILITIES)
    if value not in known:
        raise problem(
            f"unknown capability {value!r}", "a SystemToolbox or DeveloperToolbox capability: " + ", ".join(known)
        )
    return value


class Ceiling(_Model):
    """The most an agent file may grant: hosts its toolboxes' ``AllowedHosts`` (and OpenAPI/PostgREST and git
    source hosts) may name, the model endpoint its ``modelUrl`` may name, System/Developer capabilities it may not
    enable, the folders the paths it names must lie in, and the HTTP methods of its OpenAPI/PostgREST tools."""

    allowed_hosts: list[Annotated[str, AfterValidator(_ceiling_host)]] | None = Field(
        default=None,
        description="patterns every AllowedHosts entry of the agent file must fall within: a name, '*.suffix' or IP "
        "with an optional ':port' or ':first-last' ('*.example.com:443' covers 'api.example.com:443' and "
        "'*.eu.example.com:443'); '*': any name or address (the address rules still apply); [] = no network; "
        "null = no bound on hosts",
    )
    model_hosts: list[Annotated[str, AfterValidator(_ceiling_host)]] | None = Field(
        default=None,
        description="patterns the host and port of the agent file's modelUrl must fall within (the same syntax as "
        "allowed_hosts: 'api.openai.com:443', 'localhost:11434', '*.example.com'; '*': any); [] = no model; null = no "
        "bound. The address rules still apply: loopback and private ranges only where agent_loop opens them",
    )
    forbidden_capabilities: list[Annotated[str, AfterValidator(_capability)]] = Field(
        default=[],
        description="SystemToolbox and DeveloperToolbox capabilities the agent file may not enable "
        "(execute-command, hostname, write-file-range, ...)",
    )
    paths: list[Annotated[str, AfterValidator(_tree)]] | None = Field(
        default=None,
        description="trees every path the agent file names must lie within: FileSandbox paths, bash Path and "
        "toolDirectory, skill folders and file:// git sources, SQLite paths, WASM Path, CommandFilter, spec files, an "
        "MCP server's executable with its package tree (paths the policy grants anyway, system_paths and the "
        "toolbox's read_paths, are always fine), and sub-agent files (extraAgents, toolDirectory's *.json: always "
        "within); a toolbox naming another does not load, a sub-agent file outside is left out; [] = none; null = "
        "no bound",
    )
    http_methods: list[Annotated[str, AfterValidator(_http_method)]] | None = Field(
        default=None,
        description="HTTP methods the agent's OpenAPI and PostgREST toolboxes may call ([GET, HEAD]: reads only): a "
        "tool of another method is not offered (a PostgREST AllowedMethods naming one is a load error of that "
        "toolbox); [] = no such tools; null = no bound",
    )
