"""The per-worker toolbox configs of a loaded agent: what the rest of the supervisor uses.

:func:`supervisor.config._loader.load_agent_file` validates an agent file and returns a :class:`LoadedAgent`
(built here by :func:`build_toolboxes`, a pure function); its :meth:`LoadedAgent.toolboxes` gives one
:class:`ToolboxConfig` per worker:

- bash: one per ``bashToolboxes`` entry, and ``toolDirectory`` as a ``FileSystemDirectory`` one;
- skills: one per agent when it has ``skillSources``;
- mcp, openapi, postgrest: one per entry; sqlite, system, developer, lua, wasm: one per ``builtinToolboxes`` entry.

Names: a toolbox's ``name`` is the one used in its tool names (SPEC.md section 2) and the key of policy
overrides. Explicit names (``Name``, MCP ``name``) must be unique within the agent: a clash is an error.
Derived names (bash: the directory's name or the script's stem; skills: ``skills``; OpenAPI and PostgREST
without ``Name``: the BaseUrl host with non-name characters as ``_``) never clash with explicit ones: they get
``_2``, ``_3`` in load order.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._agent_sandboxes import FileSandboxConfig, FileSandboxRef
from ._errors import ConfigError, ConfigProblem
from ._toolbox_entries import ToolboxEntry, toolbox_entries

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

    from sandbox import PathPredicate
    from toolboxes import ToolboxKind

    from ._agent_file import AgentDescription

__all__ = ["LoadedAgent", "ToolboxConfig", "build_toolboxes"]


@dataclass(frozen=True)
class ToolboxConfig:
    """What one worker runs: a toolbox of one agent, with every path resolved and every ref followed.

    Attributes:
        kind: the toolbox module (``toolboxes.<kind>``).
        name: unique within the agent; used in tool names and as the key of per-toolbox policy overrides.
        agent_slug: the agent it belongs to.
        file_sandbox: the resolved ``FileSandboxConfig`` (parsed predicate), or ``None`` when it has none.
        allowed_hosts: hosts the agent file grants it (Lua ``AllowedHosts``; OpenAPI/PostgREST BaseUrl and
            SpecUrl hosts; skills: the hosts of git sources); the policy may add more.
        read_paths / write_paths: paths from the agent file the worker needs to read / write to do its job
            (bash directories and scripts, databases, skill directories, command filters), besides its
            FileSandbox.
        agent_file: the agent file it came from; source: its JSON path there (for messages).
        load_problem: why it cannot load, found when the agent file loaded (an OpenAPI ``Token`` or ``Headers``
            value names a ``${VAR}`` that is not set); ``None``: nothing. Such a toolbox gets no worker: the
            plan makes this its load error, and every other toolbox loads.
        agent_owner: the uid that owns the agent file (``None``: not known, the file was not read from disk): with
            root, the only ones whose symbolic links the supervisor follows in a path the file names.
    """

    kind: ToolboxKind
    name: str
    agent_slug: str
    file_sandbox: FileSandboxConfig | None
    allowed_hosts: tuple[str, ...]
    read_paths: tuple[str, ...]
    write_paths: tuple[str, ...]
    agent_file: str
    source: str
    _config: Mapping[str, Any] = field(repr=False, compare=False, default_factory=dict)
    load_problem: str | None = None
    agent_owner: int | None = None

    @property
    def predicate(self) -> PathPredicate | None:
        """The FileSandbox predicate, or ``None``."""
        return None if self.file_sandbox is None else self.file_sandbox.predicate

    def worker_config(self) -> dict[str, Any]:
        """The toolbox's config for its worker: JSON data with the seed's keys (``tag`` + the entry's contents).

        Paths are resolved, ``${VAR}`` expanded, a ``FileSandbox`` ref replaced by the sandbox it names,
        predicates in their JSON form. bash: ``{"tag": "FileSystemDirectory"|"SingleTool", "Path"}``; skills:
        ``{"tag": "Skills", "Sources": [seed skill sources], "AutoEnable": [...]}``; mcp: ``{"tag":
        "McpSimpleBinary", "name", "executable", "args"}``; the others as in the seed. A fresh copy on each call.
        """
        return copy.deepcopy(dict(self._config))


@dataclass(frozen=True)
class LoadedAgent:
    """A validated agent file. ``warnings`` are things the loader ignored (such as ``allowedPaths``)."""

    file: str
    description: AgentDescription
    prefix: str
    warnings: tuple[str, ...]
    _toolboxes: tuple[ToolboxConfig, ...] = field(repr=False, compare=False, default=())
    #: paths of the file kept as written because a link on their way is not followed (path -> why): the toolbox
    #: or sub-agent naming one does not load
    refused_paths: Mapping[str, str] = field(default_factory=dict, compare=False)
    #: the uid owning the file (``None``: not read from disk): with root, whose links its paths may follow
    owner: int | None = None
    #: device and inode of the file read (``fstat`` of the descriptor its text came from; ``None``: not from disk)
    device: int | None = field(default=None, compare=False)
    inode: int | None = field(default=None, compare=False)
    #: the path the policy or the command line named it by, absolute (``None``: by ``file``)
    named: str | None = field(default=None, compare=False)
    #: the Kubernetes volume folder it belongs to (``_volume_folders``; ``None``: the folder of ``file``)
    folder: str | None = field(default=None, compare=False)

    @property
    def slug(self) -> str:
        return self.description.slug

    def toolboxes(self) -> list[ToolboxConfig]:
        """One entry per worker, in load order (bash, skills, mcp, openapi, postgrest, builtins)."""
        return list(self._toolboxes)


def _assign_names(entries: list[ToolboxEntry], file: str) -> list[str]:
    """Names in entry order: explicit ones must be unique, derived ones avoid every other name."""
    problems: list[ConfigProblem] = []
    owner: dict[str, ToolboxEntry] = {}
    for e in entries:
        if e.explicit is None:
            continue
        if e.explicit in owner:
            first = owner[e.explicit]
            problems.append(
                ConfigProblem(
                    file,
                    e.source,
                    f"duplicate toolbox name {e.explicit!r} (also the {first.kind} toolbox at {first.source})",
                    "a name unique within the agent",
                )
            )
        else:
            owner[e.explicit] = e
    if problems:
        raise ConfigError(problems)
    taken = set(owner)
    names: list[str] = []
    for e in entries:
        if e.explicit is not None:
            names.append(e.explicit)
            continue
        name, n = e.derived, 1
        while name in taken:
            n += 1
            name = f"{e.derived}_{n}"
        taken.add(name)
        names.append(name)
    return names


def _resolve_sandbox(agent: AgentDescription, e: ToolboxEntry, file: str) -> FileSandboxConfig | None:
    if e.sandbox is None or isinstance(e.sandbox, FileSandboxConfig):
        return e.sandbox
    assert isinstance(e.sandbox, FileSandboxRef)
    found = agent.file_sandboxes.get(e.sandbox.ref)
    if found is None:
        known = ", ".join(sorted(agent.file_sandboxes))
        raise ConfigError.one(
            file,
            f"{e.sandbox_path}.ref",
            f"unknown file sandbox {e.sandbox.ref!r}",
            f"one of {known} (the keys of fileSandboxes)"
            if known
            else "a key of fileSandboxes (this agent defines none)",
        )
    # An entry without fsbName is named by its key, so refusals name the sandbox the agent file calls it by.
    return found if found.name is not None else found.model_copy(update={"name": e.sandbox.ref})


def _strings(value: Any) -> Iterator[str]:
    """Every string in a JSON value (the paths of a worker config among them)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _refused_problem(config: Mapping[str, Any], paths: Sequence[str], refused: Mapping[str, str]) -> str | None:
    """Why a toolbox whose config or grants name a path in ``refused`` (kept as written: a link on its way the
    supervisor does not follow, ``_types.py``) does not load; ``None``: it names none."""
    hit = next((p for p in (*paths, *_strings(config)) if p in refused), None)
    if hit is None:
        return None
    return f"a path its agent file names is not resolved: {refused[hit]}"


def build_toolboxes(
    agent: AgentDescription,
    file: str,
    prefix: str = "$",
    *,
    owner: int | None = None,
    refused: Mapping[str, str] | None = None,
) -> tuple[ToolboxConfig, ...]:
    """The agent's worker configs (pure: no file access); ``owner``: the uid owning the agent file; ``refused``: the
    paths validation kept as written because a link on their way is not followed (path -> why): a toolbox naming
    one gets that as its load problem. Raises ``ConfigError`` on name clashes, bad refs."""
    entries = toolbox_entries(agent, prefix)
    names = _assign_names(entries, file)
    out: list[ToolboxConfig] = []
    for e, name in zip(entries, names, strict=True):
        sandbox = _resolve_sandbox(agent, e, file)
        config = dict(e.config)
        if sandbox is not None:
            config["FileSandbox"] = sandbox.to_json()
        if refused:
            e.problem = e.problem or _refused_problem(config, (*e.read, *e.write), refused)
        out.append(
            ToolboxConfig(
                e.kind,
                name,
                agent.slug,
                sandbox,
                e.hosts,
                e.read,
                e.write,
                file,
                e.source,
                config,
                e.problem,
                agent_owner=owner,
            )
        )
    return tuple(out)
