"""Agent files (and the policy file) a worker can write: found from the compiled write rules (pure).

The policy and the agent files are the trusted side's input; a worker that can rewrite one (it lies in its own
writable FileSandbox or work folder, or in another worker's) can give an agent, at the next start, anything the
policy allows: a worker rewrote its own agent file and gained ``hostname``. The compiled plans say exactly what each
worker may write (its Landlock write rules, which over-approximate an inexact FileSandbox, so this errs towards
finding a writer): a file beneath a write rule is writable (a rule on a folder reaches everything under it, so
replacing the file by rename is covered too). What is done with it is the compile's: a strict policy refuses every
toolbox of an agent whose file a worker can write, and refuses to start when a worker can write the policy itself;
a permissive one warns (``check`` shows either).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandbox import WRITE

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from supervisor.workers import WorkerSpec

__all__ = ["Writer", "file_writers", "writers_text"]


@dataclass(frozen=True)
class Writer:
    """A worker that can write a file: its agent and toolbox, and the write rule that reaches the file."""

    agent: str
    toolbox: str
    rule: str


def _beneath(path: str, rule: str) -> bool:
    return path == rule or path.startswith(rule.rstrip("/") + "/")


def file_writers(files: Mapping[str, str], specs: Sequence[WorkerSpec]) -> dict[str, list[Writer]]:
    """For each of ``files`` (any key -> canonical path) that some worker of ``specs`` can write, the workers that
    can (keys of files no worker can write are left out)."""
    out: dict[str, list[Writer]] = {}
    for key, path in files.items():
        found = [
            Writer(spec.agent, spec.toolbox, rule.path)
            for spec in specs
            for rule in spec.plan.fs_rules
            if rule.mode == WRITE and _beneath(path, rule.path)
        ]
        if found:
            out[key] = found
    return out


def writers_text(path: str, writers: Sequence[Writer], what: str = "agent file") -> str:
    """``the agent file P can be written by the worker of a/b (its rule R), ...: why it matters``."""
    who = ", ".join(f"{w.agent}/{w.toolbox} (its write rule {w.rule})" for w in writers)
    return (
        f"the {what} {path} can be written by the worker of {who}: a worker that can rewrite it can grant, at the "
        f"next start, anything the policy allows (capabilities, hosts, paths). Move the {what} out of every "
        "worker's writable trees (FileSandbox, work folders), or narrow those FileSandboxes"
    )
