"""The one place the Lua toolbox asks whether a path is inside its FileSandbox.

The check is ``sandbox._predicate_eval.check_path`` (canonicalise, evaluate the predicate, enforce
``fsbMaxFileSize``); this module only binds it to the toolbox's sandbox and to the folder relative paths start from
(``policy.base_dir``: the agent file's directory, which the supervisor passes).

This is the second fence: Landlock, applied by the launcher before any toolbox code runs, is the first.
"""

from __future__ import annotations

from dataclasses import dataclass

from sandbox._file_sandbox import FileSandbox
from sandbox._predicate_eval import check_path

__all__ = ["PathGate", "Verdict"]


@dataclass(frozen=True)
class Verdict:
    """``allowed``: go ahead on ``path`` (canonical). Otherwise ``message`` is the refusal an agent can act on."""

    allowed: bool
    path: str
    message: str = ""


class PathGate:
    """A toolbox's FileSandbox, bound to the folder relative paths start from."""

    def __init__(self, sandbox: FileSandbox, base_dir: str) -> None:
        self.sandbox = sandbox
        self.metadata_sandbox = FileSandbox(sandbox.predicate, None, sandbox.name)
        self.base_dir = base_dir

    def check(self, path: str, *, for_write: bool, size: int | None = None, limit_size: bool = True) -> Verdict:
        """May the script read (or write) ``path``? ``size`` is, for a write, the size the file will have;
        ``limit_size=False`` skips ``fsbMaxFileSize`` (for metadata: exists, isdir, list)."""
        checked = check_path(self.sandbox if limit_size else self.metadata_sandbox, path, for_write=for_write,
                             size=size, base_dir=self.base_dir)
        return Verdict(checked.allowed, checked.path, checked.message)
