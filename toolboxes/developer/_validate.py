"""validate-tool: check a bash tool's ``describe`` output (validate-agent is :mod:`._agent_check`).

:func:`run_describe` runs ``path describe`` exactly as the bash toolbox does when it loads the tool (its
:class:`~toolboxes.bash.ScriptRunner`: the same environment, time limit and output cap, the script's tree killed
after by the toolbox's reaper, ``toolboxes/_bounded_run.py``). It runs as a child of the worker, so it inherits the
worker's confinement (Landlock, network namespace, rlimits, uid, no_new_privs): that *is* the sandbox. The check
itself (:func:`check_describe`, the bash toolbox's validator) is pure.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from ..bash import DescribeError, describe_problems

if TYPE_CHECKING:
    from ..bash import ScriptRunner

__all__ = ["check_describe", "run_describe"]


def run_describe(runner: ScriptRunner, path: str) -> tuple[Any, str | None]:
    """Run ``path describe``; returns ``(parsed JSON, None)`` or ``(None, what went wrong)``."""
    if not os.access(path, os.X_OK):
        return None, f"{path} is not executable (chmod +x it)"
    try:
        out = runner.describe_output(path)
    except DescribeError as exc:
        return None, f"'{os.path.basename(path)} describe': {exc}"
    try:
        return json.loads(out), None
    except ValueError as exc:
        return None, f"'describe' did not print JSON: {exc}"


def check_describe(value: Any) -> list[dict[str, str]]:
    """Errors (``{path, message}``) in a describe object; empty when it is valid. The bash toolbox's own validator
    (:func:`toolboxes.bash.describe_problems`): a tool validates exactly when the bash and skills toolboxes load it."""
    return [{"path": p.path, "message": p.message} for p in describe_problems(value)]
