"""What each toolbox entry of an agent file asks for, before names are settled and sandbox refs followed: its kind,
its written or derived name, its worker config, and the hosts and paths it needs granted (pure; the entries become
:class:`~._agent_toolboxes.ToolboxConfig` in :func:`~._agent_toolboxes.build_toolboxes`)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ._agent_builtins import (
    DeveloperToolbox,
    LuaToolbox,
    SqliteReadOnly,
    SqliteToolbox,
    SqliteVersioned,
    SystemToolbox,
    WasmToolbox,
)
from ._agent_servers import BashToolbox, SingleTool

if TYPE_CHECKING:
    from collections.abc import Sequence

    from toolboxes import ToolboxKind

    from ._agent_file import AgentDescription

__all__ = ["ToolboxEntry", "toolbox_entries"]


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
class ToolboxEntry:
    """What one entry of an agent file asks for: its kind, its name (written, or the one derived from it), its JSON
    path, its worker config, its file sandbox as written (a ref not followed yet) and what it needs granted."""

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


def _bash_entry(tb: BashToolbox, source: str) -> ToolboxEntry:
    path = tb.contents.path
    name = os.path.splitext(os.path.basename(path))[0] if isinstance(tb, SingleTool) else os.path.basename(path)
    return ToolboxEntry("bash", None, _sanitize(name or "bash"), source, {"tag": tb.tag, "Path": path}, read=(path,))


def _builtin_entry(tb: Any, source: str) -> ToolboxEntry:
    contents = tb.contents
    config = {"tag": tb.tag, **contents.model_dump(by_alias=True, mode="json", exclude={"file_sandbox"})}
    entry = ToolboxEntry("sqlite", contents.name, contents.name, source, config)
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


def toolbox_entries(agent: AgentDescription, prefix: str) -> list[ToolboxEntry]:
    """One entry per worker the agent asks for, in load order (``toolDirectory``, bash, skills, mcp, openapi,
    postgrest, builtins); ``prefix``: the JSON path of the agent in its file. Pure."""
    entries: list[ToolboxEntry] = []
    if agent.tool_directory is not None:
        entries.append(
            ToolboxEntry(
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
            ToolboxEntry(
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
            ToolboxEntry(
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
                ToolboxEntry(
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
