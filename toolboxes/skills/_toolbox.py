"""The skills toolbox: ``skillSources`` (already local folders) and ``autoEnableSkills``.

Tools: ``skill_list`` (the seed's ``listTool`` of ``computeSkillTools``: every loaded skill with its description,
its script tools and whether it is enabled in the caller's session; always listed, annotations
``{"skill_action": "list"}``), then for each skill ``s``:

- ``skill_describe_<s>``: metadata, instructions, script tools, references, and whether ``s`` is enabled in the
  caller's session (always listed);
- ``skill_enable_<s>`` / ``skill_disable_<s>``: turn the skill on or off in the caller's session (always listed;
  annotations ``{"skill": s, "skill_action": "enable"|"disable"}``);
- ``skill_<s>_<script>``: one per script of the skill, listed with annotations
  ``{"session_scoped": True, "skill": s}``: it exists only in sessions where ``s`` is enabled. The supervisor shows it
  to those sessions only; this toolbox enforces it anyway and refuses a call from a session where ``s`` is not
  enabled, telling the caller to call ``skill_enable_<s>``.

Which skills a session enabled is not kept here: the supervisor keeps it in its session store and sends the list
with every call (``ctx.extra["enabled_skills"]``); a call without it (this toolbox used in process, no supervisor)
has the ``autoEnableSkills``. Enable and disable answer ``{"skill", "enabled", "changed", "tools"}``, ``changed``
judged against the list the call came with; the supervisor records the new state from that answer. So a worker that
restarts loses nothing.

``SkillGitRepo`` sources are cloned by the supervisor, which hands the worker a ``SkillDirectory`` instead; one that
reaches the worker is a load error.

Watching: every ``watch_interval_s`` (the bash toolbox's policy key) the sources' trees are compared with the last
load (:func:`toolboxes._watch.snapshot_tree`); on any difference the skills are loaded again (only new and changed
scripts are described); the supervisor forgets a skill that is gone in every session. When the tools or the load
errors change, ``env.channel.tools_changed()`` is called.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._hints import READ_ONLY
from .._reaper import Reaper
from .._result import ToolResult
from .._toolbox import CallContext, HostChannel, ToolSpec, WorkerEnv
from .._watch import Watcher, snapshot_tree
from ..bash import BashSettings, ScriptRunner, input_schema
from ._errors import ConfigError
from ._frontmatter import valid_skill_name
from ._resources import read_skill_file, skill_resources
from ._store import DescribeCache, Skill, load_skills

if TYPE_CHECKING:
    from collections.abc import Iterable

    from .._listing import Fingerprint

__all__ = ["SkillsToolbox", "open_toolbox"]

_EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


@dataclass(frozen=True)
class _Loaded:
    """One load of the sources: swapped whole, so a call sees one consistent set of skills."""

    skills: dict[str, Skill]
    index: dict[str, tuple[str, str]]  # tool name -> (kind, skill name)
    tools: list[ToolSpec]
    errors: list[dict[str, str]]


class SkillsToolbox:
    """Skills loaded at start and, with a ``watch_interval_s``, reloaded when a source changes. Thread-safe: calls
    run concurrently with each other and with reloads.

    Args:
        roots: skill source folders (absolute).
        auto_enable: skills enabled in every new session (a name not loaded is a load error, and is enabled in the
            sessions that start once it is).
        runner: describes and runs the skills' scripts; owned (closed by :meth:`close`).
        source_errors: problems found in the config (kept as load errors).
        channel: told when the tool list or the load errors change; ``None`` to tell no one.
        watch_interval_s: how often to look for changes under the roots; 0 for never (call :meth:`refresh`).
    """

    def __init__(
        self,
        roots: list[str],
        auto_enable: list[str],
        runner: ScriptRunner,
        source_errors: list[dict[str, str]] | None = None,
        channel: HostChannel | None = None,
        watch_interval_s: float = 0.0,
    ) -> None:
        self._roots = list(roots)
        self._auto = list(auto_enable)
        self._runner = runner
        self._source_errors = list(source_errors or [])
        self._channel = channel
        self._cache = DescribeCache(runner)
        self._lock = threading.Lock()  # guards _loaded and _watch_errors
        self._refresh_lock = threading.Lock()  # one reload at a time
        self._snapshot: dict[str, Fingerprint] | None = None
        self._loaded = _Loaded({}, {}, [], [])
        self._watch_errors: list[dict[str, str]] = []
        self.refresh()
        self._watcher: Watcher | None = None
        if watch_interval_s > 0:
            self._watcher = Watcher(
                self._check, watch_interval_s, self._watch_failed, name=f"skills-watch {len(self._roots)} sources"
            )
            self._watcher.start()

    # -- loading -------------------------------------------------------------------------------------------
    def refresh(self) -> bool:
        """Reload the skills if anything under the roots changed since the last load (describing only new and
        changed scripts); skills that are gone are forgotten by every session. Returns whether the tools or the
        load errors changed."""
        with self._refresh_lock:
            snapshot = snapshot_tree(self._roots)  # taken first: a change made while loading is seen next time
            if snapshot == self._snapshot:
                return False
            skills, errors = load_skills(self._roots, self._cache)
            errors = self._source_errors + errors
            for name in self._auto:
                if name not in skills:
                    errors.append(
                        {
                            "source": "autoEnableSkills",
                            "message": f"autoEnableSkills names {name!r}, which is not a loaded skill",
                        }
                    )
            loaded = _Loaded(skills, _index(skills), _tools(skills), errors)
            with self._lock:
                old = self._loaded
                self._loaded = loaded
                self._snapshot = snapshot
                self._watch_errors = []
            return (
                loaded.tools != old.tools
                or loaded.errors != old.errors
                or skill_resources(loaded.skills) != skill_resources(old.skills)
            )

    def _check(self) -> None:
        if self.refresh() and self._channel is not None:
            self._channel.tools_changed()

    def _watch_failed(self, exc: BaseException) -> None:
        with self._lock:
            self._watch_errors = [{"source": "skillSources", "message": f"watching failed: {exc!r}"}]

    # -- Toolbox interface ---------------------------------------------------------------------------------
    def tools(self) -> list[ToolSpec]:
        """Meta tools of every skill, then every script tool (session-scoped), skills in name order."""
        with self._lock:
            return list(self._loaded.tools)

    def enabled(self, ctx: CallContext) -> frozenset[str]:
        """The skills enabled in the calling session: the list the supervisor sent, else ``autoEnableSkills``."""
        sent = ctx.extra.get("enabled_skills")
        if isinstance(sent, list):
            return frozenset(s for s in sent if isinstance(s, str))
        return frozenset(self._auto)

    def tools_for(self, enabled: Iterable[str]) -> list[ToolSpec]:
        """The tools a session with the skills ``enabled`` sees: the meta tools and those skills' script tools."""
        enabled = frozenset(enabled)
        return [t for t in self.tools() if not t.annotations.get("session_scoped") or t.annotations["skill"] in enabled]

    def load_errors(self) -> list[dict[str, str]]:
        with self._lock:
            return [dict(e) for e in self._loaded.errors + self._watch_errors]

    def call(self, tool: str, args: dict[str, Any], ctx: CallContext) -> ToolResult:
        """Run a meta tool or a script tool (refused unless its skill is enabled in ``ctx.session_id``)."""
        with self._lock:
            loaded = self._loaded
        entry = loaded.index.get(tool)
        if entry is None:
            return ToolResult.error(f"no tool {tool!r} in this skills toolbox (its skill may have been removed)")
        kind, name = entry
        if kind == "list":
            return self._list(loaded.skills, ctx)
        skill = loaded.skills[name]
        if kind == "describe":
            return self._describe(skill, ctx)
        if kind in ("enable", "disable"):
            on = kind == "enable"
            changed = (name in self.enabled(ctx)) != on
            tools = sorted(skill.scripts)
            if on:
                text = (
                    f"Skill {name} is enabled in this session."
                    + (f" Its tools: {', '.join(tools)}." if tools else " It has no script tools.")
                    + f"\n\n{skill.meta.instructions}"
                )
            else:
                text = f"Skill {name} is disabled in this session."
            result = ToolResult.passed(
                text, structured={"skill": name, "enabled": on, "changed": changed, "tools": tools}
            )
            return result.with_meta("state_effect", "mutate").with_meta("resource_id", f"skill-session:{name}")
        if name not in self.enabled(ctx):
            return ToolResult.error(
                f"{tool} belongs to the skill {name}, which is not enabled in this session; "
                f"call skill_enable_{name} first"
            )
        path, spec = skill.scripts[tool]
        return self._runner.run(tool, path, spec, args, ctx)

    def _list(self, skills: dict[str, Skill], ctx: CallContext) -> ToolResult:
        enabled = self.enabled(ctx)
        value = {
            "skills": [
                {
                    "name": name,
                    "description": skills[name].meta.description,
                    "enabled": name in enabled,
                    "tools": sorted(skills[name].scripts),
                }
                for name in sorted(skills)
            ]
        }
        return ToolResult.json(value).with_meta("state_effect", "read").with_meta("resource_id", "skills")

    def _describe(self, skill: Skill, ctx: CallContext) -> ToolResult:
        meta = skill.meta
        value = {
            "name": meta.name,
            "description": meta.description,
            "license": meta.license,
            "compatibility": meta.compatibility,
            "metadata": meta.metadata,
            "path": skill.path,
            "enabled": meta.name in self.enabled(ctx),
            "instructions": meta.instructions,
            "scripts": [
                {"tool": tool, "description": spec.description, "input_schema": input_schema(spec)}
                for tool, (_path, spec) in skill.scripts.items()
            ],
            "references": list(skill.references),
        }
        return ToolResult.json(value).with_meta("state_effect", "read").with_meta("resource_id", f"skill:{meta.name}")

    def resources(self) -> list[dict[str, Any]]:
        """Every skill's SKILL.md and references (``toolboxes/skills/_resources.py``)."""
        with self._lock:
            skills = self._loaded.skills
        return skill_resources(skills)

    def read_resource(self, uri: str, ctx: CallContext) -> ToolResult:
        with self._lock:
            skills = self._loaded.skills
        return read_skill_file(skills, uri)

    def close(self) -> None:
        """Stop watching and kill every script still running. Safe to call twice."""
        if self._watcher is not None:
            self._watcher.stop()
        self._runner.close()


#: The seed's ``listTool``: always listed, even with no skill loaded.
LIST_TOOL = "skill_list"


def _index(skills: dict[str, Skill]) -> dict[str, tuple[str, str]]:
    index: dict[str, tuple[str, str]] = {LIST_TOOL: ("list", "")}
    for name, skill in skills.items():
        index[f"skill_describe_{name}"] = ("describe", name)
        index[f"skill_enable_{name}"] = ("enable", name)
        index[f"skill_disable_{name}"] = ("disable", name)
        for tool in skill.scripts:
            index[tool] = ("script", name)
    return index


#: Enabling or disabling a skill changes only the session's tool list, the same way each time.
_SESSION_SWITCH = {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": True}


def _tools(skills: dict[str, Skill]) -> list[ToolSpec]:
    """The list tool, meta tools of every skill, then every script tool (session-scoped), skills in name order."""
    out: list[ToolSpec] = [
        ToolSpec(
            LIST_TOOL,
            "List the skills this toolbox offers: each one's name, description, "
            "script tools and whether it is enabled in this session.",
            _EMPTY_SCHEMA,
            inline=True,
            annotations={"skill_action": "list"},
            hints=dict(READ_ONLY),
        )
    ]
    for name in sorted(skills):
        desc = skills[name].meta.description
        for action, text in (
            ("describe", f"Describe the skill {name}: {desc}"),
            ("enable", f"Enable the skill {name} in this session, making its script tools available: {desc}"),
            ("disable", f"Disable the skill {name} in this session."),
        ):
            out.append(
                ToolSpec(
                    f"skill_{action}_{name}",
                    text,
                    _EMPTY_SCHEMA,
                    inline=True,
                    annotations={"skill": name, "skill_action": action},
                    hints=dict(READ_ONLY if action == "describe" else _SESSION_SWITCH),
                )
            )
    for name in sorted(skills):
        for tool, (_path, spec) in skills[name].scripts.items():
            out.append(
                ToolSpec(
                    tool,
                    spec.description,
                    input_schema(spec),
                    annotations={"session_scoped": True, "skill": name},
                )
            )
    return out


def _sources(config: dict[str, Any]) -> tuple[list[str], list[dict[str, str]]]:
    sources = config.get("skillSources") or []
    if not isinstance(sources, list):
        raise ConfigError("skillSources must be a list")
    roots: list[str] = []
    errors: list[dict[str, str]] = []
    for i, source in enumerate(sources):
        tag = source.get("tag") if isinstance(source, dict) else None
        if tag == "SkillGitRepo":
            url = (source.get("contents") or {}).get("url") if isinstance(source.get("contents"), dict) else None
            errors.append(
                {
                    "source": f"skillSources[{i}]",
                    "message": (
                        f"git skill source {url!r} was not cloned by the supervisor; "
                        "a worker loads only SkillDirectory sources"
                    ),
                }
            )
            continue
        if tag != "SkillDirectory":
            raise ConfigError(f"skillSources[{i}].tag must be SkillDirectory or SkillGitRepo, not {tag!r}")
        path = source.get("contents")
        if not isinstance(path, str) or not path.startswith("/"):
            raise ConfigError(f"skillSources[{i}].contents must be an absolute path, not {path!r}")
        roots.append(path)
    return roots, errors


def open_toolbox(config: dict[str, Any], env: WorkerEnv) -> SkillsToolbox:
    """Open the skills toolbox inside a confined worker (see :mod:`toolboxes._toolbox`). Raises
    :class:`ConfigError` for a malformed config; problems with skills are load errors."""
    roots, errors = _sources(config)
    auto = config.get("autoEnableSkills") or []
    if not isinstance(auto, list) or not all(isinstance(n, str) for n in auto):
        raise ConfigError("autoEnableSkills must be a list of skill names")
    for name in auto:
        if not valid_skill_name(name):
            raise ConfigError(f"autoEnableSkills: {name!r} is not a valid skill name")
    try:
        settings = BashSettings.from_policy(config.get("policy"))
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    runner = ScriptRunner(settings, env.workdir, Reaper(subreaper=True))
    return SkillsToolbox(roots, auto, runner, errors, channel=env.channel, watch_interval_s=settings.watch_interval_s)
