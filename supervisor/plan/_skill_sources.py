"""Git skill sources (``SkillGitRepo {url, subdir}``) planned: where each clone lives (pure).

The skills worker loads only local folders. At compile time :func:`plan_git_sources` rewrites each ``SkillGitRepo``
of a skills toolbox into a ``SkillDirectory`` naming where its clone lives,
``<state_dir>/skills-git/<sha256 of the URL, 16 hex>[/subdir]``, and the plan grants the worker read access there
(one clone per URL, shared by every toolbox that names it). The clones are made at supervisor start, before any
worker, by ``_skill_clones.py``; a source whose clone fails is dropped from its worker's config
(:func:`drop_git_sources`) and is a load error.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

__all__ = ["CLONES_DIR", "CLONE_TIMEOUT_S", "GitSource", "clone_target", "drop_git_sources", "plan_git_sources"]

#: Wall time of one clone.
CLONE_TIMEOUT_S = 300.0
#: Folder beneath the state directory that holds the clones.
CLONES_DIR = "skills-git"


@dataclass(frozen=True)
class GitSource:
    """One ``SkillGitRepo`` of a skills toolbox and where its clone lives."""

    toolbox: str
    agent: str
    index: int
    url: str
    subdir: str | None
    target: str

    @property
    def skill_dir(self) -> str:
        """The folder handed to the worker as a ``SkillDirectory``."""
        return os.path.join(self.target, self.subdir) if self.subdir else self.target

    @property
    def source(self) -> str:
        """The source's place in the agent file, for messages."""
        return f"skillSources[{self.index}]"

    @property
    def host(self) -> str | None:
        """The host a remote URL names; ``None`` for ``file://``."""
        parts = urlsplit(self.url)
        return parts.hostname if parts.scheme in ("http", "https") else None


def clone_target(state_dir: str, url: str) -> str:
    """Where the clone of ``url`` lives (one clone per URL, shared by every toolbox that names it)."""
    return os.path.join(state_dir, CLONES_DIR, hashlib.sha256(url.encode()).hexdigest()[:16])


def plan_git_sources(
    cfg: dict[str, Any], *, state_dir: str, toolbox: str, agent: str
) -> tuple[dict[str, Any], list[GitSource]]:
    """Rewrite the ``SkillGitRepo`` entries of a skills worker config into ``SkillDirectory`` ones (pure).

    ``cfg`` is the worker config of a skills toolbox (``{"skillSources": [...], ...}``). Returns the new config
    and the git sources found, in order.
    """
    sources: list[GitSource] = []
    rewritten: list[Any] = []
    for i, entry in enumerate(cfg.get("skillSources") or []):
        contents = entry.get("contents") if isinstance(entry, dict) else None
        if isinstance(entry, dict) and entry.get("tag") == "SkillGitRepo" and isinstance(contents, dict):
            url = str(contents.get("url"))
            subdir = contents.get("subdir") or None
            git = GitSource(toolbox, agent, i, url, subdir, clone_target(state_dir, url))
            sources.append(git)
            rewritten.append({"tag": "SkillDirectory", "contents": git.skill_dir})
        else:
            rewritten.append(entry)
    return {**cfg, "skillSources": rewritten}, sources


def drop_git_sources(payload: dict[str, Any], failed: list[GitSource]) -> dict[str, Any]:
    """The skills worker payload without the sources whose clone failed (pure)."""
    gone = {g.skill_dir for g in failed}
    config = dict(payload.get("config") or {})
    config["skillSources"] = [
        s
        for s in config.get("skillSources") or []
        if not (isinstance(s, dict) and s.get("tag") == "SkillDirectory" and s.get("contents") in gone)
    ]
    return {**payload, "config": config}
