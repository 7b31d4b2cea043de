"""The agent file's toolboxes that run what the agent names: bash tools (``bashToolboxes``), MCP servers
(``mcpServers``), OpenAPI and PostgREST services (``openApiToolboxes``, ``postgrestToolboxes``), keys exactly as the
seed writes them. A ``${VAR}`` of an OpenAPI ``Token`` or ``Headers`` that is not set is that toolbox's load error
(:attr:`OpenApiContents.unset_env`), not the file's."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, ModelWrapValidatorHandler, PrivateAttr, ValidationInfo, model_validator

from ._agent_sandboxes import FileSandbox
from ._model import StrictModel
from ._types import UNSET_ENV_KEY, ConfigPath, EnvText, Executable, HttpUrl, SpecLocation, ToolboxName

__all__ = [
    "BashContents",
    "BashToolbox",
    "FileSystemDirectory",
    "McpContents",
    "McpSimpleBinary",
    "OpenAPIServer",
    "OpenApiContents",
    "PostgRESTServer",
    "PostgrestContents",
    "SingleTool",
]


class BashContents(StrictModel):
    path: ConfigPath = Field(alias="Path")


class FileSystemDirectory(StrictModel):
    tag: Literal["FileSystemDirectory"]
    contents: BashContents


class SingleTool(StrictModel):
    tag: Literal["SingleTool"]
    contents: BashContents


class McpContents(StrictModel):
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


class McpSimpleBinary(StrictModel):
    tag: Literal["McpSimpleBinary"]
    contents: McpContents


class OpenApiContents(StrictModel):
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


class OpenAPIServer(StrictModel):
    tag: Literal["OpenAPIServer"]
    contents: OpenApiContents


class PostgrestContents(StrictModel):
    spec_url: SpecLocation = Field(alias="SpecUrl")
    base_url: HttpUrl = Field(alias="BaseUrl")
    #: narrows the methods the description lists (PostgREST lists what its request role may do); None: all of them
    allowed_methods: list[Literal["GET", "POST", "PATCH", "DELETE"]] | None = Field(
        default=None, alias="AllowedMethods"
    )
    #: the toolbox's name (its tools' prefix, its policy key); without it, the BaseUrl's host (as OpenAPI's)
    name: ToolboxName | None = Field(default=None, alias="Name")


class PostgRESTServer(StrictModel):
    tag: Literal["PostgRESTServer"]
    contents: PostgrestContents


BashToolbox = Annotated[FileSystemDirectory | SingleTool, Field(discriminator="tag")]
