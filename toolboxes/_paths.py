"""The one rule for paths in tool arguments, shared by every toolbox that takes a path (System, Developer, Lua ``fs``).

A path an agent names is resolved against the **agent file's folder** (``policy.base_dir``, which the supervisor
passes to every worker): the same base the FileSandbox predicates' own relative paths (``./src``) were resolved
against when the agent file was loaded, so ``{"path": "./src"}`` names the folder ``DirectoryRecursive ./src``
allows. An absolute path stays as it is. Never the worker's current directory (its work folder), which means
nothing to an agent. :func:`argument_path` is that rule; :class:`PathGate` applies it and then the FileSandbox
check (``sandbox._predicate_eval.check_path``: canonical paths, ``..`` and symlinks judged by where they lead,
``fsbMaxFileSize``).

Messages show the path as resolved (the agent file's folder joined with what the agent wrote, before any symlink is
followed: where a symlink leads is never revealed) and say where relative paths start.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sandbox import FileSandbox, PredicateError, check_path, lists_entries, parse_file_sandbox

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["PathAccess", "PathGate", "argument_path"]


def argument_path(path: str, base_dir: str) -> str:
    """The absolute path an argument names: ``path`` itself when absolute, else ``base_dir`` joined with it (``./``
    steps dropped, ``..`` kept: it is applied after symlinks when the path is canonicalised)."""
    if os.path.isabs(path):
        return path
    parts = [p for p in path.split("/") if p not in ("", ".")]
    return os.path.join(base_dir, *parts) if parts else base_dir


@dataclass(frozen=True)
class PathAccess:
    """``allowed``: go ahead on ``path`` (canonical). Otherwise ``message`` is the refusal an agent can act on and
    ``path`` the path as the agent wrote it (for a result's ``resource_id``), never its canonical form."""

    allowed: bool
    path: str
    message: str = ""


class PathGate:
    """A toolbox's FileSandbox, parsed once, bound to the folder relative paths start from."""

    def __init__(self, sandbox: FileSandbox | Mapping[str, Any] | None, base_dir: str | None) -> None:
        """``sandbox``: a parsed sandbox, or the ``FileSandbox`` config (JSON form, paths absolute); ``None`` means
        ``AlwaysDeny``. ``base_dir``: the agent file's folder (``None``: relative paths are refused).

        Raises:
            ValueError: a malformed sandbox config, or a ``base_dir`` that is not absolute.
        """
        try:
            if sandbox is None:
                sandbox = FileSandbox()
            elif not isinstance(sandbox, FileSandbox):
                sandbox = parse_file_sandbox(dict(sandbox), "/")
        except PredicateError as exc:
            raise ValueError(f"FileSandbox: {exc}") from exc
        if base_dir is not None and not os.path.isabs(base_dir):
            raise ValueError(f"policy.base_dir must be an absolute path, got {base_dir!r}")
        self.sandbox = sandbox
        self.metadata_sandbox = FileSandbox(sandbox.predicate, None, sandbox.name)
        self.base_dir = base_dir

    def resolve(self, path: str) -> str:
        """The path as resolved by the rule (for messages), or ``path`` when it cannot be resolved."""
        if self.base_dir is None or not isinstance(path, str):
            return path
        return argument_path(path, self.base_dir)

    def shown(self, path: str) -> str:
        """How a message names ``path``: quoted as written, plus where it resolved to when it was relative."""
        resolved = self.resolve(path)
        return repr(path) if resolved == path else f"{path!r} (resolved to {resolved})"

    def lists_all(self, directory: str) -> bool:
        """Whether a listing of ``directory`` (canonical, already allowed by :meth:`check`) shows every entry, not
        only those the predicate allows one by one (a ``DirectoryExactly`` of it: its entries' names are what it
        grants; ``sandbox._predicate_eval.lists_entries``). Listings of every toolbox follow this rule."""
        return lists_entries(self.sandbox.predicate, directory)

    def check(self, path: Any, *, for_write: bool, size: int | None = None, limit_size: bool = True) -> PathAccess:
        """May the toolbox read (or write, leaving ``size`` bytes) ``path``? ``limit_size=False`` skips
        ``fsbMaxFileSize`` (metadata: exists, is a directory, list)."""
        given = path if isinstance(path, str) else ""
        if isinstance(path, str) and path and "\x00" not in path and not os.path.isabs(path):
            if self.base_dir is None:
                return PathAccess(False, given, f"refused: {path!r} is not an absolute path; give the full path")
            path = argument_path(path, self.base_dir)
        res = check_path(
            self.sandbox if limit_size else self.metadata_sandbox,
            path,
            for_write=for_write,
            size=size,
            base_dir=self.base_dir or "/",
        )
        if res.allowed:
            return PathAccess(True, res.path)
        message = res.message
        if given and path != given:
            message += f" (Relative paths start at the agent file's folder, {self.base_dir}.)"
        return PathAccess(False, given, message)
