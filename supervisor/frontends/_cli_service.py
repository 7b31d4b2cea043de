"""The commands that act through a started service and end: ``tools`` (list), ``call`` (one tool), ``run`` (an
agent's loop)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from supervisor.config import load_error_line

from ._cli_agents import config_for
from ._cli_errors import EXIT_ERROR, EXIT_FAILED, fail, print_load_errors, print_warnings

if TYPE_CHECKING:
    import argparse

__all__ = ["call_command", "run_command", "tools_command"]


def _session_name(args: argparse.Namespace) -> str:
    """The session name of a ``call`` or ``run``: ``--session``, else one unique to this run."""
    from supervisor._face import new_id

    return args.session if args.session is not None else f"cli-{new_id()}"


async def tools_command(args: argparse.Namespace) -> int:
    """``tools [--json]``: the tools (of ``args.slug``'s agent), renamed names, load errors and warnings."""
    from supervisor._face import open_service

    config = config_for(args)
    if isinstance(config, int):
        return config
    async with open_service(config, state_dir=args.state_dir) as sup:
        tools = sup.list_tools(agent=args.slug)
        renamed = sup.renamed()
        errors = sup.load_errors()
        warnings = sup.warnings()
        print_warnings(warnings)  # on stderr, as serve shows them (removed allowedPaths, missing paths ...)
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


async def call_command(args: argparse.Namespace) -> int:
    """``call TOOL 'JSON'``: one tool called, its result printed as JSON; 0 passed, 1 failed, 2 error."""
    from supervisor._face import open_service

    try:
        arguments = json.loads(args.arguments)
    except json.JSONDecodeError as exc:
        return fail(f"the arguments are not valid JSON: {exc}")
    except (RecursionError, ValueError) as exc:  # nested too deeply, a number of more than 4300 digits
        return fail(f"the arguments cannot be read: {type(exc).__name__}: {str(exc)[:200]}")
    config = config_for(args)
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
        print_load_errors(sup)  # of what started: a tool of a toolbox that did not load is "not found": say why
    print(json.dumps(result.to_wire(), indent=2, ensure_ascii=False))
    return {"passed": 0, "failed": EXIT_FAILED}.get(result.status, EXIT_ERROR)


async def run_command(args: argparse.Namespace) -> int:
    """``run --agent SLUG 'PROMPT'``: the agent's loop run, its answer printed; 0 answered, 2 error."""
    from supervisor._face import open_service

    async with open_service(args.policy, agents=args.agent, state_dir=args.state_dir) as sup:
        result = await sup.run_agent(
            args.slug, args.prompt, session_id=_session_name(args), conversation_id=args.conversation, turn_id=args.turn
        )
    if result.status != "passed":
        return fail(result.data or result.summary or "the agent failed", EXIT_ERROR)
    print(result.data or "")
    return 0
