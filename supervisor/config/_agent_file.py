"""Pydantic models of the seed's agent file (JSON), keys exactly as the seed writes them.

An agent file is ``{"tag": "OpenAIAgentDescription", "contents": {...}}`` or the bare object. Tagged values
use the seed's ``{"tag": NAME, "contents": ...}`` form, except the SQLite ``Versioning`` whose fields sit
beside its ``tag``.

Validation needs a context (``model_validate(data, context=...)``, see :func:`validation_context`):

- ``base_dir``: the directory of the agent file. Every relative path resolves against it, once, here, and is
  canonicalised (``os.path.realpath``). Exception: an MCP ``executable`` is only normalised, so that a
  symlinked program keeps its ``argv[0]``; a bare program name (no ``/``) is left for ``PATH`` lookup.
- ``environ``: the supervisor's environment, for ``${VAR}`` in ``Token`` and ``Headers`` values (a missing
  variable is not an error of the file: ``OpenApiContents.unset_env`` names it, and that toolbox alone does not
  load).

Models are strict (no coercion of ``"5"`` to 5) and refuse unknown keys, naming the keys they know. What is
not checked here: ``FileSandbox`` refs (resolved with the agent, in :mod:`supervisor.config._agent_toolboxes`),
toolbox name clashes (same place), and whether referenced files exist (the toolbox reports that when it
loads).
"""

from __future__ import annotations

import typing
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    Discriminator,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    Tag,
    ValidationInfo,
    model_validator,
)

from sandbox import DEFAULT_MAX_FILE_SIZE, AlwaysDeny, predicate_to_json

from ._model import StrictModel as _Model
from ._types import (
    UNSET_ENV_KEY,
    CapabilityList,
    ConfigPath,
    EnvText,
    Executable,
    GitUrl,
    Host,
    HttpUrl,
    Predicate,
    SkillName,
    SpecLocation,
    ToolboxName,
    check_regex,
    check_subdir,
    validation_context,
)

__all__ = [
    "DEFAULT_MAX_FILE_SIZE_BYTES",
    "DEVELOPER_CAPABILITIES",
    "SYSTEM_CAPABILITIES",
    "TAGS",
    "AgentDescription",
    "FileSandboxConfig",
    "FileSandboxRef",
    "validation_context",
]

#: ``fsbMaxFileSize`` when the key is absent (``null`` means no limit): the seed's, defined once in
#: ``sandbox/_file_sandbox.py``.
DEFAULT_MAX_FILE_SIZE_BYTES = DEFAULT_MAX_FILE_SIZE

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
    file_sandbox: FileSandbox | None = Field(
        default=None,
        alias="FileSandbox",
        description=(
            "what the server may read besides the system paths and its own package: granted read-only and checked "
            "by the kernel only (the server is code of its own, so a predicate the kernel cannot say exactly is "
            "refused under inexact_predicates: refuse). An argument that names a path grants nothing by itself: it "
            "must lie within this or the policy's toolboxes.<agent>/<name>.read_paths"
        ),
    )


class McpSimpleBinary(_Model):
    tag: Literal["McpSimpleBinary"]
    contents: McpContents


class OpenApiContents(_Model):
    """An OpenAPI toolbox. A ${VAR} in Token or Headers that is not set does not refuse the agent file: that
    toolbox alone does not load, and its load error names the variable (:attr:`unset_env`)."""

    spec_url: SpecLocation = Field(alias="SpecUrl")
    base_url: HttpUrl = Field(alias="BaseUrl")
    headers: dict[str, EnvText] = Field(default={}, alias="Headers", repr=False)
    token: EnvText | None = Field(default=None, alias="Token", repr=False)
    name: ToolboxName | None = Field(default=None, alias="Name")
    _unset_env: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _collect_unset_env(cls, data: Any, handler: ModelWrapValidatorHandler[Any], info: ValidationInfo) -> Any:
        context = info.context if isinstance(info.context, dict) else None
        if context is None:  # no context to collect in: an unset variable refuses, as everywhere
            return handler(data)
        outer = context.get(UNSET_ENV_KEY)
        unset: list[str] = []
        context[UNSET_ENV_KEY] = unset
        try:
            model = handler(data)
        finally:
            if outer is None:
                context.pop(UNSET_ENV_KEY, None)
            else:
                context[UNSET_ENV_KEY] = outer
        model._unset_env = tuple(dict.fromkeys(unset))
        return model

    @property
    def unset_env(self) -> tuple[str, ...]:
        """The ``${VAR}`` names of ``Token`` and ``Headers`` not set in the supervisor's environment (each once)."""
        return self._unset_env


class OpenAPIServer(_Model):
    tag: Literal["OpenAPIServer"]
    contents: OpenApiContents


class PostgrestContents(_Model):
    spec_url: SpecLocation = Field(alias="SpecUrl")
    base_url: HttpUrl = Field(alias="BaseUrl")
    #: narrows the methods the description lists (PostgREST lists what its request role may do); None: all of them
    allowed_methods: list[Literal["GET", "POST", "PATCH", "DELETE"]] | None = Field(
        default=None, alias="AllowedMethods"
    )
    #: the toolbox's name (its tools' prefix, its policy key); without it, the BaseUrl's host (as OpenAPI's)
    name: ToolboxName | None = Field(default=None, alias="Name")


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
    capabilities: Annotated[list[str], CapabilityList(SYSTEM_CAPABILITIES)] = Field(alias="Capabilities")
    env_var_filter: Annotated[str | None, AfterValidator(check_regex)] = Field(default=None, alias="EnvVarFilter")
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
    capabilities: Annotated[list[str], CapabilityList(DEVELOPER_CAPABILITIES)] = Field(alias="Capabilities")
    file_sandbox: FileSandbox | None = Field(default=None, alias="FileSandbox")


class LuaContents(_Model):
    name: ToolboxName = Field(alias="Name")
    description: str = Field(alias="Description")
    max_memory_mb: int = Field(gt=0, alias="MaxMemoryMB")
    max_execution_time_s: float = Field(gt=0, alias="MaxExecutionTimeSeconds")
    allowed_tools: list[str] = Field(alias="AllowedTools")
    allowed_hosts: list[Host] = Field(alias="AllowedHosts")
    file_sandbox: FileSandbox | None = Field(default=None, alias="FileSandbox")


class WasmContents(_Model):
    """``WasmToolbox`` (docs/WASM.md): ``Path`` is one component or a folder of them."""

    name: ToolboxName = Field(alias="Name", description="the toolbox name; tools are wasm_<Name>_<component>")
    description: str = Field(alias="Description", description="what the toolbox is for")
    path: ConfigPath = Field(
        alias="Path",
        description=(
            "a component file (<component>.wasm) or a folder of them, each with its sidecar <component>.json "
            '{"description": ..., "inputSchema": {...}} beside it; a folder is watched for changes'
        ),
    )
    file_sandbox: FileSandbox | None = Field(
        default=None,
        alias="FileSandbox",
        description=(
            "folders besides the work folder the components may open, preopened read-write at their own paths "
            "(the folders of the predicate's Landlock rules); none by default. fsbMaxFileSize is the worker's "
            "RLIMIT_FSIZE: a write past it fails and the call ends error naming it"
        ),
    )
    max_memory_mb: int = Field(
        default=64,
        gt=0,
        le=4096,
        alias="MaxMemoryMB",
        description=("the store's memory limit of one call, in MiB: a memory.grow past it fails"),
    )
    max_execution_time_s: float = Field(
        default=30.0,
        gt=0,
        alias="MaxExecutionTimeSeconds",
        description=(
            "the epoch deadline of one call (10 ms ticks): a component still running is stopped with status error"
        ),
    )
    allowed_hosts: list[Host] = Field(
        default=[],
        alias="AllowedHosts",
        description=(
            "gives components nothing in this build (wasmtime-py cannot allow WASI TCP/UDP, and wasi:http would "
            "dial around the egress proxy, so it is not linked): check warns, a strict policy refuses it; "
            "components never have sockets (docs/WASM.md, Network)"
        ),
    )


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


class WasmToolbox(_Model):
    tag: Literal["WasmToolbox"]
    contents: WasmContents


BuiltinToolbox = Annotated[
    SqliteToolbox | SystemToolbox | DeveloperToolbox | LuaToolbox | WasmToolbox, Field(discriminator="tag")
]
BashToolbox = Annotated[FileSystemDirectory | SingleTool, Field(discriminator="tag")]


# ---------------------------------------------------------------------------------------------- skills, agent
class SkillDirectory(_Model):
    tag: Literal["SkillDirectory"]
    contents: ConfigPath


class GitRepoContents(_Model):
    url: GitUrl
    subdir: Annotated[str, AfterValidator(check_subdir)] | None = None


class SkillGitRepo(_Model):
    tag: Literal["SkillGitRepo"]
    contents: GitRepoContents


SkillSource = Annotated[SkillDirectory | SkillGitRepo, Field(discriminator="tag")]


class ExtraAgent(_Model):
    slug: ToolboxName
    path: ConfigPath


class AgentDescription(_Model):
    """The contents of ``OpenAIAgentDescription``. Only ``slug`` is required; model keys matter to sub-agents."""

    slug: ToolboxName = Field(description="the agent's name (its tools and sessions are its own)")
    api_key_id: str | None = Field(default=None, alias="apiKeyId", description="the policy's model_keys entry")
    flavor: str | None = Field(default=None, description="the model API's flavour (OpenAIv1)")
    model_url: str | None = Field(default=None, alias="modelUrl", description="the model endpoint (sub-agents)")
    model_name: str | None = Field(default=None, alias="modelName")
    announce: str | None = Field(default=None, description="what the agent is for (its sub-agent tool's description)")
    system_prompt: list[str] = Field(default=[], alias="systemPrompt", description="lines of the system prompt")
    tool_directory: ConfigPath | None = Field(
        default=None, alias="toolDirectory", description="a folder of bash tools (as a FileSystemDirectory)"
    )
    bash_toolboxes: list[BashToolbox] = Field(default=[], alias="bashToolboxes")
    mcp_servers: list[McpSimpleBinary] = Field(default=[], alias="mcpServers")
    open_api_toolboxes: list[OpenAPIServer] = Field(default=[], alias="openApiToolboxes")
    postgrest_toolboxes: list[PostgRESTServer] = Field(default=[], alias="postgrestToolboxes")
    builtin_toolboxes: list[BuiltinToolbox] = Field(default=[], alias="builtinToolboxes")
    skill_sources: list[SkillSource] = Field(default=[], alias="skillSources")
    auto_enable_skills: list[SkillName] = Field(
        default=[], alias="autoEnableSkills", description="skills enabled in every session"
    )
    extra_agents: list[ExtraAgent] = Field(default=[], alias="extraAgents", description="sub-agents it may call")
    file_sandboxes: dict[str, FileSandboxConfig] = Field(
        default={}, alias="fileSandboxes", description='named sandboxes a FileSandbox {"ref": NAME} uses'
    )


def _union_tags(model: type[BaseModel]) -> frozenset[str]:
    """The tags of the tagged unions below ``model``: each ``tag`` field's literal, each discriminator ``Tag``."""
    tags: set[str] = set()
    seen: set[type[BaseModel]] = set()

    def walk(annotation: Any, name: str = "") -> None:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation not in seen:
                seen.add(annotation)
                for field_name, info in annotation.model_fields.items():
                    walk(info.annotation, field_name)
            return
        if typing.get_origin(annotation) is Literal and name == "tag":
            tags.update(str(value) for value in typing.get_args(annotation))
        for part in (*typing.get_args(annotation), *getattr(annotation, "__metadata__", ())):
            if isinstance(part, Tag):
                tags.add(part.tag)
            else:
                walk(part)

    walk(model)
    return frozenset(tags)


#: Location parts pydantic inserts for tagged unions (dropped from JSON paths in messages).
TAGS = _union_tags(AgentDescription)
