"""An MCP server's arguments that name paths: judged, never granted (the policy is the ceiling of what an agent file
reads).

``"args": ["/srv/project"]`` used to grant its path read-only to the server, resolved by ``os.path.realpath`` as
root: an agent file could grant itself any path of the host that way, and a link planted on the way chose the grant.
Now an argument grants nothing by itself. An absolute argument that names something existing is resolved the way
every path an agent file names is (``sandbox._path_walk.resolve_named_path``: through directory fds, following a
link only when root or the agent file's owner made it, in a folder only they can change; another link is this
toolbox's load error) and must lie within what the server reads anyway: the policy's ``system_paths``, its own
package, the policy's ``toolboxes.<agent>/<name>.read_paths``, or the entry's ``FileSandbox``
(:func:`paths_outside`, checked once the worker's rules are known). The server is given the path the walk reached
when links were followed on the way (what its rules show), else the argument as written.

A relative argument, an option with a path inside (``--root=/x``) or a path that does not exist is passed as it is
and is judged by nothing: it grants nothing either.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sandbox import resolve_named_path
from supervisor.config import path_within

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterable, Sequence

    from sandbox import FsRule

__all__ = ["NamedPath", "ServerArgs", "canonical_rule_path", "outside_message", "paths_outside", "plan_server_args"]


@dataclass(frozen=True)
class NamedPath:
    """A path an agent file names that must lie within the worker's other rules."""

    #: where it leads (canonical)
    path: str
    #: how the agent file said it, for messages (``argument '/srv/x'``)
    said: str


@dataclass(frozen=True)
class ServerArgs:
    """The arguments the worker passes to its server, and the paths among them to be covered."""

    args: list[Any]
    named: tuple[NamedPath, ...]


def plan_server_args(args: Sequence[Any], trusted: Collection[int] | None) -> ServerArgs:
    """Resolve the absolute arguments of ``args`` that name existing paths (module docstring); ``trusted``: the uids
    whose links are followed (root and the agent file's owner; ``None``: every link, a supervisor that is not root).

    Raises:
        UnsafeTreeError: a link on the way of an argument that ``trusted`` does not cover (this toolbox's load
            error: the message names the link and what to do).
        OSError: too many links on the way.
    """
    out: list[Any] = list(args)
    named: list[NamedPath] = []
    for i, arg in enumerate(args):
        if not (isinstance(arg, str) and arg.startswith("/")):
            continue
        resolved = resolve_named_path(arg, trusted)
        if not resolved.exists:
            continue
        if resolved.links:
            out[i] = resolved.canonical
        named.append(NamedPath(resolved.canonical, f"argument {arg!r}"))
    return ServerArgs(out, tuple(named))


def canonical_rule_path(path: str, *, root: bool | None = None) -> str:
    """Where a rule path of the policy or the plan leads, following root's links only (as the launcher does; every
    link when the supervisor is not root; ``root``: whether it is, default as this process is); the path as written
    when it cannot be walked (a link of another owner, a loop). ``os.path.realpath`` is never asked: a path is never
    resolved as root through a link not root's."""
    root = os.geteuid() == 0 if root is None else root
    try:
        return resolve_named_path(path, {0} if root else None).canonical
    except OSError:
        return path


def paths_outside(
    named: Iterable[NamedPath], rules: Sequence[FsRule], canonical: Callable[[str], str] = os.path.normpath
) -> list[NamedPath]:
    """The paths of ``named`` that no rule of ``rules`` covers (a rule covers its path and everything beneath it).
    ``canonical`` gives a rule path's canonical form, asked only for a path the rules as written do not cover (a
    system path such as ``/lib`` may be a link)."""
    out: list[NamedPath] = []
    seen: dict[str, str] = {}
    for item in named:
        if any(path_within(item.path, r.path) for r in rules):
            continue
        for r in rules:
            if r.path not in seen:
                seen[r.path] = canonical(r.path)
        if not any(path_within(item.path, top) for top in seen.values()):
            out.append(item)
    return out


def outside_message(outside: Sequence[NamedPath], *, toolbox: str, agent: str, source: str) -> str:
    """Why ``outside`` (of the MCP server ``toolbox`` of ``agent``, at JSON path ``source``) are refused, naming
    the keys that grant them."""
    said = ", ".join(f"{o.said} ({o.path})" if o.said != f"argument {o.path!r}" else o.said for o in outside)
    return (
        f"toolbox {toolbox} (agent {agent}): its MCP server's {said} names a path the server may not read: an "
        "argument grants nothing by itself (the policy is the ceiling of what an agent file reads). Cover it with "
        f"the entry's FileSandbox ({source}.contents.FileSandbox, read-only, e.g. "
        '{"fsbPredicate": {"tag": "DirectoryRecursive", "contents": "<the folder>"}}) or the policy\'s '
        f"toolboxes.{agent}/{toolbox}.read_paths, and restart"
    )
