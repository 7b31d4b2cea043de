"""Describe and run scripts of the bash protocol; shared by the bash and skills toolboxes.

A :class:`ScriptRunner` owns the :class:`Reaper` of its toolbox, the limits and environment from the policy, and the
work folder (where media outputs are written; ``HOME`` and ``TMPDIR`` are in it). A script runs in **its own folder**
(docs/FILES.md "One rule for relative paths"), so the seed's ``./generate-chart "$@"`` finds the program beside it.
"""

from __future__ import annotations

import os
import secrets
import time
from typing import TYPE_CHECKING, Any

from .._bounded_run import run_bounded
from .._result import ToolResult
from ._argv import ArgumentError, build_invocation
from ._errors import DescribeError
from ._output import outcome_to_result
from ._spec import ScriptSpec, parse_describe

if TYPE_CHECKING:
    from .._reaper import Reaper
    from .._toolbox import CallContext
    from ._settings import BashSettings

__all__ = ["MEDIA_DIR", "ScriptRunner"]

#: Largest head start taken on a call's deadline (never more than a tenth of the time left).
_DEADLINE_MARGIN_S = 0.25
#: Folder beneath the work folder that receives media outputs.
MEDIA_DIR = "tool-output"
_EXTENSIONS = {
    "image/png": ".png",
    "image/jpeg": ".jpg",
    "image/gif": ".gif",
    "image/webp": ".webp",
    "image/svg+xml": ".svg",
    "application/pdf": ".pdf",
    "application/json": ".json",
    "application/zip": ".zip",
    "text/csv": ".csv",
    "text/html": ".html",
    "text/plain": ".txt",
    "text/markdown": ".md",
    "audio/mpeg": ".mp3",
    "audio/wav": ".wav",
    "video/mp4": ".mp4",
}


class ScriptRunner:
    """Runs ``SCRIPT describe`` and ``SCRIPT run ARGS...`` under the toolbox's limits.

    Args:
        settings: limits and environment (from the policy).
        workdir: the worker's work folder: home of media outputs (a script runs in its own folder).
        reaper: spawns and kills processes; closed by :meth:`close`.
    """

    def __init__(self, settings: BashSettings, workdir: str, reaper: Reaper) -> None:
        self.settings = settings
        self.workdir = workdir
        self.reaper = reaper

    def describe(self, path: str) -> ScriptSpec:
        """Run ``path describe`` (:meth:`describe_output`) and validate what it prints. Raises
        :class:`DescribeError` with a message for the script's author."""
        return parse_describe(self.describe_output(path))

    def describe_output(self, path: str) -> bytes:
        """What ``path describe`` prints (time limit ``describe_timeout_s``, output cap ``describe_output_bytes``,
        its tree killed after). Raises :class:`DescribeError` when it cannot start, runs too long, fails or prints
        too much."""
        s = self.settings
        outcome = run_bounded(
            self.reaper,
            [path, "describe"],
            env=dict(s.env),
            cwd=os.path.dirname(os.path.abspath(path)),
            stdin=None,
            deadline=time.monotonic() + s.describe_timeout_s,
            stdout_cap=s.describe_output_bytes,
            stderr_cap=4096,
        )
        if outcome.spawn_error is not None:
            raise DescribeError(f"could not start the script: {outcome.spawn_error}")
        if outcome.timed_out:
            raise DescribeError(
                f"describe did not finish within {s.describe_timeout_s:g} s; it was killed with its children"
            )
        if outcome.exit_code != 0:
            how = (
                f"exited with code {outcome.exit_code}"
                if outcome.signal is None
                else (f"was killed by signal {outcome.signal}")
            )
            stderr = outcome.stderr.decode("utf-8", errors="replace").strip()
            raise DescribeError(f"describe {how}" + (f": {stderr[-1000:]}" if stderr else ""))
        if outcome.stdout_truncated:
            raise DescribeError(
                f"describe printed {outcome.stdout_total} bytes, more than the limit of {s.describe_output_bytes}"
            )
        return outcome.stdout

    def run(self, tool: str, path: str, spec: ScriptSpec, args: dict[str, Any], ctx: CallContext) -> ToolResult:
        """Run ``path run ARGS...`` for one call and map the outcome to a result (never raises for what the script
        does). The wall-time limit is the smaller of the policy's and what is left of the call's deadline; a
        cancel of ``ctx`` kills the script's tree at once."""
        try:
            invocation = build_invocation(spec, args)
        except ArgumentError as exc:
            return ToolResult.error(f"{tool}: {exc}")
        s = self.settings
        limit = s.wall_time_s
        remaining = ctx.remaining()
        if remaining is not None:
            # Stop a little before the caller's deadline so that this toolbox's own answer (with what the script
            # printed, and after its tree is gone) arrives before the supervisor gives up on the call.
            limit = min(limit, max(0.0, remaining - min(_DEADLINE_MARGIN_S, remaining / 10)))
        env = dict(s.env)
        env.update(
            AGENT_SESSION_ID=ctx.session_id,
            AGENT_CONVERSATION_ID=ctx.conversation_id,
            AGENT_TURN_ID=ctx.turn_id,
            AGENT_AGENT_ID=ctx.agent_id,
        )
        outcome = run_bounded(
            self.reaper,
            [path, "run", *invocation.argv],
            env=env,
            cwd=os.path.dirname(os.path.abspath(path)),
            stdin=invocation.stdin,
            deadline=time.monotonic() + limit,
            stdout_cap=s.output_bytes,
            stderr_cap=s.stderr_bytes,
            on_cancel=ctx.on_cancel,
        )

        def save(data: bytes, media_type: str) -> str:
            folder = os.path.join(self.workdir, MEDIA_DIR)
            os.makedirs(folder, mode=0o755, exist_ok=True)
            name = f"{tool}-{ctx.call_id}-{secrets.token_hex(4)}{_EXTENSIONS.get(media_type, '.bin')}"
            fd = os.open(os.path.join(folder, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            return f"{MEDIA_DIR}/{name}"

        try:
            return outcome_to_result(tool, spec, outcome, limit, save)
        except OSError as exc:
            return ToolResult.error(f"{tool}: could not store its output in the work folder: {exc.strerror}")

    def close(self) -> None:
        """Kill every script still running. Safe to call twice."""
        self.reaper.close()
