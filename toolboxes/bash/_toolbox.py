"""The bash toolbox: ``FileSystemDirectory {Path}`` or ``SingleTool {Path}``, one tool ``bash_<slug>`` per script.

Loading asks every script ``describe`` (in parallel, each under the describe time limit); a script that fails is left
out with a load error and the others load. A watcher re-lists the source every ``watch_interval_s`` and describes
only the scripts whose fingerprint changed; when the tool list or the load errors change it calls
``env.channel.tools_changed()``.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._reaper import Reaper
from .._result import ToolResult
from .._toolbox import CallContext, HostChannel, ToolSpec, WorkerEnv
from .._watch import Watcher
from ._discover import list_scripts
from ._errors import ConfigError, DescribeError
from ._runner import ScriptRunner
from ._settings import BashSettings
from ._spec import ScriptSpec, bash_tool_name, input_schema

if TYPE_CHECKING:
    from .._listing import Fingerprint

__all__ = ["BashToolbox", "open_toolbox"]

_TAGS = {"FileSystemDirectory": False, "SingleTool": True}
_DESCRIBE_THREADS = 4


@dataclass(frozen=True)
class _Loaded:
    fingerprint: Fingerprint
    spec: ScriptSpec | None
    error: str | None


class BashToolbox:
    """Tools from the scripts of one source. Thread-safe: calls run concurrently with each other and with reloads.

    Args:
        path: the folder (or the file, with ``single``).
        single: a ``SingleTool`` source.
        runner: describes and runs scripts; owned (closed by :meth:`close`).
        channel: told when the tool list changes; ``None`` to tell no one.
        watch_interval_s: how often to look for changes; 0 for never (call :meth:`refresh` yourself)."""

    def __init__(
        self,
        path: str,
        single: bool,
        runner: ScriptRunner,
        channel: HostChannel | None,
        watch_interval_s: float,
    ) -> None:
        self._path = path
        self._single = single
        self._runner = runner
        self._channel = channel
        self._lock = threading.Lock()  # guards the fields below
        self._refresh_lock = threading.Lock()  # one refresh at a time
        self._loaded: dict[str, _Loaded] = {}
        self._source_errors: list[dict[str, str]] = []
        self._watch_errors: list[dict[str, str]] = []
        self._tools: dict[str, tuple[str, ScriptSpec]] = {}
        self._errors: list[dict[str, str]] = []
        self.refresh()
        self._watcher: Watcher | None = None
        if watch_interval_s > 0:
            self._watcher = Watcher(self._check, watch_interval_s, self._watch_failed, name=f"bash-watch {path}")
            self._watcher.start()

    # -- loading -------------------------------------------------------------------------------------------
    def _describe(self, path: str, fp: Fingerprint) -> _Loaded:
        try:
            return _Loaded(fp, self._runner.describe(path), None)
        except DescribeError as exc:
            return _Loaded(fp, None, str(exc))

    def refresh(self) -> bool:
        """Re-list the source, describe new and changed scripts, drop removed ones. Returns whether the tools or the
        load errors changed. Blocks while describing (bounded by the describe time limit)."""
        with self._refresh_lock:
            listing = list_scripts(self._path, self._single)
            with self._lock:
                old = dict(self._loaded)
            todo = {p: fp for p, fp in listing.found.items() if p not in old or old[p].fingerprint != fp}
            loaded = {p: old[p] for p in listing.found if p not in todo}
            if todo:
                with ThreadPoolExecutor(max_workers=min(_DESCRIBE_THREADS, len(todo))) as pool:
                    for path, result in zip(todo, pool.map(self._describe, todo, todo.values()), strict=True):
                        loaded[path] = result
            tools: dict[str, tuple[str, ScriptSpec]] = {}
            errors = list(listing.errors)
            for path in sorted(loaded):
                entry = loaded[path]
                if entry.spec is None:
                    errors.append({"source": path, "message": entry.error or "describe failed"})
                    continue
                name = bash_tool_name(entry.spec.slug)
                if name in tools:
                    errors.append(
                        {
                            "source": path,
                            "message": f"slug {entry.spec.slug!r} is already used by {tools[name][0]}",
                        }
                    )
                    continue
                tools[name] = (path, entry.spec)
            with self._lock:
                changed = tools != self._tools or errors != self._errors
                self._loaded = loaded
                self._tools = tools
                self._errors = errors
            return changed

    def _check(self) -> None:
        if self.refresh() and self._channel is not None:
            self._channel.tools_changed()

    def _watch_failed(self, exc: BaseException) -> None:
        with self._lock:
            self._watch_errors = [{"source": self._path, "message": f"watching failed: {exc!r}"}]

    # -- Toolbox interface ---------------------------------------------------------------------------------
    def tools(self) -> list[ToolSpec]:
        """One tool per loaded script, in path order."""
        with self._lock:
            items = list(self._tools.items())
        return [ToolSpec(name, spec.description, input_schema(spec)) for name, (_path, spec) in items]

    def load_errors(self) -> list[dict[str, str]]:
        """Scripts left out and why (``{"source": path, "message": ...}``), plus problems with the source."""
        with self._lock:
            return [dict(e) for e in self._errors + self._watch_errors]

    def call(self, tool: str, args: dict[str, Any], ctx: CallContext) -> ToolResult:
        """Run the script behind ``tool``. Unknown tools (for example a script removed a moment ago) are refused."""
        with self._lock:
            entry = self._tools.get(tool)
        if entry is None:
            return ToolResult.error(f"no tool {tool!r} in this bash toolbox (its script may have been removed)")
        path, spec = entry
        return self._runner.run(tool, path, spec, args, ctx)

    def close(self) -> None:
        """Stop watching and kill every script still running. Safe to call twice."""
        if self._watcher is not None:
            self._watcher.stop()
        self._runner.close()


def source_of(config: dict[str, Any]) -> tuple[str, bool]:
    """``(path, single)`` of a bash toolbox entry; raises :class:`ConfigError` naming what is wrong."""
    tag = config.get("tag")
    if tag not in _TAGS:
        raise ConfigError(f"bash toolbox tag must be FileSystemDirectory or SingleTool, not {tag!r}")
    contents = config.get("contents")
    path = contents.get("Path") if isinstance(contents, dict) else None
    if not isinstance(path, str) or not path.startswith("/"):
        raise ConfigError(f"bash toolbox {tag}: contents.Path must be an absolute path, not {path!r}")
    return path, _TAGS[tag]


def open_toolbox(config: dict[str, Any], env: WorkerEnv) -> BashToolbox:
    """Open a bash toolbox inside a confined worker (see :mod:`toolboxes._toolbox`). Raises
    :class:`ConfigError`
    for a malformed config; problems with the scripts are load errors, not exceptions."""
    path, single = source_of(config)
    try:
        settings = BashSettings.from_policy(config.get("policy"))
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    runner = ScriptRunner(settings, env.workdir, Reaper(subreaper=True))
    return BashToolbox(path, single, runner, env.channel, settings.watch_interval_s)
