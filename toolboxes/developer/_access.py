"""The one gate every Developer path goes through: the toolbox's ``FileSandbox`` (default ``AlwaysDeny``).

:class:`Gate` wraps ``sandbox._predicate_eval.check_path`` (canonical paths, ``..`` and symlinks judged by where
they lead, ``fsbMaxFileSize``, refusals that name the rule and never reveal a symlink's target). The kernel
(Landlock, compiled from the same predicate) is the fence that holds anyway.

Relative paths: resolved against ``base_dir`` (the directory of the agent file, the same base the predicate's own
``./src`` was resolved against) when the supervisor gives one; without it they are refused, because the worker's
current directory (its work folder) means nothing to an agent.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from sandbox._file_sandbox import FileSandbox, parse_file_sandbox
from sandbox._predicate_eval import check_path
from sandbox._predicates import PredicateError

__all__ = ["Access", "Gate"]


@dataclass(frozen=True)
class Access:
    """``allowed`` with the canonical ``path`` to open, or a ``message`` to return to the agent.

    On a refusal ``path`` is the path as the agent wrote it (for the result's ``resource_id``), never its
    canonical form.
    """

    allowed: bool
    path: str
    message: str = ""


class Gate:
    """A toolbox's FileSandbox, parsed once, and the base relative paths start from."""

    def __init__(self, sandbox: dict[str, Any] | None, base_dir: str | None = None) -> None:
        """``sandbox`` is the ``FileSandbox`` config (JSON form, paths absolute); ``None`` means ``AlwaysDeny``.

        Raises:
            ValueError: a malformed sandbox config, or a ``base_dir`` that is not absolute.
        """
        try:
            self.sandbox = FileSandbox() if sandbox is None else parse_file_sandbox(sandbox, "/")
        except PredicateError as exc:
            raise ValueError(f"FileSandbox: {exc}") from exc
        if base_dir is not None and not os.path.isabs(base_dir):
            raise ValueError(f"policy.base_dir must be an absolute path, got {base_dir!r}")
        self.base_dir = base_dir

    def check(self, path: Any, *, for_write: bool, size: int | None = None) -> Access:
        """May the toolbox read (or write, leaving ``size`` bytes) ``path``?"""
        shown = path if isinstance(path, str) else ""
        if isinstance(path, str) and path and not os.path.isabs(path) and self.base_dir is None:
            return Access(False, shown, f"refused: {path!r} is not an absolute path; give the full path")
        res = check_path(self.sandbox, path, for_write=for_write, size=size, base_dir=self.base_dir or "/")
        if not res.allowed:
            return Access(False, shown, res.message)
        return Access(True, res.path)
