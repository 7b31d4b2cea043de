"""Pydantic models of the seed's agent file (JSON), keys exactly as the seed writes them.

An agent file is ``{"tag": "OpenAIAgentDescription", "contents": {...}}`` or the bare object. Tagged values
use the seed's ``{"tag": NAME, "contents": ...}`` form, except the SQLite ``Versioning`` whose fields sit
beside its ``tag``.

Validation needs a context (``model_validate(data, context=...)``, see :func:`validation_context`):

- ``base_dir``: the directory of the agent file. Every relative path resolves against it, once, here, and is
  canonicalised (``os.path.realpath``). Exception: an MCP ``executable`` is only normalised, so that a
  symlinked program keeps its ``argv[0]``; a bare program name (no ``/``) is left for ``PATH`` lookup.
- ``environ``: the supervisor's environment, for ``${VAR}`` in ``Token`` and ``Headers`` values (a missing
  variable is an error naming it).

Models are strict (no coercion of ``"5"`` to 5) and refuse unknown keys, naming the keys they know. What is
not checked here: ``FileSandbox`` refs (resolved with the agent, in :mod:`supervisor._agent_toolboxes`),
toolbox name clashes (same place), and whether referenced files exist (the toolbox reports that when it
loads).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PlainSerializer,
    PlainValidator,
    Tag,
    ValidationInfo,
    model_validator,
)

from sandbox._predicates import AlwaysDeny, PathPredicate, PredicateError, parse_predicate, predicate_to_json

from ._config_errors import check_known_keys, problem

__all__ = [
    "DEFAULT_MAX_FILE_SIZE_BYTES",
    "DEVELOPER_CAPABILITIES",
    "SYSTEM_CAPABILITIES",
    "TAGS",
    "AgentDescription",
    "FileSandboxConfig",
    "FileSandboxRef",
    "check_host",
    "validation_context",
]

#: ``fsbMaxFileSize`` when the key is absent (``null`` means no limit).
DEFAULT_MAX_FILE_SIZE_BYTES = 50 * 1024 * 1024

#: SPEC.md section 4, system toolbox.
SYSTEM_CAPABILITIES = (
    "date",
    "operating-system",
    "running-user",
    "hostname",
    "working-directory",
    "env-vars",
    "process-info",
    "uptime",
    "attach-file",
    "list-directory",
    "execute-command",
    "list-sessions",
    "search-sessions",
    "read-session",
    "get-session-stats",
)
#: SPEC.md section 4, developer toolbox.
DEVELOPER_CAPABILITIES = (
    "read-file-range",
    "write-file-range",
    "patch-file",
    "restore-file",
    "show-spec",
    "validate-tool",
    "validate-agent",
    "create-agent",
    "create-tool",
)

_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_HOST_RE = re.compile(r"^(\*\.)?[a-z0-9]([a-z0-9_-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9_-]*[a-z0-9])?)*\.?$")
_IP_RE = re.compile(r"^\[?[0-9a-f:.]+\]?$")
_SKILL_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?$")
_ENV_RE = re.compile(r"\$\{([^}]*)\}")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def validation_context(base_dir: str, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The context ``AgentDescription.model_validate`` needs: the agent file's directory and the environment."""
    return {"base_dir": os.path.realpath(base_dir), "environ": os.environ if environ is None else environ}


_problem = problem


def _ctx(info: ValidationInfo) -> Mapping[str, Any]:
    return info.context if isinstance(info.context, Mapping) else {}


def _base_dir(info: ValidationInfo) -> str:
    return str(_ctx(info).get("base_dir") or os.getcwd())


def _check_path_text(value: str) -> None:
    if not value:
        raise _problem("empty path", "a file or directory path")
    if "\x00" in value:
        raise _problem("a path must not contain NUL bytes")


def _resolve_path(value: str, info: ValidationInfo) -> str:
    _check_path_text(value)
    return os.path.realpath(os.path.join(_base_dir(info), os.path.expanduser(value)))


def _resolve_executable(value: str, info: ValidationInfo) -> str:
    _check_path_text(value)
    if "/" not in value:
        return value
    return os.path.normpath(os.path.join(_base_dir(info), value))


def _check_name(value: str) -> str:
    if not _NAME_RE.match(value):
        raise _problem(f"invalid name {value!r}", "1 to 64 characters among A-Z, a-z, 0-9, '_' and '-'")
    return value


def check_host(value: str) -> str:
    """A host name or address from a config file, lowercased; raises a config error naming what is wrong."""
    host = value.strip().lower()
    if not (_HOST_RE.match(host) or _IP_RE.match(host)) or not host:
        raise _problem(
            f"invalid host {value!r}",
            "a host name or address without scheme, port or path, such as api.example.com",
        )
    return host


def _expand_env(value: str, info: ValidationInfo) -> str:
    environ = _ctx(info).get("environ", os.environ)

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if not _ENV_NAME_RE.match(name):
            raise _problem(f"invalid variable reference ${{{name}}}", "${NAME} with NAME of letters, digits, '_'")
        if name not in environ:
            raise _problem(f"environment variable {name!r} is not set", f"{name} set in the supervisor's environment")
        return str(environ[name])

    return _ENV_RE.sub(one, value)


def _check_regex(value: str | None) -> str | None:
    if value is not None:
        try:
            re.compile(value)
        except re.error as exc:
            raise _problem(f"invalid regular expression: {exc}", "a Python regular expression") from exc
    return value


def _check_http_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _problem(f"invalid URL {value!r}", "an http:// or https:// URL with a host")
    return value


def _spec_location(value: str, info: ValidationInfo) -> str:
    """A SpecUrl: an http(s) URL is kept, a ``file://`` URL or a path becomes a resolved path."""
    parts = urlsplit(value)
    if parts.scheme in ("http", "https"):
        return _check_http_url(value)
    if parts.scheme == "file":
        return _resolve_path(parts.path, info)
    if parts.scheme and len(parts.scheme) > 1:
        raise _problem(f"unsupported scheme {parts.scheme!r} in {value!r}", "an http(s) URL or a file path")
    return _resolve_path(value, info)


def _capabilities(known: tuple[str, ...]) -> Any:
    def check(values: list[str]) -> list[str]:
        seen: set[str] = set()
        for i, cap in enumerate(values):
            if cap not in known:
                raise _problem(f"unknown capability {cap!r}", "one of " + ", ".join(known), (i,))
            if cap in seen:
                raise _problem(f"capability {cap!r} is listed twice", "each capability once", (i,))
            seen.add(cap)
        return values

    return AfterValidator(check)


def _split_predicate_path(path: str) -> tuple[str | int, ...]:
    parts: list[str | int] = []
    for name, index in re.findall(r"([^.\[\]]+)|\[(\d+)\]", path):
        parts.append(int(index) if index else name)
    return tuple(parts)


def _parse_predicate(value: Any, info: ValidationInfo) -> PathPredicate:
    if not isinstance(value, dict | list | str | int | float | bool | type(None)):
        return value  # already parsed (model_construct / copy)
    try:
        return parse_predicate(value, _base_dir(info))
    except PredicateError as exc:
        raise _problem(exc.message, None, _split_predicate_path(exc.path)) from exc


def _check_subdir(value: str) -> str:
    parts = value.split("/")
    if not value or value.startswith("/") or ".." in parts or "\x00" in value:
        raise _problem(f"invalid subdir {value!r}", "a relative path inside the repository, without '..'")
    return value


def _check_skill_name(value: str) -> str:
    if not _SKILL_RE.match(value) or "--" in value:
        raise _problem(
            f"invalid skill name {value!r}",
            "1 to 64 of a-z, 0-9 and '-', without a leading, trailing or double '-'",
        )
    return value


ConfigPath = Annotated[str, AfterValidator(_resolve_path)]
SkillName = Annotated[str, AfterValidator(_check_skill_name)]
Executable = Annotated[str, AfterValidator(_resolve_executable)]
ToolboxName = Annotated[str, AfterValidator(_check_name)]
Host = Annotated[str, AfterValidator(check_host)]
EnvText = Annotated[str, AfterValidator(_expand_env)]
HttpUrl = Annotated[str, AfterValidator(_check_http_url)]
SpecLocation = Annotated[str, AfterValidator(_spec_location)]
Predicate = Annotated[Any, PlainValidator(_parse_predicate), PlainSerializer(predicate_to_json)]


class _Model(BaseModel):
    """Strict, frozen, refuses unknown keys and names the known ones."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, validate_default=False, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        return check_known_keys(cls, data)


# --------------------------------------------------------------------------------------------- file sandboxes
class FileSandboxConfig(_Model):
    """The seed's ``FileSandboxConfig``: predicate, size limit (default 50 MiB, ``null`` = none), name."""

    predicate: Predicate = Field(default=AlwaysDeny(), alias="fsbPredicate")
    max_file_size: int | None = Field(default=DEFAULT_MAX_FILE_SIZE_BYTES, ge=0, alias="fsbMaxFileSize")
    name: str | None = Field(default=None, alias="fsbName")

    def to_json(self) -> dict[str, Any]:
        """The seed's JSON form, paths resolved."""
        return {
            "fsbPredicate": predicate_to_json(self.predicate),
            "fsbMaxFileSize": self.max_file_size,
            "fsbName": self.name,
        }


class FileSandboxRef(_Model):
    """``{"ref": NAME}``: the agent's ``fileSandboxes[NAME]``."""

    ref: str


def _sandbox_kind(value: Any) -> str:
    return "FileSandboxRef" if isinstance(value, dict) and "ref" in value else "FileSandboxInline"


FileSandbox = Annotated[
    Annotated[FileSandboxConfig, Tag("FileSandboxInline")] | Annotated[FileSandboxRef, Tag("FileSandboxRef")],
    Discriminator(_sandbox_kind),
]


# -------------------------------------------------------------------------------------------- bash, mcp, http
class BashContents(_Model):
    path: ConfigPath = Field(alias="Path")


class FileSystemDirectory(_Model):
    tag: Literal["FileSystemDirectory"]
    contents: BashContents


class SingleTool(_Model):
    tag: Literal["SingleTool"]
    contents: BashContents


class McpContents(_Model):
    name: ToolboxName
    executable: Executable
    args: list[str] = []


class McpSimpleBinary(_Model):
    tag: Literal["McpSimpleBinary"]
    contents: McpContents


class OpenApiContents(_Model):
    spec_url: SpecLocation = Field(alias="SpecUrl")
    base_url: HttpUrl = Field(alias="BaseUrl")
    headers: dict[str, EnvText] = Field(default={}, alias="Headers", repr=False)
    token: EnvText | None = Field(default=None, alias="Token", repr=False)
    name: ToolboxName | None = Field(default=None, alias="Name")


class OpenAPIServer(_Model):
    tag: Literal["OpenAPIServer"]
    contents: OpenApiContents


class PostgrestContents(_Model):
    spec_url: SpecLocation = Field(alias="SpecUrl")
    base_url: HttpUrl = Field(alias="BaseUrl")
    allowed_methods: list[Literal["GET", "POST", "PATCH", "DELETE"]] = Field(default=["GET"], alias="AllowedMethods")


class PostgRESTServer(_Model):
    tag: Literal["PostgRESTServer"]
    contents: PostgrestContents


# --------------------------------------------------------------------------------------------------- builtins
class SqliteReadOnly(_Model):
    tag: Literal["SqliteReadOnly"]
    path: ConfigPath


class SqliteReadWrite(_Model):
    tag: Literal["SqliteReadWrite"]
    path: ConfigPath


class SqliteNoVersioning(_Model):
    tag: Literal["SqliteNoVersioning"]
    path: ConfigPath


class SqliteVersioned(_Model):
    tag: Literal["SqliteVersioned"]
    shared: Literal["global", "conversation", "turn", "tool-call"]
    storage_root: ConfigPath | None = Field(default=None, alias="storageRoot")
    base_path: ConfigPath = Field(alias="basePath")


Versioning = Annotated[
    SqliteReadOnly | SqliteReadWrite | SqliteNoVersioning | SqliteVersioned, Field(discriminator="tag")
]


class SqliteContents(_Model):
    name: ToolboxName = Field(alias="Name")
    description: str = Field(alias="Description")
    versioning: Versioning = Field(alias="Versioning")


class SystemContents(_Model):
    name: ToolboxName = Field(alias="Name")
    description: str = Field(alias="Description")
    capabilities: Annotated[list[str], _capabilities(SYSTEM_CAPABILITIES)] = Field(alias="Capabilities")
    env_var_filter: Annotated[str | None, AfterValidator(_check_regex)] = Field(default=None, alias="EnvVarFilter")
    file_sandbox: FileSandbox | None = Field(default=None, alias="FileSandbox")
    command_filter: ConfigPath | None = Field(default=None, alias="CommandFilter")
    session_scope: Literal["parents-only", "children-only", "subtree", "all"] = Field(
        default="subtree", alias="SessionIntrospectionScope"
    )
    session_max_results: int = Field(default=50, ge=1, alias="SessionIntrospectionMaxResults")
    session_include_tool_outputs: bool = Field(default=False, alias="SessionIntrospectionIncludeToolOutputs")


class DeveloperContents(_Model):
    name: ToolboxName = Field(alias="Name")
    description: str = Field(alias="Description")
    capabilities: Annotated[list[str], _capabilities(DEVELOPER_CAPABILITIES)] = Field(alias="Capabilities")
    file_sandbox: FileSandbox | None = Field(default=None, alias="FileSandbox")


class LuaContents(_Model):
    name: ToolboxName = Field(alias="Name")
    description: str = Field(alias="Description")
    max_memory_mb: int = Field(gt=0, alias="MaxMemoryMB")
    max_execution_time_s: float = Field(gt=0, alias="MaxExecutionTimeSeconds")
    allowed_tools: list[str] = Field(alias="AllowedTools")
    allowed_hosts: list[Host] = Field(alias="AllowedHosts")
    file_sandbox: FileSandbox | None = Field(default=None, alias="FileSandbox")


class SqliteToolbox(_Model):
    tag: Literal["SqliteToolbox"]
    contents: SqliteContents


class SystemToolbox(_Model):
    tag: Literal["SystemToolbox"]
    contents: SystemContents


class DeveloperToolbox(_Model):
    tag: Literal["DeveloperToolbox"]
    contents: DeveloperContents


class LuaToolbox(_Model):
    tag: Literal["LuaToolbox"]
    contents: LuaContents


BuiltinToolbox = Annotated[SqliteToolbox | SystemToolbox | DeveloperToolbox | LuaToolbox, Field(discriminator="tag")]
BashToolbox = Annotated[FileSystemDirectory | SingleTool, Field(discriminator="tag")]


# ---------------------------------------------------------------------------------------------- skills, agent
class SkillDirectory(_Model):
    tag: Literal["SkillDirectory"]
    contents: ConfigPath


class GitRepoContents(_Model):
    url: HttpUrl
    subdir: Annotated[str, AfterValidator(_check_subdir)] | None = None


class SkillGitRepo(_Model):
    tag: Literal["SkillGitRepo"]
    contents: GitRepoContents


SkillSource = Annotated[SkillDirectory | SkillGitRepo, Field(discriminator="tag")]


class ExtraAgent(_Model):
    slug: ToolboxName
    path: ConfigPath


class AgentDescription(_Model):
    """The contents of ``OpenAIAgentDescription``. Only ``slug`` is required; model keys matter to sub-agents."""

    slug: ToolboxName
    api_key_id: str | None = Field(default=None, alias="apiKeyId")
    flavor: str | None = None
    model_url: str | None = Field(default=None, alias="modelUrl")
    model_name: str | None = Field(default=None, alias="modelName")
    announce: str | None = None
    system_prompt: list[str] = Field(default=[], alias="systemPrompt")
    tool_directory: ConfigPath | None = Field(default=None, alias="toolDirectory")
    bash_toolboxes: list[BashToolbox] = Field(default=[], alias="bashToolboxes")
    mcp_servers: list[McpSimpleBinary] = Field(default=[], alias="mcpServers")
    open_api_toolboxes: list[OpenAPIServer] = Field(default=[], alias="openApiToolboxes")
    postgrest_toolboxes: list[PostgRESTServer] = Field(default=[], alias="postgrestToolboxes")
    builtin_toolboxes: list[BuiltinToolbox] = Field(default=[], alias="builtinToolboxes")
    skill_sources: list[SkillSource] = Field(default=[], alias="skillSources")
    auto_enable_skills: list[SkillName] = Field(default=[], alias="autoEnableSkills")
    extra_agents: list[ExtraAgent] = Field(default=[], alias="extraAgents")
    file_sandboxes: dict[str, FileSandboxConfig] = Field(default={}, alias="fileSandboxes")


#: Location parts pydantic inserts for tagged unions (dropped from JSON paths in messages).
TAGS = frozenset(
    {
        "FileSystemDirectory",
        "SingleTool",
        "McpSimpleBinary",
        "OpenAPIServer",
        "PostgRESTServer",
        "SqliteToolbox",
        "SystemToolbox",
        "DeveloperToolbox",
        "LuaToolbox",
        "SqliteReadOnly",
        "SqliteReadWrite",
        "SqliteNoVersioning",
        "SqliteVersioned",
        "SkillDirectory",
        "SkillGitRepo",
        "FileSandboxInline",
        "FileSandboxRef",
    }
)
