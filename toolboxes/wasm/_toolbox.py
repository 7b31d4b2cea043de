"""The WASM toolbox: ``WasmToolbox {Name, Description, Path, FileSandbox, MaxMemoryMB, MaxExecutionTimeSeconds,
AllowedHosts}``, one tool ``wasm_<Name>_<component>`` per component of ``Path``.

Loading reads each component's sidecar, compiles it (or takes it from the compile cache in the state folder) and
checks it instantiates; a component that fails is left out with a load error and the others load. A watcher (the bash
toolbox's) re-lists ``Path`` every ``watch_interval_s`` and reloads only the components whose file or sidecar
changed; when the tools or the load errors change it calls ``env.channel.tools_changed()``.

A call gives the component its arguments as JSON text (``tool-input.data``) and a fresh log file
(``tool-input.log-path``, beneath the work folder); after the call the log's first :data:`MAX_LOG_CHARS` characters
(with stdout and stderr, as much of each) go to the trace as a ``worker_event`` ``wasm_log``, and the file is removed.

Components are compiled here and run in executor processes (:mod:`._executors`): a call that outlives its time
limit, even blocked in a WASI host call where the epoch deadline cannot reach it, has its executor killed at the
limit (plus :data:`~._loader.GRACE_S`) and ends ``error``; a spare executor is started at once for the next call.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import stat
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sandbox import WRITE, compile_predicate

from .._names import tool_name
from .._result import ToolResult
from .._watch import Watcher
from ._call import CallOutcome, Preopen
from ._config import WasmConfig, parse_config
from ._discover import list_components, stem_of
from ._engine import CompileCache, EpochClock, make_engine
from ._errors import ComponentLoadError
from ._executors import ExecutorPool, ExecutorSetup, ExecutorStopped
from ._file_size import current_limit
from ._loader import GRACE_S, LoadedComponent, load_component
from ._result_map import to_tool_result

if TYPE_CHECKING:
    from .._listing import Fingerprint
    from .._toolbox import CallContext, HostChannel, ToolSpec, WorkerEnv

__all__ = ["LOG_DIR", "MAX_LOG_CHARS", "NO_NETWORK", "WasmToolbox", "open_toolbox"]

#: The load error of a toolbox with AllowedHosts (docs/WASM.md "Network"; ``check`` says why at length).
NO_NETWORK = (
    "components get no network: wasmtime-py has no call that allows TCP or UDP, so create-tcp-socket "
    "answers access-denied, and wasi:http (which would dial around the egress proxy) is not linked; "
    "remove AllowedHosts (docs/WASM.md, Network)"
)
#: Folder beneath the work folder that holds the calls' log files.
LOG_DIR = ".wasm-logs"
#: Most characters of a call's log (and of its stdout, and of its stderr) that reach the trace; the trace keeps no
#: more of one value.
MAX_LOG_CHARS = 2000


@dataclass(frozen=True)
class _Loaded:
    fingerprint: Fingerprint
    component: LoadedComponent | None
    error: str | None


def _preopens(config: WasmConfig, workdir: str) -> tuple[tuple[Preopen, ...], list[dict[str, str]]]:
    """The work folder, then each folder the FileSandbox's Landlock rules grant (read-write where they do). A file
    rule cannot be a preopen, and ``/`` never is: those are reported, not granted."""
    out = [Preopen(workdir, True)]
    problems: list[dict[str, str]] = []
    if config.file_sandbox is None:
        return tuple(out), problems
    where = f"FileSandbox {config.file_sandbox.name or ''}".strip()
    for rule in compile_predicate(config.file_sandbox.predicate, WRITE).rules:
        if rule.path == "/":
            problems.append(
                {
                    "source": where,
                    "message": "the FileSandbox reaches the whole filesystem; '/' is not preopened for components",
                }
            )
        elif os.path.isdir(rule.path):
            if all(p.path != rule.path for p in out):
                out.append(Preopen(rule.path, rule.mode == WRITE))
        else:
            problems.append(
                {
                    "source": where,
                    "message": f"{rule.path} is not a folder; WASI preopens only "
                    "folders, so components cannot reach it",
                }
            )
    return tuple(out), problems


def _remove_stale_logs(workdir: str) -> None:
    """Remove the log files a previous worker left (it died during a call): links are removed, never followed."""
    with contextlib.suppress(OSError):
        root = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            logs = os.open(LOG_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=root)
        finally:
            os.close(root)
        try:
            for name in os.listdir(logs):
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=logs)
        finally:
            os.close(logs)


class WasmToolbox:
    """Tools from the components of one ``Path``. Thread-safe: calls run concurrently (each in its own store) with
    each other and with reloads."""

    def __init__(self, config: WasmConfig, env: WorkerEnv) -> None:
        self.config = config
        self.env = env
        self._channel: HostChannel | None = env.channel
        #: the file size limit every executor applies to itself (docs/WASM.md "File size")
        self.file_size = current_limit(config.file_sandbox.max_file_size if config.file_sandbox is not None else None)
        preopens, self._preopen_errors = _preopens(config, env.workdir)
        if config.allowed_hosts:
            self._preopen_errors.append({"source": "AllowedHosts", "message": NO_NETWORK})
        _remove_stale_logs(env.workdir)
        setup = ExecutorSetup(
            config.max_memory_bytes,
            self.file_size is None,
            self.file_size,
            preopens,
            config.env,
            bool(config.allowed_hosts),
        )
        concurrent = env.limits.get("max_concurrent_calls") if isinstance(env.limits, dict) else None
        # first, before this process makes an engine or a thread: two executors forked now start in milliseconds
        self.executors = ExecutorPool(setup, (concurrent if isinstance(concurrent, int) else 8) + 1, prefork=2)
        engine, settings = make_engine(config.max_memory_bytes, copy_on_write=self.file_size is None)
        self._cache = CompileCache(engine, settings, os.path.join(env.state_dir, "wasm-cache"))
        self._lock = threading.Lock()
        self._refresh_lock = threading.Lock()
        self._loaded: dict[str, _Loaded] = {}
        self._tools: dict[str, LoadedComponent] = {}
        self._errors: list[dict[str, str]] = []
        self._watch_errors: list[dict[str, str]] = []
        self.executors.warm()  # the first executor starts while the components compile; the checks wait for it
        self.refresh()
        self._watcher: Watcher | None = None
        if config.watch_interval_s > 0:
            self._watcher = Watcher(
                self._check, config.watch_interval_s, self._watch_failed, name=f"wasm-watch {config.path}"
            )
            self._watcher.start()

    # -- loading -------------------------------------------------------------------------------------------
    def _tool_name(self, path: str) -> str:
        return tool_name("wasm", self.config.name, stem_of(path))

    def _load(self, path: str, fp: Fingerprint) -> _Loaded:
        try:
            loaded = load_component(
                path,
                self._tool_name(path),
                self._cache,
                self.executors,
                self.config.max_seconds,
                EpochClock.ticks(self.config.max_seconds),
            )
            return _Loaded(fp, loaded, None)
        except ComponentLoadError as exc:
            return _Loaded(fp, None, str(exc))

    def refresh(self) -> bool:
        """Re-list ``Path``, load new and changed components, drop removed ones. Returns whether the tools or the
        load errors changed."""
        with self._refresh_lock:
            listing = list_components(self.config.path)
            with self._lock:
                old = dict(self._loaded)
            loaded = {
                p: old[p] if p in old and old[p].fingerprint == fp else self._load(p, fp)
                for p, fp in listing.found.items()
            }
            tools: dict[str, LoadedComponent] = {}
            errors = list(self._preopen_errors) + list(listing.errors)
            for path in sorted(loaded):
                entry = loaded[path]
                if entry.component is None:
                    errors.append({"source": path, "message": entry.error or "the component did not load"})
                    continue
                name = entry.component.spec.name
                if name in tools:
                    errors.append(
                        {"source": path, "message": f"its tool name {name} is already used by {tools[name].path}"}
                    )
                    continue
                tools[name] = entry.component
            with self._lock:
                changed = (
                    list(tools) != list(self._tools)
                    or errors != self._errors
                    or any(tools[n] is not self._tools.get(n) for n in tools)
                )
                self._loaded, self._tools, self._errors = loaded, tools, errors
            return changed

    def _check(self) -> None:
        if self.refresh() and self._channel is not None:
            self._channel.tools_changed()

    def _watch_failed(self, exc: BaseException) -> None:
        with self._lock:
            self._watch_errors = [{"source": self.config.path, "message": f"watching failed: {exc!r}"}]

    def loaded(self, tool: str) -> LoadedComponent | None:
        """The component behind ``tool`` (for tests and benchmarks)."""
        with self._lock:
            return self._tools.get(tool)

    # -- Toolbox interface ---------------------------------------------------------------------------------
    def tools(self) -> list[ToolSpec]:
        with self._lock:
            return [c.spec for c in self._tools.values()]

    def load_errors(self) -> list[dict[str, str]]:
        with self._lock:
            return [dict(e) for e in self._errors + self._watch_errors]

    def time_limit(self, ctx: CallContext) -> float:
        """Seconds the call may run: ``MaxExecutionTimeSeconds``, lowered by what is left of its deadline."""
        remaining = ctx.remaining()
        return self.config.max_seconds if remaining is None else min(self.config.max_seconds, remaining)

    def call(self, tool: str, args: dict[str, Any], ctx: CallContext) -> ToolResult:
        with self._lock:
            loaded = self._tools.get(tool)
        if loaded is None:
            return ToolResult.error(f"no tool {tool!r} in this WASM toolbox (its component may have been removed)")
        log_name = f"{stem_of(loaded.path)}-{ctx.call_id}-{secrets.token_hex(4)}.log"
        log_dir = os.path.join(self.env.workdir, LOG_DIR)
        try:
            os.makedirs(log_dir, mode=0o700, exist_ok=True)
        except OSError as exc:
            return ToolResult.error(f"{tool}: the log folder cannot be made in the work folder: {exc.strerror}")
        limit = self.time_limit(ctx)
        message = {
            "t": "call",
            "key": loaded.key,
            "data": json.dumps(args, ensure_ascii=False),
            "log_path": os.path.join(log_dir, log_name),
            "ticks": EpochClock.ticks(limit),
        }
        try:
            answer = self.executors.request(message, loaded.compiled, limit + GRACE_S, ctx.cancelled)
        except ExecutorStopped as exc:
            self._trace_log(tool, ctx, log_name, b"", b"")
            return _stopped(tool, exc, limit)
        if "error" in answer:
            self._trace_log(tool, ctx, log_name, b"", b"")
            return ToolResult.error(f"{tool}: the component could not be run: {answer['error']}")
        outcome = CallOutcome(
            value=answer.get("value"),
            trap=answer.get("trap"),
            interrupted=bool(answer.get("interrupted")),
            stdout=bytes(answer.get("stdout") or b""),
            stderr=bytes(answer.get("stderr") or b""),
        )
        self._trace_log(tool, ctx, log_name, outcome.stdout, outcome.stderr)
        result = self._result(tool, outcome, limit)
        if answer.get("file_size_hit") and self.file_size is not None:
            own = (
                f"status {result.status}"
                + (f", summary {result.summary!r}" if result.summary else "")
                + (f", data {result.data[:200]!r}" if result.data else "")
            )
            return ToolResult.error(f"{self.file_size.message(tool)}. The component's own result: {own}")
        return result

    def _result(self, tool: str, outcome: CallOutcome, limit: float) -> ToolResult:
        """The call's result from what ``run`` returned or how it trapped."""
        if outcome.trap is not None:
            if outcome.interrupted:
                return ToolResult.error(
                    f"{tool}: the component ran longer than its time limit of {limit:g} s "
                    "(MaxExecutionTimeSeconds, or the call's deadline) and was stopped"
                )
            reason = outcome.trap.strip().splitlines()[-1].strip() if outcome.trap.strip() else "unknown"
            hint = (
                f" A component that aborts when an allocation fails ends so: its memory is limited to "
                f"{self.config.max_memory_bytes // (1024 * 1024)} MiB (MaxMemoryMB)."
                if "unreachable" in reason
                else ""
            )
            return ToolResult.error(f"{tool}: the component trapped: {reason}.{hint}")
        try:
            return to_tool_result(outcome.value, self.env.workdir, tool)
        except Exception as exc:  # a component whose run returns another shape than seed 000's
            return ToolResult.error(f"{tool}: the component's result is not a murmur:tool tool-result: {exc}")

    def _trace_log(self, tool: str, ctx: CallContext, log_name: str, stdout: bytes, stderr: bytes) -> None:
        """Send the call's log (bounded) to the trace and remove it. The log is opened without following any link,
        beneath the work folder, so a component cannot make the worker read a file it could not."""
        text, size = "", 0
        with contextlib.suppress(OSError):
            root = os.open(self.env.workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                logs = os.open(LOG_DIR, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=root)
            finally:
                os.close(root)
            try:
                fd = os.open(log_name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=logs)
                try:
                    st = os.fstat(fd)
                    if stat.S_ISREG(st.st_mode):
                        size = st.st_size
                        text = os.read(fd, MAX_LOG_CHARS * 4).decode("utf-8", errors="replace")[:MAX_LOG_CHARS]
                finally:
                    os.close(fd)
                os.unlink(log_name, dir_fd=logs)
            finally:
                os.close(logs)
        if not (size or stdout or stderr) or self._channel is None:
            return
        event: dict[str, Any] = {
            "event": "wasm_log",
            "tool": tool,
            "session_id": ctx.session_id,
            "log": text,
            "log_bytes": size,
            "log_truncated": size > len(text.encode()),
        }
        for key, raw in (("stdout", stdout), ("stderr", stderr)):
            if raw:
                event[key] = raw.decode("utf-8", errors="replace")[:MAX_LOG_CHARS]
        self._channel.event(event)

    def close(self) -> None:
        """Stop watching and kill the executors. Safe to call twice."""
        if self._watcher is not None:
            self._watcher.stop()
        self.executors.close()


def _stopped(tool: str, exc: ExecutorStopped, limit: float) -> ToolResult:
    """The result of a call whose executor was killed (or died, or could not start)."""
    if exc.reason == "deadline":
        return ToolResult.error(
            f"{tool}: the component ran longer than its time limit of {limit:g} s (MaxExecutionTimeSeconds, or the "
            "call's deadline) and was stopped; it was waiting in a host call (a sleep, a poll), so its process "
            "was killed"
        )
    if exc.reason == "cancelled":
        return ToolResult.error(f"{tool}: the call was cancelled and the component was stopped")
    if exc.reason == "died":
        return ToolResult.error(
            f"{tool}: the process running the component ended during the call ({exc.detail}); the worker's "
            "memory or process limit may have stopped it"
        )
    return ToolResult.error(f"{tool}: the component could not be run: {exc.detail or exc.reason}")


def open_toolbox(config: dict[str, Any], env: WorkerEnv) -> WasmToolbox:
    """Open a WASM toolbox inside its worker; raises :class:`WasmConfigError` for an unusable entry. Problems with
    components are load errors, not exceptions."""
    return WasmToolbox(parse_config(config), env)
