"""Finding skills under their source folders and loading each one: metadata, scripts (bash protocol), references.

A skill is a folder holding a ``SKILL.md``; sources are searched recursively (hidden folders such as ``.git`` are
skipped, symlinked folders are not followed, and the folders inside a skill are not searched for further skills).
Inside a skill:

- ``scripts/``: every executable regular file is asked ``describe`` like a bash tool and becomes the tool
  ``skill_<skill>_<slug>``; a script that fails is a load error and the skill loads without it;
- ``references/``: every regular file beneath it is listed (relative paths), for ``skill_describe_<skill>``.

A skill whose ``SKILL.md`` is invalid, or whose name another source already used, is left out with a load error.

A :class:`DescribeCache` keeps each script's ``describe`` result while the script's fingerprint is unchanged, so a
reload (the toolbox watches its sources) asks only new and changed scripts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..bash import DescribeError, ScriptRunner, ScriptSpec, list_scripts
from ._errors import FrontmatterError
from ._frontmatter import SkillMeta, parse_skill_md

if TYPE_CHECKING:
    from .._listing import Fingerprint

__all__ = ["MAX_SKILL_MD_BYTES", "DescribeCache", "Skill", "load_skills", "script_tool_name"]

MAX_SKILL_MD_BYTES = 1024 * 1024
MAX_REFERENCES = 1000


def script_tool_name(skill: str, slug: str) -> str:
    """``skill_<skill>_<slug>`` (dashes kept, as in the seed's ``skill_pdf-processing_extract-text``)."""
    return f"skill_{skill}_{slug}"


@dataclass(frozen=True)
class Skill:
    """A loaded skill. ``scripts`` maps tool names to ``(path, spec)``."""

    meta: SkillMeta
    path: str
    scripts: dict[str, tuple[str, ScriptSpec]] = field(default_factory=dict)
    references: tuple[str, ...] = ()


class DescribeCache:
    """``describe`` results by script path, reused while the script's fingerprint is unchanged. One load at a time
    (the toolbox serialises its reloads); each load keeps only the scripts it saw."""

    def __init__(self, runner: ScriptRunner) -> None:
        self._runner = runner
        self._entries: dict[str, tuple[Fingerprint, ScriptSpec | None, str]] = {}
        self._seen: dict[str, tuple[Fingerprint, ScriptSpec | None, str]] = {}

    def describe(self, path: str, fp: Fingerprint) -> ScriptSpec:
        """The script's spec; raises :class:`DescribeError` (again, from the cache) for a script that failed."""
        entry = self._entries.get(path)
        if entry is None or entry[0] != fp:
            try:
                entry = (fp, self._runner.describe(path), "")
            except DescribeError as exc:
                entry = (fp, None, str(exc))
        self._seen[path] = entry
        if entry[1] is None:
            raise DescribeError(entry[2])
        return entry[1]

    def finish(self) -> None:
        """End a load: forget the scripts it did not see (removed ones)."""
        self._entries, self._seen = self._seen, {}


def _find_skill_dirs(root: str) -> list[str]:
    found = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        if "SKILL.md" in filenames:
            found.append(dirpath)
            dirnames[:] = []
            continue
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
    return sorted(found)


def _references(skill_dir: str) -> tuple[str, ...]:
    base = os.path.join(skill_dir, "references")
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            if os.path.isfile(full) and not os.path.islink(full):
                out.append(os.path.relpath(full, skill_dir))
            if len(out) >= MAX_REFERENCES:
                return tuple(sorted(out))
    return tuple(sorted(out))


def _read_skill_md(path: str) -> str:
    with open(path, "rb") as f:
        raw = f.read(MAX_SKILL_MD_BYTES + 1)
    if len(raw) > MAX_SKILL_MD_BYTES:
        raise FrontmatterError(f"SKILL.md is larger than {MAX_SKILL_MD_BYTES} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FrontmatterError(f"SKILL.md is not UTF-8 (at byte {exc.start})") from exc


def load_skill(skill_dir: str, cache: DescribeCache, errors: list[dict[str, str]]) -> Skill | None:
    """Load one skill folder; problems are appended to ``errors`` (``None`` when the skill itself is unusable)."""
    md = os.path.join(skill_dir, "SKILL.md")
    try:
        meta = parse_skill_md(_read_skill_md(md))
    except FrontmatterError as exc:
        errors.append({"source": md, "message": str(exc)})
        return None
    except OSError as exc:
        errors.append({"source": md, "message": f"SKILL.md cannot be read: {exc.strerror}"})
        return None
    scripts: dict[str, tuple[str, ScriptSpec]] = {}
    scripts_dir = os.path.join(skill_dir, "scripts")
    if os.path.isdir(scripts_dir):
        listing = list_scripts(scripts_dir, single=False)
        errors.extend(listing.errors)
        for path, fp in listing.found.items():
            try:
                spec = cache.describe(path, fp)
            except DescribeError as exc:
                errors.append({"source": path, "message": str(exc)})
                continue
            name = script_tool_name(meta.name, spec.slug)
            if name in scripts:
                errors.append({"source": path, "message": f"slug {spec.slug!r} is already used by {scripts[name][0]}"})
                continue
            scripts[name] = (path, spec)
    return Skill(meta, skill_dir, scripts, _references(skill_dir))


def load_skills(
    roots: list[str], runner: ScriptRunner | DescribeCache
) -> tuple[dict[str, Skill], list[dict[str, str]]]:
    """Load every skill under ``roots`` (in order). Returns skills by name and the load errors. With a
    :class:`DescribeCache`, unchanged scripts since its previous load are not described again."""
    cache = runner if isinstance(runner, DescribeCache) else DescribeCache(runner)
    skills: dict[str, Skill] = {}
    errors: list[dict[str, str]] = []
    for root in roots:
        if not os.path.isdir(root):
            errors.append({"source": root, "message": "the skill source is not a readable folder"})
            continue
        for skill_dir in _find_skill_dirs(root):
            skill = load_skill(skill_dir, cache, errors)
            if skill is None:
                continue
            if skill.meta.name in skills:
                errors.append(
                    {
                        "source": skill_dir,
                        "message": f"skill name {skill.meta.name!r} is already used by {skills[skill.meta.name].path}",
                    }
                )
                continue
            skills[skill.meta.name] = skill
    cache.finish()
    return skills, errors
