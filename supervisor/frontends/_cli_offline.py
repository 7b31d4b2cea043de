"""The commands that start no service: ``trace`` (a trace file's report), ``schema`` (the files' JSON Schemas),
``hash-token``, ``check-tool-call`` (a bash tool's describe run confined, arguments checked), ``rebind-agent``."""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any

import trio

from ._cli_errors import EXIT_ERROR, fail

if TYPE_CHECKING:
    import argparse

__all__ = [
    "check_tool_call_command",
    "hash_token_command",
    "rebind_agent_command",
    "schema_command",
    "trace_command",
]


def hash_token_command() -> int:
    """``hash-token``: the policy form (``sha256:...``) of the token read on stdin's first line."""
    from ._http_auth import hash_token

    token = sys.stdin.readline().strip()
    if not token:
        return fail("hash-token reads the token on its standard input (one line)")
    print(hash_token(token))
    return 0


def trace_command(args: argparse.Namespace) -> int:
    """``trace FILE [--json]``: the report of a trace file (call tree, summary, refusals, redundant reads)."""
    from supervisor._face import load_trace, render_text, report

    try:
        data = report(load_trace(args.file))
    except OSError as exc:
        return fail(f"cannot read the trace file: {exc.strerror or exc}: {args.file}")
    print(json.dumps(data, indent=2, ensure_ascii=False) if args.json else render_text(data))
    return 0


def schema_command(args: argparse.Namespace) -> int:
    """``schema [--agent-file]``: the policy's (or the agent file's) JSON Schema on stdout."""
    from supervisor.config import agent_json_schema, policy_json_schema

    print(json.dumps(agent_json_schema() if args.agent_file else policy_json_schema(), indent=2))
    return 0


def check_tool_call_command(args: argparse.Namespace) -> int:
    """``check-tool-call``: the bash tool's describe run confined, the JSON arguments on stdin checked against it;
    0 valid, 1 invalid, 2 error."""
    from supervisor._face import check_tool_call

    extra: dict[str, Any] = {}
    if args.policy:
        from supervisor.config import load_config

        policy = load_config(args.policy, []).policy
        extra = {
            "system_paths": tuple(policy.system_paths),
            "env": dict(policy.worker_env),
            "uid": policy.sandbox_uid,
            "gid": policy.sandbox_gid,
            "private_view": policy.private_view,
        }
    outcome = trio.run(lambda: check_tool_call(args.tool, sys.stdin.read(), **extra))
    if outcome.exit_code == EXIT_ERROR:
        return fail(outcome.text)
    print(outcome.text)
    return outcome.exit_code


def rebind_agent_command(args: argparse.Namespace) -> int:
    """Bind ``args.slug`` to ``args.file`` in the state dir's identity table (the file must be an agent file with
    that slug); the slug's toolboxes keep their uids and folders."""
    from supervisor._face import rebind_agent
    from supervisor.config import load_agent_file, load_config, reference_environ

    policy = load_config(args.policy, []).policy
    state_dir = os.path.abspath(args.state_dir or policy.state_dir)
    agent = load_agent_file(os.path.realpath(args.file), reference_environ(policy.credentials, os.environ))
    if agent.slug != args.slug:
        return fail(f"{args.file} is the agent file of slug {agent.slug!r}, not {args.slug!r}; nothing changed")
    if not os.path.isdir(state_dir):
        return fail(f"the state directory {state_dir} does not exist; nothing is bound yet")
    bound, before = rebind_agent(state_dir, args.slug, os.path.join(os.getcwd(), args.file))
    print(
        f"agent slug {args.slug}: bound to {bound}"
        + (f" (was {before})" if before else "")
        + "; its toolboxes keep their uids, work folders and HOME"
    )
    return 0
