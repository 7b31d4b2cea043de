"""The System toolbox's ``execute-command``: ``sh -c COMMAND`` inside the worker's confinement.

The command inherits everything the worker has and nothing more: its Landlock rules (the FileSandbox, compiled,
plus the system paths read-only and the work folder), its network namespace (no way out but the egress proxy), its
rlimits, its uid and no_new_privs. It runs in its own process group with the policy's wall-time limit (the whole
tree is killed at the limit) and output caps.

A command runs in the **agent file's folder** (``policy.base_dir``), where relative paths in every tool argument
start (docs/FILES.md "One rule for relative paths"): ``ls ./project`` lists what ``list-directory ./project``
lists. The worker's view shows that folder at its own path (``ViewSpec.directories``) holding only what the rules
grant in it; ``HOME`` and ``TMPDIR`` stay in the worker's work folder, the place to write scratch files.

``CommandFilter`` (a path in the agent file, trusted) is asked first: it gets the command on stdin and must print
``{"acceptance": "allowed"|"refused", "note": ...}``. It runs under one more Landlock layer that makes it read-only
and network-less (``sandbox._readonly_exec``), with a 10 s limit. Anything but a well-formed ``allowed`` refuses the
command (fail closed): a crash, a timeout, invalid JSON, a missing or unknown ``acceptance``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any

import sandbox

from .._bounded_run import run_bounded
from .._result import Status, ToolResult

if TYPE_CHECKING:
    from .._reaper import Reaper
    from .._toolbox import CallContext

__all__ = ["FILTER_TIMEOUT_S", "command_folder", "execute_command", "run_command_filter"]

FILTER_TIMEOUT_S = 10.0
_FILTER_OUTPUT_CAP = 64 * 1024


def _runtime_dir() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(sandbox.__file__)))


def command_folder(config: dict[str, Any], workdir: str) -> str:
    """Where commands run: the agent file's folder (``policy.base_dir``); the work folder only for a config that
    names none (a toolbox started without an agent file, as in unit tests)."""
    base = (config.get("policy") or {}).get("base_dir")
    return base if isinstance(base, str) and os.path.isabs(base) else workdir


def run_command_filter(
    filter_path: str, command: str, env: dict[str, str], cwd: str, reaper: Reaper, ctx: CallContext
) -> tuple[bool, str]:
    """Ask the filter; return (allowed, note). Fails closed."""
    bootstrap = f"import sys; sys.path.insert(0, {_runtime_dir()!r}); from sandbox._readonly_exec import main; main()"
    argv = [sys.executable, "-I", "-B", "-c", bootstrap, filter_path]
    outcome = run_bounded(
        reaper,
        argv,
        env=env,
        cwd=cwd,
        stdin=command.encode() + b"\n",
        deadline=time.monotonic() + FILTER_TIMEOUT_S,
        stdout_cap=_FILTER_OUTPUT_CAP,
        stderr_cap=_FILTER_OUTPUT_CAP,
        on_cancel=ctx.on_cancel,
    )
    if outcome.spawn_error:
        return False, f"the command filter could not be started ({outcome.spawn_error}); refusing"
    if outcome.timed_out:
        return False, f"the command filter did not answer within {FILTER_TIMEOUT_S:g} s; refusing"
    if outcome.exit_code != 0:
        err = outcome.stderr.decode("utf-8", "replace").strip().splitlines()
        code = outcome.exit_code if outcome.exit_code is not None else f"signal {outcome.signal}"
        return False, f"the command filter failed (exit {code})" + (f": {err[-1]}" if err else "") + "; refusing"
    try:
        verdict = json.loads(outcome.stdout.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False, "the command filter did not print a JSON verdict; refusing"
    if not isinstance(verdict, dict) or verdict.get("acceptance") not in ("allowed", "refused"):
        return False, 'the command filter\'s verdict has no "acceptance": "allowed"|"refused"; refusing'
    note = verdict.get("note")
    note_s = note if isinstance(note, str) else ""
    return verdict["acceptance"] == "allowed", note_s


def execute_command(
    args: dict[str, Any], config: dict[str, Any], ctx: CallContext, reaper: Reaper, workdir: str
) -> ToolResult:
    command = args.get("command")
    if not isinstance(command, str) or not command.strip():
        return ToolResult.error("execute-command needs 'command': the shell command to run")
    policy = config.get("policy") or {}
    limits = policy.get("limits") or {}
    env = dict(policy.get("env") or os.environ)
    env.setdefault("PATH", "/usr/bin:/bin")
    cwd = command_folder(config, workdir)
    filter_path = config.get("CommandFilter")
    if filter_path:
        allowed, note = run_command_filter(filter_path, command, env, cwd, reaper, ctx)
        if not allowed:
            return ToolResult.error(
                f"command refused by the command filter: {note or 'no reason given'}", summary="command refused"
            ).with_meta("state_effect", "read")
    cap = int(limits.get("output_bytes") or 1024 * 1024)
    remaining = ctx.remaining()
    deadline = time.monotonic() + (remaining if remaining is not None else float(limits.get("wall_time_s") or 60))
    outcome = run_bounded(
        reaper,
        ["/bin/sh", "-c", command],
        env=env,
        cwd=cwd,
        stdin=None,
        deadline=deadline,
        stdout_cap=cap,
        stderr_cap=cap,
        on_cancel=ctx.on_cancel,
    )
    if outcome.spawn_error:
        return ToolResult.error(
            f"execute-command: the shell could not be started in the agent file's folder {cwd}: {outcome.spawn_error}"
        )
    data = {
        "command": command,
        "exitCode": outcome.exit_code if outcome.exit_code is not None else -(outcome.signal or 0),
        "stdout": outcome.stdout.decode("utf-8", "replace"),
        "stderr": outcome.stderr.decode("utf-8", "replace"),
        "duration": round(outcome.elapsed_s, 6),
    }
    truncated = outcome.stdout_truncated or outcome.stderr_truncated
    if outcome.timed_out:
        return ToolResult.json(
            data, status="error", truncated=truncated, summary="the command exceeded its wall-time limit and was killed"
        )
    if outcome.cancelled:
        return ToolResult.json(data, status="error", summary="the call was cancelled")
    status: Status = "passed" if outcome.exit_code == 0 else "failed"
    summary = "exit 0" if status == "passed" else f"exit {data['exitCode']}"
    return ToolResult.json(data, status=status, summary=summary, truncated=truncated).with_meta(
        "state_effect", "mutate"
    )
