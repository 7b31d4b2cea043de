"""validate-tool: check a bash tool's ``describe`` output (validate-agent is :mod:`._agent_check`).

:func:`run_describe` is the one place a script runs. It runs as a child of the worker, so it inherits the
worker's
confinement (Landlock, network namespace, rlimits, uid, no_new_privs): that *is* the sandbox. It gets a
minimal
environment, its own process group (killed whole at the time limit) and no stdin. A supervisor that wants a
stricter sandbox for describe (read-only, no network) passes ``runner``: any callable with the same contract.
The check itself (:func:`check_describe`, the bash toolbox's validator) is pure.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable
from typing import Any

from ..bash import describe_problems

__all__ = ["check_describe", "run_describe"]


Runner = Callable[[str, float], tuple[int, str, str]]


def _run_confined_child(path: str, timeout_s: float) -> tuple[int, str, str]:
    proc = subprocess.Popen(
        [path, "describe"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        cwd=os.path.dirname(path),
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return -1, "", f"describe did not finish within {timeout_s:g} s"
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def run_describe(path: str, timeout_s: float = 10.0, runner: Runner | None = None) -> tuple[Any, str | None]:
    """Run ``path describe``; returns ``(parsed JSON, None)`` or ``(None, what went wrong)``."""
    if not os.access(path, os.X_OK):
        return None, f"{path} is not executable (chmod +x it)"
    try:
        code, out, err = (runner or _run_confined_child)(path, timeout_s)
    except OSError as exc:
        return None, f"could not run {path}: {exc.strerror}"
    if code != 0:
        return None, f"'{os.path.basename(path)} describe' exited with {code}: {err.strip()[:500]}"
    try:
        return json.loads(out), None
    except ValueError as exc:
        return None, f"'describe' did not print JSON: {exc}"


def check_describe(value: Any) -> list[dict[str, str]]:
    """Errors (``{path, message}``) in a describe object; empty when it is valid. The bash toolbox's own validator
    (:func:`toolboxes.bash.describe_problems`): a tool validates exactly when the bash and skills toolboxes load it."""
    return [{"path": p.path, "message": p.message} for p in describe_problems(value)]
