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
else (a bug) as one such line with exit status 70 (:func:`error_status`, the one boundary).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from typing import TYPE_CHECKING, Any

import trio

from supervisor._errors import SupervisorError, first_leaf
from supervisor.config import ConfigError, load_error_line

from ._cli_agents import acting_agent, split_agents
from ._cli_agents import check_slug as _check_slug
from ._cli_uids import add_uids_parser
from ._sd_notify import notify_or_warn, reloading_message

if TYPE_CHECKING:
    from supervisor._face import ToolService

    from ._http_server import HttpService

__all__ = ["main"]

EXIT_FAILED, EXIT_ERROR, EXIT_INTERNAL = 1, 2, 70


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


def _session_name(args: argparse.Namespace) -> str:
    """The session name of a ``call`` or ``run``: ``--session``, else one unique to this run."""
    from supervisor._face import new_id

    return args.session if args.session is not None else f"cli-{new_id()}"


def _parser() -> argparse.ArgumentParser:
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


def _check_tool_call(args: argparse.Namespace) -> int:
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
        return _fail(outcome.text)
    print(outcome.text)
    return outcome.exit_code


def _rebind_agent(args: argparse.Namespace) -> int:
    """Bind ``args.slug`` to ``args.file`` in the state dir's identity table (the file must be an agent file with
    that slug); the slug's toolboxes keep their uids and folders."""
    from supervisor._face import rebind_agent
    from supervisor.config import load_agent_file, load_config, reference_environ

    policy = load_config(args.policy, []).policy
    state_dir = os.path.abspath(args.state_dir or policy.state_dir)
    agent = load_agent_file(os.path.realpath(args.file), reference_environ(policy.credentials, os.environ))
    if agent.slug != args.slug:
        return _fail(f"{args.file} is the agent file of slug {agent.slug!r}, not {args.slug!r}; nothing changed")
    if not os.path.isdir(state_dir):
        return _fail(f"the state directory {state_dir} does not exist; nothing is bound yet")
    bound, before = rebind_agent(state_dir, args.slug, os.path.join(os.getcwd(), args.file))
    print(
        f"agent slug {args.slug}: bound to {bound}"
        + (f" (was {before})" if before else "")
        + "; its toolboxes keep their uids, work folders and HOME"
    )
    return 0


def _fail(message: str, code: int = EXIT_ERROR) -> int:
    print(f"agents-supervise: error: {message}", file=sys.stderr)
    return code


async def _serve(args: argparse.Namespace) -> int:
    from supervisor._face import open_service

    http = getattr(args, "http", None)
    if http is not None and args.slug is not None:
        return _fail(
            "--agent SLUG/--serve-agent bind a stdio session; over HTTP each agent has its endpoint "
            "/agents/<slug>/mcp, and a client picks it by its URL"
        )
    if http is not None:
        from supervisor.config import load_config

        from ._http_auth import http_frontend_from_policy
        from ._http_server import HttpService

        settings, auth = await http_frontend_from_policy(load_config(args.policy, args.agent).policy, http or None)
    elif args.slug is not None and isinstance(checked := _config_for(args), int):
        return checked  # the agent to bind is not loaded: said before any worker starts
    async with open_service(args.policy, agents=args.agent, state_dir=args.state_dir) as sup:
        for w in sup.warnings():
            print(f"agents-supervise: warning: {w}", file=sys.stderr)
        _print_load_errors(sup)
        if http is None:
            from ._mcp_stdio import bound_agent

            try:
                agent = bound_agent(sup, args.slug)
            except ValueError as exc:
                return _fail(str(exc))
        async with trio.open_nursery() as nursery:
            service = HttpService(sup, settings, auth, http or None) if http is not None else None
            nursery.start_soon(_on_signals, nursery, sup, service)
            if service is not None:
                address = await nursery.start(service.run)
                print(f"agents-supervise: serving MCP over HTTP at {address}/agents/<slug>/mcp", file=sys.stderr)
                notify_or_warn(f"READY=1\nSTATUS=serving MCP over HTTP at {address}")  # workers started, listening
                return 0  # serves until a signal ends the nursery

            async def serve() -> None:
                from ._mcp_stdio import serve_mcp_stdio

                await serve_mcp_stdio(sup, agent)
                nursery.cancel_scope.cancel()  # EOF from the frontend: shut down cleanly

            nursery.start_soon(serve)
            notify_or_warn(f"READY=1\nSTATUS=serving MCP over stdio to agent {agent}")
    return 0


async def _on_signals(nursery: trio.Nursery, sup: ToolService, http: HttpService | None = None) -> None:
    """SIGTERM or SIGINT: leave the serving loop so that every worker is stopped and the trace closed (an HTTP
    service first drains for ``frontends.http.drain_s``, its ``/readyz`` saying not ready; a second signal stops at
    once). SIGHUP: reload the policy (:meth:`Supervisor.reload`), saying on stderr what changed or why nothing did."""

    async def drain_then_stop() -> None:
        assert http is not None
        await http.drain()
        nursery.cancel_scope.cancel()

    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for signum in signals:
            sup.trace.record("signal", signal=signal.Signals(signum).name)
            if signum == signal.SIGHUP:
                nursery.start_soon(_reload, sup)
                continue
            notify_or_warn("STOPPING=1\nSTATUS=stopping: " + signal.Signals(signum).name)
            if http is not None and not http.app.draining and http.settings.drain_s > 0:
                nursery.start_soon(drain_then_stop)
                continue
            nursery.cancel_scope.cancel()
            return


async def _reload(sup: ToolService) -> None:
    notify_or_warn(reloading_message())
    outcome = await sup.reload()
    notify_or_warn("READY=1\nSTATUS=" + outcome.describe()[:500])
    print(f"agents-supervise: {outcome.describe()}", file=sys.stderr, flush=True)
    if outcome.refused is None:
        for w in outcome.warnings:
            print(f"agents-supervise: warning: {w}", file=sys.stderr)
        _print_load_errors(sup)


async def _tools(args: argparse.Namespace) -> int:
    from supervisor._face import open_service

    config = _config_for(args)
    if isinstance(config, int):
        return config
    async with open_service(config, state_dir=args.state_dir) as sup:
        tools = sup.list_tools(agent=args.slug)
        renamed = sup.renamed()
        errors = sup.load_errors()
        warnings = sup.warnings()
        for w in warnings:  # on stderr, as serve shows them (removed allowedPaths, missing paths ...)
            print(f"agents-supervise: warning: {w}", file=sys.stderr)
        if args.json:
            print(
                json.dumps(
                    {
                        "tools": [
                            {
                                "name": t.name,
                                "toolbox": t.toolbox,
                                "agent": t.agent,
                                "namespace": t.namespace,
                                "local_name": t.local_name,
                                "description": t.description,
                                "input_schema": t.input_schema,
                            }
                            for t in tools
                        ],
                        "renamed": renamed,
                        "load_errors": errors,
                        "warnings": warnings,
                    },
                    indent=2,
                )
            )
            return 0
        for t in tools:
            first = (t.description.splitlines() or [""])[0]
            whose = f"{t.agent}/{t.toolbox}" + (f", for {t.namespace}" if t.namespace != t.agent else "")
            print(f"{t.name}  [{whose}]  {first}")
        for public, local in renamed.items():
            print(f"renamed: {local} -> {public}")
        for e in errors:
            print(f"load error: {load_error_line(e)}")
    return 0


def _config_for(args: argparse.Namespace) -> Any:
    """The loaded config of ``tools``/``call``, or the exit status when ``--agent SLUG`` names no loaded agent
    (said before any worker starts)."""
    from supervisor.config import expand_agents, load_config

    config = load_config(args.policy, args.agent)
    try:
        _check_slug(args.slug, [a.slug for a in expand_agents(config).config.agents])
    except ValueError as exc:
        return _fail(str(exc))
    return config


def _print_load_errors(sup: ToolService) -> None:
    """Each load error as one ``agents-supervise: load error: ...`` line on stderr."""
    for e in sup.load_errors():
        print(f"agents-supervise: load error: {load_error_line(e)}", file=sys.stderr)


async def _call(args: argparse.Namespace) -> int:
    from supervisor._face import open_service

    try:
        arguments = json.loads(args.arguments)
    except json.JSONDecodeError as exc:
        return _fail(f"the arguments are not valid JSON: {exc}")
    except (RecursionError, ValueError) as exc:  # nested too deeply, a number of more than 4300 digits
        return _fail(f"the arguments cannot be read: {type(exc).__name__}: {str(exc)[:200]}")
    config = _config_for(args)
    if isinstance(config, int):
        return config
    # Only the toolbox of the tool starts (and what it calls through the portal, as it calls it): a call of one
    # tool never waits for a whole policy's workers.
    async with open_service(config, state_dir=args.state_dir, start="on_demand") as sup:
        result = await sup.call(
            args.tool,
            arguments,
            session_id=_session_name(args),
            agent_scope=args.slug,
            conversation_id=args.conversation,
            turn_id=args.turn,
        )
        _print_load_errors(sup)  # of what started: a tool of a toolbox that did not load is "not found": say why
    print(json.dumps(result.to_wire(), indent=2, ensure_ascii=False))
    return {"passed": 0, "failed": EXIT_FAILED}.get(result.status, EXIT_ERROR)


async def _run(args: argparse.Namespace) -> int:
    from supervisor._face import open_service

    async with open_service(args.policy, agents=args.agent, state_dir=args.state_dir) as sup:
        result = await sup.run_agent(
            args.slug, args.prompt, session_id=_session_name(args), conversation_id=args.conversation, turn_id=args.turn
        )
    if result.status != "passed":
        return _fail(result.data or result.summary or "the agent failed", EXIT_ERROR)
    print(result.data or "")
    return 0


def _trace(args: argparse.Namespace) -> int:
    from supervisor._face import load_trace, render_text, report

    try:
        data = report(load_trace(args.file))
    except OSError as exc:
        return _fail(f"cannot read the trace file: {exc.strerror or exc}: {args.file}")
    print(json.dumps(data, indent=2, ensure_ascii=False) if args.json else render_text(data))
    return 0


def _schema(args: argparse.Namespace) -> int:
    from supervisor.config import agent_json_schema, policy_json_schema

    print(json.dumps(agent_json_schema() if args.agent_file else policy_json_schema(), indent=2))
    return 0


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
        return _fail(str(exc))
    return 0


def _command(args: argparse.Namespace) -> int:
    """Run the command ``args`` names; its exit status."""
    command = args.command or "serve"
    if command == "schema":
        return _schema(args)
    if command == "trace":
        return _trace(args)
    if command == "hash-token":
        from ._http_auth import hash_token

        token = sys.stdin.readline().strip()
        if not token:
            return _fail("hash-token reads the token on its standard input (one line)")
        print(hash_token(token))
        return 0
    if command == "init":
        from ._cli_init import run_init

        return run_init(args.folder)
    if command == "check-tool-call":
        return _check_tool_call(args)
    if command == "uids":
        from ._cli_uids import run_uids

        return run_uids(args)
    if not args.policy:
        return _fail("--policy is required (for example: --policy policies/strict.yaml)")
    if command in ("serve", "tools", "call", "check") and (refused := _pick_agent(args, command)):
        return refused
    if command == "check":
        from ._cli_check import check

        return check(args)
    if command == "rebind-agent":
        return _rebind_agent(args)
    runner = {"serve": _serve, "tools": _tools, "call": _call, "run": _run}[command]
    return trio.run(runner, args)


def error_status(exc: BaseException) -> int:
    """The CLI's one error boundary: print what ended a command as one ``agents-supervise: error: ...`` line and
    return its exit status; never a traceback. An exception group is judged by its first leaf.

    - 2 (:data:`EXIT_ERROR`): what a person can fix: a policy or agent file that does not load (``ConfigError``:
      one line per problem), a policy this machine cannot enforce, a worker or the session store that cannot
      start (``SupervisorError``), a file that cannot be read or made (``OSError``);
    - 130: interrupted (Ctrl-C);
    - 70 (:data:`EXIT_INTERNAL`): anything else, a bug: its type and message on the line.

    ``call``'s own statuses (0 passed, 1 the tool failed, 2 error) come from the result, never from here: an
    exception is never a tool's failure.
    """
    leaf = first_leaf(exc) if isinstance(exc, BaseExceptionGroup) else exc
    if isinstance(leaf, KeyboardInterrupt):
        return 130
    if isinstance(leaf, ConfigError | SupervisorError):
        return _fail(str(leaf))
    if isinstance(leaf, OSError):
        return _fail(f"{leaf.strerror or leaf}: {leaf.filename or ''}".rstrip(": "))
    first = (str(leaf).splitlines() or [""])[0][:2000]
    return _fail(f"internal error: {type(leaf).__name__}: {first} (a bug: please report it)", EXIT_INTERNAL)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status (a usage error: 2, from argparse)."""
    args = _parser().parse_args(argv)
    try:
        return _command(args)
    except (Exception, KeyboardInterrupt, BaseExceptionGroup) as exc:  # the one boundary: one line, its status
        return error_status(exc)


if __name__ == "__main__":
    sys.exit(main())
    os._exit(0)
