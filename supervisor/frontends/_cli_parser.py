"""The command line of ``agents-supervise``: its commands and their options (what each does: :mod:`._cli`)."""

from __future__ import annotations

import argparse

from ._cli_uids import add_uids_parser

__all__ = ["build_parser"]


def _add_common(p: argparse.ArgumentParser, *, required: bool = True) -> None:
    p.add_argument("--policy", required=required, help="the YAML policy file")
    p.add_argument(
        "--agent",
        action="append",
        default=[],
        metavar="SLUG|FILE",
        help="the slug of the agent to act as (at most one), or an agent file to load besides the "
        "policy's (a path with a '/' or a '.'; repeatable), whose agent is then the one to act as",
    )
    p.add_argument(
        "--agent-file",
        action="append",
        default=[],
        dest="agent_files",
        metavar="FILE",
        help="an agent file to load besides the policy's, without acting as its agent (repeatable)",
    )
    p.add_argument("--state-dir", default=None, help="override the policy's state directory")


def _add_ids(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--session",
        default=None,
        metavar="NAME",
        help="a session name to continue (with the agent of the tool or run); default: a new session",
    )
    p.add_argument(
        "--conversation", default="", metavar="ID", help="the conversation id of this call (default: the session's own)"
    )
    p.add_argument("--turn", default="", metavar="ID", help="the turn id of this call (default: a new one)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agents-supervise", description="Run AI agents' tools in kernel-confined workers."
    )
    _add_common(parser, required=False)
    sub = parser.add_subparsers(dest="command")
    serve = sub.add_parser("serve", help="serve MCP over stdio, or over Streamable HTTP with --http")
    _add_common(serve)
    serve.add_argument(
        "--http",
        nargs="?",
        const="",
        default=None,
        metavar="HOST:PORT",
        help="serve MCP over Streamable HTTP (default: the policy's frontends.http.listen, else 127.0.0.1:8765)",
    )
    serve.add_argument(
        "--serve-agent",
        default=None,
        metavar="SLUG",
        help="bind the stdio session to this agent (default: the agent of an --agent FILE, else the "
        "policy's first agent); over HTTP "
        "the endpoint /agents/<slug>/mcp picks the agent",
    )
    init = sub.add_parser("init", help="write a starting policy and the example agents into a new folder")
    init.add_argument("folder", help="a new or empty folder (made when missing)")
    init.set_defaults(policy=None)
    hash_token = sub.add_parser("hash-token", help="print the policy form (sha256:...) of a token read on stdin")
    hash_token.set_defaults(policy=None)
    tools = sub.add_parser("tools", help="list the tools")
    _add_common(tools)
    tools.add_argument("--json", action="store_true")
    call = sub.add_parser("call", help="call one tool and print its result as JSON")
    _add_common(call)
    call.add_argument("tool")
    call.add_argument("arguments", nargs="?", default="{}", help="the arguments as a JSON object")
    _add_ids(call)
    check = sub.add_parser("check", help="show what each toolbox's worker will get")
    _add_common(check)
    check.add_argument("--json", action="store_true", help="the whole report as JSON")
    check.add_argument(
        "--detail", action="store_true", help="every worker in full (paths, limits, mounts, credentials)"
    )
    schema = sub.add_parser("schema", help="print the policy's JSON Schema")
    schema.add_argument(
        "--agent-file",
        action="store_true",
        dest="agent_file",
        help="print the agent file's JSON Schema instead (toolbox kinds and their keys)",
    )
    run = sub.add_parser("run", help="run an agent's loop on a prompt and print its answer")
    run.add_argument("--policy", required=True, help="the YAML policy file")
    run.add_argument("--agent", required=True, dest="slug", metavar="SLUG", help="the slug of the agent to run")
    run.add_argument(
        "--agent-file",
        action="append",
        default=[],
        dest="agent",
        metavar="FILE",
        help="an agent file to load besides the policy's (repeatable)",
    )
    run.add_argument("--state-dir", default=None, help="override the policy's state directory")
    _add_ids(run)
    run.add_argument("prompt")
    trace = sub.add_parser("trace", help="report on a trace file (call tree, summary, redundant reads)")
    trace.add_argument("file")
    trace.add_argument("--json", action="store_true")
    rebind = sub.add_parser("rebind-agent", help="hand an agent slug (its uids, work folders, HOME) to another file")
    rebind.add_argument("--policy", required=True, help="the YAML policy file (for its state directory)")
    rebind.add_argument("--state-dir", default=None, help="override the policy's state directory")
    rebind.add_argument("slug")
    rebind.add_argument("file", help="the agent file that owns the slug from now on")
    add_uids_parser(sub)
    ctc = sub.add_parser("check-tool-call", help="validate a tool call payload (stdin) against a bash tool")
    ctc.add_argument("--tool", required=True, metavar="PATH", help="the bash tool (describe/run script)")
    ctc.add_argument("--policy", default=None, help="take system paths, environment and uid from this policy")
    return parser
