"""``agents-supervise serve``: MCP over stdio to one agent, or over Streamable HTTP; SIGTERM/SIGINT stop it
(an HTTP service drains first), SIGHUP reloads the policy; systemd hears of each step (:mod:`._sd_notify`)."""

from __future__ import annotations

import signal
import sys
from typing import TYPE_CHECKING

import trio

from ._cli_agents import config_for
from ._cli_errors import fail, print_load_errors, print_warnings
from ._sd_notify import notify_or_warn, reloading_message

if TYPE_CHECKING:
    import argparse

    from supervisor._face import ToolService

    from ._http_server import HttpService

__all__ = ["serve_command"]


async def serve_command(args: argparse.Namespace) -> int:
    """``serve``: MCP over stdio to the bound agent until EOF or a signal, or over HTTP (``--http``) until a
    signal; 0 when it ended cleanly, 2 when the command line or the policy cannot be served."""
    from supervisor._face import open_service

    http = getattr(args, "http", None)
    if http is not None and args.slug is not None:
        return fail(
            "--agent SLUG/--serve-agent bind a stdio session; over HTTP each agent has its endpoint "
            "/agents/<slug>/mcp, and a client picks it by its URL"
        )
    if http is not None:
        from supervisor.config import load_config

        from ._http_auth import http_frontend_from_policy
        from ._http_server import HttpService

        settings, auth = await http_frontend_from_policy(load_config(args.policy, args.agent).policy, http or None)
    elif args.slug is not None and isinstance(checked := config_for(args), int):
        return checked  # the agent to bind is not loaded: said before any worker starts
    async with open_service(args.policy, agents=args.agent, state_dir=args.state_dir) as sup:
        print_warnings(sup.warnings())
        print_load_errors(sup)
        if http is None:
            from ._mcp_stdio import bound_agent

            try:
                agent = bound_agent(sup, args.slug)
            except ValueError as exc:
                return fail(str(exc))
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
        print_warnings(outcome.warnings)
        print_load_errors(sup)
