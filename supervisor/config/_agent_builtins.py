"""The agent file's built-in toolboxes (``builtinToolboxes``): SQLite, System, Developer, Lua and WASM, with the
capabilities the System and Developer toolboxes may list (SPEC.md section 4), keys exactly as the seed writes them."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from ._agent_sandboxes import FileSandbox
from ._model import StrictModel
from ._types import CapabilityList, ConfigPath, Host, ToolboxName, check_regex

__all__ = [
    "DEVELOPER_CAPABILITIES",
    "SYSTEM_CAPABILITIES",
    "BuiltinToolbox",
    "DeveloperContents",
    "DeveloperToolbox",
    "LuaContents",
    "LuaToolbox",
    "SqliteContents",
    "SqliteNoVersioning",
    "SqliteReadOnly",
    "SqliteReadWrite",
    "SqliteToolbox",
    "SqliteVersioned",
    "SystemContents",
    "SystemToolbox",
    "WasmContents",
    "WasmToolbox",
]

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


class SqliteReadOnly(StrictModel):
    tag: Literal["SqliteReadOnly"]
    path: ConfigPath


class SqliteReadWrite(StrictModel):
    tag: Literal["SqliteReadWrite"]
    path: ConfigPath


class SqliteNoVersioning(StrictModel):
    tag: Literal["SqliteNoVersioning"]
    path: ConfigPath


class SqliteVersioned(StrictModel):
    tag: Literal["SqliteVersioned"]
    shared: Literal["global", "conversation", "turn", "tool-call"]
    storage_root: ConfigPath | None = Field(default=None, alias="storageRoot")
    base_path: ConfigPath = Field(alias="basePath")


Versioning = Annotated[
    SqliteReadOnly | SqliteReadWrite | SqliteNoVersioning | SqliteVersioned, Field(discriminator="tag")
]


class SqliteContents(StrictModel):
    name: ToolboxName = Field(alias="Name")
    description: str = Field(alias="Description")
    versioning: Versioning = Field(alias="Versioning")


class SystemContents(StrictModel):
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


class DeveloperContents(StrictModel):
    name: ToolboxName = Field(alias="Name")
    description: str = Field(alias="Description")
    capabilities: Annotated[list[str], CapabilityList(DEVELOPER_CAPABILITIES)] = Field(alias="Capabilities")
    file_sandbox: FileSandbox | None = Field(default=None, alias="FileSandbox")


class LuaContents(StrictModel):
    name: ToolboxName = Field(alias="Name")
    description: str = Field(alias="Description")
    max_memory_mb: int = Field(gt=0, alias="MaxMemoryMB")
    max_execution_time_s: float = Field(gt=0, alias="MaxExecutionTimeSeconds")
    allowed_tools: list[str] = Field(alias="AllowedTools")
    allowed_hosts: list[Host] = Field(alias="AllowedHosts")
    file_sandbox: FileSandbox | None = Field(default=None, alias="FileSandbox")


class WasmContents(StrictModel):
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


class SqliteToolbox(StrictModel):
    tag: Literal["SqliteToolbox"]
    contents: SqliteContents


class SystemToolbox(StrictModel):
    tag: Literal["SystemToolbox"]
    contents: SystemContents


class DeveloperToolbox(StrictModel):
    tag: Literal["DeveloperToolbox"]
    contents: DeveloperContents


class LuaToolbox(StrictModel):
    tag: Literal["LuaToolbox"]
    contents: LuaContents


class WasmToolbox(StrictModel):
    tag: Literal["WasmToolbox"]
    contents: WasmContents


BuiltinToolbox = Annotated[
    SqliteToolbox | SystemToolbox | DeveloperToolbox | LuaToolbox | WasmToolbox, Field(discriminator="tag")
]
