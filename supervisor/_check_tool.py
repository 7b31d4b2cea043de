"""``agents-supervise check-tool-call --tool PATH``: validate a tool-call payload against a bash tool's schema.

The script is untrusted, so its ``describe`` runs through the launcher's confined command runner
(``_confined_exec.py``): own network namespace with loopback only, own PID namespace, Landlock granting read (and
execute) on the policy's system paths and the script file and nothing else, writes nowhere, the private filesystem
view of a worker (nothing else of the host exists for it), the sandbox uid, a time limit and an output cap (the
bash toolbox's defaults). What it prints is parsed and turned into a schema by the
bash toolbox's own code (:func:`toolboxes.bash.parse_describe`, :func:`toolboxes.bash.input_schema`), the payload
is checked with the supervisor's :class:`~supervisor.tools._validation.ArgumentValidator` and, when the schema accepts
it, the command line is built as a call would build it (:func:`toolboxes.bash.build_invocation`).

Outcomes: valid (exit 0, one line), invalid (exit 1, the seed's report), or the tool cannot be checked (exit 2,
one line saying why: not executable, describe failed or printed a bad description, payload not JSON).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass

from sandbox import READ, FsRule
from supervisor.config import DEFAULT_SYSTEM_PATHS
from supervisor.tools import ArgumentValidator, FieldError, format_validation_errors
from supervisor.workers import run_confined
from toolboxes.bash import ArgumentError, BashSettings, DescribeError, bash_tool_name, build_invocation, parse_describe
from toolboxes.bash import input_schema as bash_input_schema

__all__ = ["CheckOutcome", "check_tool_call"]

EXIT_VALID, EXIT_INVALID, EXIT_CANNOT_CHECK = 0, 1, 2


@dataclass(frozen=True)
class CheckOutcome:
    """What to print and the exit status. ``tool`` is the public name (``bash_<slug>``) when describe worked."""

    exit_code: int
    text: str
    tool: str | None = None


def _script(path: str) -> str | CheckOutcome:
    script = os.path.realpath(path)
    if not os.path.isfile(script):
        return CheckOutcome(EXIT_CANNOT_CHECK, f"{path}: no such tool file")
    if not os.access(script, os.X_OK):
        return CheckOutcome(EXIT_CANNOT_CHECK, f"{path}: not executable (a tool must be an executable script)")
    return script


def _rules(system_paths: tuple[str, ...], script: str) -> list[FsRule]:
    return [FsRule(p, READ) for p in system_paths if os.path.exists(p)] + [FsRule(script, READ)]


def _workdir() -> str:
    path = tempfile.mkdtemp(prefix="agents-supervise-check-")
    os.chmod(path, 0o755)
    return path


async def check_tool_call(
    path: str,
    payload: str,
    *,
    system_paths: tuple[str, ...] = DEFAULT_SYSTEM_PATHS,
    env: dict[str, str] | None = None,
    uid: int | None = 65534,
    gid: int | None = 65534,
    launcher: list[str] | None = None,
    private_view: bool = True,
) -> CheckOutcome:
    """Describe ``path`` confined and validate ``payload`` (JSON text of the arguments). Never raises for what the
    script or the payload does. ``uid``/``gid`` are used only when running as root. ``private_view``: the
    describe run sees only its grants, as a worker does (the policy's ``private_view``)."""
    try:
        args = json.loads(payload)
    except json.JSONDecodeError as exc:
        return CheckOutcome(
            EXIT_CANNOT_CHECK,
            f"the payload on stdin is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
        )
    script = _script(path)
    if isinstance(script, CheckOutcome):
        return script
    settings = BashSettings.from_policy({"env": env} if env else None)
    rules = _rules(system_paths, script)
    root = os.geteuid() == 0
    workdir = _workdir()
    try:
        outcome = await run_confined(
            [script, "describe"],
            toolbox="check-tool-call",
            workdir=workdir,
            fs_rules=rules,
            env=dict(settings.env),
            timeout_s=settings.describe_timeout_s,
            uid=uid if root else None,
            gid=gid if root else None,
            min_landlock_abi=1,
            stdout_cap=settings.describe_output_bytes,
            stderr_cap=4096,
            launcher=launcher,
            view=private_view,
            system_paths=system_paths,
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    where = f"{path}: describe"
    if outcome.timed_out:
        return CheckOutcome(
            EXIT_CANNOT_CHECK, f"{where} did not finish within {settings.describe_timeout_s:g} s and was killed"
        )
    if outcome.confinement_failed:
        return CheckOutcome(EXIT_CANNOT_CHECK, f"{path}: could not be confined: {outcome.stderr_text(500)}")
    if outcome.returncode != 0:
        how = (
            f"was killed by signal {-(outcome.returncode or 0)}"
            if (outcome.returncode or 0) < 0
            else f"exited with code {outcome.returncode}"
        )
        stderr = outcome.stderr_text(1000)
        return CheckOutcome(EXIT_CANNOT_CHECK, f"{where} {how}" + (f": {stderr}" if stderr else ""))
    if outcome.stdout_total > settings.describe_output_bytes:
        return CheckOutcome(
            EXIT_CANNOT_CHECK,
            f"{where} printed {outcome.stdout_total} bytes, more than the limit of {settings.describe_output_bytes}",
        )
    try:
        spec = parse_describe(outcome.stdout)
    except DescribeError as exc:
        return CheckOutcome(EXIT_CANNOT_CHECK, f"{path}: {exc}")
    tool = bash_tool_name(spec.slug)
    errors = ArgumentValidator(bash_input_schema(spec)).errors(args)
    if not errors:
        try:
            build_invocation(spec, args)
        except ArgumentError as exc:
            errors = [FieldError("", str(exc))]
    # The report names the tool as the seed's does: by the slug its describe gave ('read-file'), not the public
    # name the supervisor lists it under (``tool``).
    if errors:
        return CheckOutcome(EXIT_INVALID, format_validation_errors(spec.slug, errors), tool)
    return CheckOutcome(EXIT_VALID, f"Tool call to '{spec.slug}' is valid.", tool)
