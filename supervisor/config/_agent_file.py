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

This module holds the file's top level (:class:`AgentDescription`), its skill sources and sub-agents; the toolbox
entries are :mod:`._agent_servers` (bash, MCP, OpenAPI, PostgREST) and :mod:`._agent_builtins` (SQLite, System,
Developer, Lua, WASM), file sandboxes :mod:`._agent_sandboxes`.
"""

from __future__ import annotations

import typing
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, Field, Tag

from ._agent_builtins import BuiltinToolbox
from ._agent_sandboxes import FileSandboxConfig
from ._agent_servers import BashToolbox, McpSimpleBinary, OpenAPIServer, PostgRESTServer
from ._model import StrictModel
from ._types import ConfigPath, GitUrl, SkillName, ToolboxName, check_subdir, validation_context

__all__ = ["TAGS", "AgentDescription", "validation_context"]


# ---------------------------------------------------------------------------------------------- skills, agent
class SkillDirectory(StrictModel):
    tag: Literal["SkillDirectory"]
    contents: ConfigPath


class GitRepoContents(StrictModel):
    url: GitUrl
    subdir: Annotated[str, AfterValidator(check_subdir)] | None = None


class SkillGitRepo(StrictModel):
    tag: Literal["SkillGitRepo"]
    contents: GitRepoContents


SkillSource = Annotated[SkillDirectory | SkillGitRepo, Field(discriminator="tag")]


class ExtraAgent(StrictModel):
    slug: ToolboxName
    path: ConfigPath


class AgentDescription(StrictModel):
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
