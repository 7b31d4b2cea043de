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
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ._agent_file import (
    AgentDescription,
    BashToolbox,
    DeveloperToolbox,
    FileSandboxConfig,
    FileSandboxRef,
    LuaToolbox,
    SingleTool,
    SqliteReadOnly,
    SqliteToolbox,
    SqliteVersioned,
    SystemToolbox,
    WasmToolbox,
)
from ._errors import ConfigError, ConfigProblem

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

    from sandbox import PathPredicate
    from toolboxes import ToolboxKind

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


def _sanitize(text: str) -> str:
    out = re.sub(r"[^A-Za-z0-9_-]", "_", text).strip("_") or "toolbox"
    return out[:64]


def _host_of(url: str) -> str | None:
    if "://" not in url:
        return None
    return urlsplit(url).hostname


def _dump(model: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = model.model_dump(by_alias=True, mode="json")
    return dumped


@dataclass
class _Entry:
    kind: ToolboxKind
    explicit: str | None
    derived: str
    source: str
    config: dict[str, Any]
    sandbox: Any = None
    sandbox_path: str = ""
    hosts: tuple[str, ...] = ()
    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    problem: str | None = None


def _unset_env_problem(names: Sequence[str]) -> str | None:
    """The load problem of a toolbox whose ``Token``/``Headers`` name variables that are not set."""
    if not names:
        return None
    listed = ", ".join(names)
    return (
        f"the environment variable{'s' if len(names) > 1 else ''} {listed} "
        f"{'are' if len(names) > 1 else 'is'} not set in the supervisor's environment (its Token or Headers use "
        f"${{{names[0]}}}). Set {'them' if len(names) > 1 else 'it'} where the supervisor starts and restart it, or "
        "define a policy credential of that name (docs/CREDENTIALS.md) and reload"
    )


def _bash_entry(tb: BashToolbox, source: str) -> _Entry:
    path = tb.contents.path
    name = os.path.splitext(os.path.basename(path))[0] if isinstance(tb, SingleTool) else os.path.basename(path)
    return _Entry("bash", None, _sanitize(name or "bash"), source, {"tag": tb.tag, "Path": path}, read=(path,))


def _builtin_entry(tb: Any, source: str) -> _Entry:
    contents = tb.contents
    config = {"tag": tb.tag, **contents.model_dump(by_alias=True, mode="json", exclude={"file_sandbox"})}
    entry = _Entry("sqlite", contents.name, contents.name, source, config)
    if isinstance(tb, SqliteToolbox):
        v = contents.versioning
        if isinstance(v, SqliteReadOnly):
            entry.read = (v.path,)
        elif isinstance(v, SqliteVersioned):
            entry.read = (v.base_path,)
            entry.write = (v.storage_root,) if v.storage_root else ()
        else:  # SQLite writes its journal beside the database
            entry.write = (os.path.dirname(v.path),)
        return entry
    entry.sandbox = contents.file_sandbox
    entry.sandbox_path = f"{source}.contents.FileSandbox"
    if isinstance(tb, SystemToolbox):
        entry.kind = "system"
        entry.read = (contents.command_filter,) if contents.command_filter else ()
    elif isinstance(tb, DeveloperToolbox):
        entry.kind = "developer"
    elif isinstance(tb, LuaToolbox):
        entry.kind = "lua"
        entry.hosts = tuple(contents.allowed_hosts)
    elif isinstance(tb, WasmToolbox):
        entry.kind = "wasm"
        entry.hosts = tuple(contents.allowed_hosts)
        entry.read = (contents.path,)
    return entry


def _entries(agent: AgentDescription, prefix: str) -> list[_Entry]:
    entries: list[_Entry] = []
    if agent.tool_directory is not None:
        entries.append(
            _Entry(
                "bash",
                None,
                _sanitize(os.path.basename(agent.tool_directory) or "bash"),
                f"{prefix}.toolDirectory",
                {"tag": "FileSystemDirectory", "Path": agent.tool_directory},
                read=(agent.tool_directory,),
            )
        )
    for i, bash in enumerate(agent.bash_toolboxes):
        entries.append(_bash_entry(bash, f"{prefix}.bashToolboxes[{i}]"))
    if agent.skill_sources:
        sources = [_dump(s) for s in agent.skill_sources]
        dirs = tuple(s.contents for s in agent.skill_sources if isinstance(s.contents, str))
        hosts = tuple(
            h for s in agent.skill_sources if not isinstance(s.contents, str) if (h := _host_of(s.contents.url))
        )
        entries.append(
            _Entry(
                "skills",
                None,
                "skills",
                f"{prefix}.skillSources",
                {"tag": "Skills", "Sources": sources, "AutoEnable": list(agent.auto_enable_skills)},
                hosts=hosts,
                read=dirs,
            )
        )
    for i, mcp in enumerate(agent.mcp_servers):
        c = mcp.contents
        source = f"{prefix}.mcpServers[{i}]"
        entries.append(
            _Entry(
                "mcp",
                c.name,
                c.name,
                source,
                # its executable and arguments: judged by the plan, which resolves them
                {"tag": mcp.tag, **c.model_dump(by_alias=True, mode="json", exclude={"file_sandbox"})},
                sandbox=c.file_sandbox,
                sandbox_path=f"{source}.contents.FileSandbox",
            )
        )
    http_kinds: tuple[tuple[ToolboxKind, Sequence[Any], str], ...] = (
        ("openapi", agent.open_api_toolboxes, "openApiToolboxes"),
        ("postgrest", agent.postgrest_toolboxes, "postgrestToolboxes"),
    )
    for kind, items, key in http_kinds:
        for i, tb in enumerate(items):
            c = tb.contents
            host = _host_of(c.base_url) or kind
            hosts = tuple(dict.fromkeys(h for h in (_host_of(c.base_url), _host_of(c.spec_url)) if h))
            explicit = getattr(c, "name", None)
            spec_file = () if _host_of(c.spec_url) else (c.spec_url,)
            entries.append(
                _Entry(
                    kind,
                    explicit,
                    explicit or _sanitize(host),
                    f"{prefix}.{key}[{i}]",
                    {"tag": tb.tag, **_dump(c)},
                    hosts=hosts,
                    read=spec_file,
                    problem=_unset_env_problem(getattr(c, "unset_env", ())),
                )
            )
    for i, tb in enumerate(agent.builtin_toolboxes):
        entries.append(_builtin_entry(tb, f"{prefix}.builtinToolboxes[{i}]"))
    return entries


def _assign_names(entries: list[_Entry], file: str) -> list[str]:
    """Names in entry order: explicit ones must be unique, derived ones avoid every other name."""
    problems: list[ConfigProblem] = []
    owner: dict[str, _Entry] = {}
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


def _resolve_sandbox(agent: AgentDescription, e: _Entry, file: str) -> FileSandboxConfig | None:
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
    entries = _entries(agent, prefix)
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
