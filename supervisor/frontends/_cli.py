"""The ``agents-supervise`` command.

::

    agents-supervise --policy P [--agent F]...          serve MCP over stdio (the default command) to the agent
                                                        of the agent file F (default: the policy's first agent)
    agents-supervise serve --policy P [--serve-agent S] the same, spelled out; the session is bound to agent S
    agents-supervise tools --policy P [--agent S] [--json]
                                                        list the tools (of agent S), renamed names, load errors
    agents-supervise call --policy P [--agent S] TOOL 'JSON'
                                                        call one tool (agent S's; default: the first agent's
                                                        tool of that name); prints the tool-result as JSON;
                                                        exit 0 passed, 1 failed, 2 error
    agents-supervise check --policy P [--agent S] [--detail|--json]
                                                        what each toolbox's worker will get (nothing starts)
    agents-supervise schema [--agent-file]              the policy's (or the agent file's) JSON Schema
    agents-supervise run --policy P --agent SLUG 'PROMPT'
                                                        run an agent's loop; prints its answer; exit 0 answered,
                                                        2 error (model unreachable, step limit, ...)
    agents-supervise trace FILE [--json]                the call tree, per-tool summary, refusals, egress and
                                                        redundant reads of a trace file
    agents-supervise check-tool-call --tool PATH [--policy P] < PAYLOAD
                                                        run the bash tool's describe confined and validate the
                                                        JSON arguments on stdin; exit 0 valid, 1 invalid, 2 error

``--agent`` is read by its form: a slug (only ``A-Z a-z 0-9 _ -``) names the agent to act as (``serve``, ``tools``,
``check``, ``call``; at most one), anything else (a path, with a ``/`` or a ``.``) is an agent file to load besides
the policy's, whose agent is then the one to act as unless a slug names another; ``--agent-file`` only loads a
file (:mod:`._cli_agents`). ``init DIR`` writes a starting policy and the example agents (:mod:`._cli_init`).

``call`` and ``run`` take ``--session NAME`` (continue that session; without it every run is a session of its own),
``--conversation ID`` and ``--turn ID`` (the call's ids; default: the session's conversation and a new turn).

Every error a person can fix (a bad file, a policy this machine cannot enforce, a worker or the session store that
cannot start) is printed as ``agents-supervise: error: ...`` with exit status 2, never as a traceback; anything
else (a bug) as one such line with exit status 70 (:func:`._cli_errors.error_status`, the one boundary).

This module picks the command and the agent it acts as; the commands are :mod:`._cli_serve` (``serve``),
:mod:`._cli_service` (``tools``, ``call``, ``run``), :mod:`._cli_check`, :mod:`._cli_init`, :mod:`._cli_uids` and
:mod:`._cli_offline` (``trace``, ``schema``, ``hash-token``, ``check-tool-call``, ``rebind-agent``); the command
line's grammar is :mod:`._cli_parser`.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import trio

from ._cli_agents import acting_agent, split_agents
from ._cli_errors import error_status, fail
from ._cli_parser import build_parser

if TYPE_CHECKING:
    import argparse

__all__ = ["main"]


def _pick_agent(args: argparse.Namespace, command: str) -> int:
    """Set ``args.slug``, the agent the command acts as (:mod:`._cli_agents`); returns an exit status when the
    command line names no one agent (0 when it is fine). An ``--agent FILE`` over HTTP only loads the file (each
    agent has its endpoint there)."""
    try:
        args.slug = split_agents(args)
        over_http = command == "serve" and getattr(args, "http", None) is not None
        if args.slug is None and args.named_files and not over_http:
            from supervisor.config import load_config

            args.slug = acting_agent(load_config(args.policy, args.agent), args.named_files)
    except ValueError as exc:
        return fail(str(exc))
    return 0


def _command(args: argparse.Namespace) -> int:
    """Run the command ``args`` names; its exit status."""
    from . import _cli_offline

    command = args.command or "serve"
    offline = {
        "schema": _cli_offline.schema_command,
        "trace": _cli_offline.trace_command,
        "check-tool-call": _cli_offline.check_tool_call_command,
    }
    if command in offline:
        return offline[command](args)
    if command == "hash-token":
        return _cli_offline.hash_token_command()
    if command == "init":
        from ._cli_init import run_init

        return run_init(args.folder)
    if command == "uids":
        from ._cli_uids import run_uids

        return run_uids(args)
    if not args.policy:
        return fail("--policy is required (for example: --policy policies/strict.yaml)")
    if command in ("serve", "tools", "call", "check") and (refused := _pick_agent(args, command)):
        return refused
    if command == "check":
        from ._cli_check import check

        return check(args)
    if command == "rebind-agent":
        return _cli_offline.rebind_agent_command(args)
    from ._cli_serve import serve_command
    from ._cli_service import call_command, run_command, tools_command

    runner = {"serve": serve_command, "tools": tools_command, "call": call_command, "run": run_command}[command]
    return trio.run(runner, args)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status (a usage error: 2, from argparse)."""
    args = build_parser().parse_args(argv)
    try:
        return _command(args)
    except (Exception, KeyboardInterrupt, BaseExceptionGroup) as exc:  # the one boundary: one line, its status
        return error_status(exc)


if __name__ == "__main__":
    sys.exit(main())
    os._exit(0)
