"""The HTTP server under :class:`~supervisor.frontends._mcp_http.McpHttpApp`: where it listens, TLS, and its bounds."""

from __future__ import annotations

import trio

from supervisor._supervisor import Supervisor
from supervisor.config import HttpFrontend, normalise_origin, parse_listen

from ._http_auth import Authenticator
from ._mcp_http import McpHttpApp

__all__ = ["serve_mcp_http"]


async def serve_mcp_http(sup: Supervisor, settings: HttpFrontend, auth: Authenticator, *,
                         task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve MCP over HTTP until cancelled; ``task_status.started`` gets the address it listens at."""
    from hypercorn.config import Config
    from hypercorn.trio import serve

    policy = sup.compiled.config.policy
    app = McpHttpApp(sup, settings, dict(policy.tenants), policy.oauth, auth)
    config = Config()
    host, port = parse_listen(settings.listen)
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    if settings.tls is not None:
        config.certfile = settings.tls.cert
        config.keyfile = settings.tls.key
    config.accesslog = None
    config.errorlog = None
    config.include_server_header = False
    config.keep_alive_timeout = 30
    config.h11_max_incomplete_size = 64 * 1024
    async with trio.open_nursery() as nursery:
        await nursery.start(app.run)

        async def started(task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
            await serve(app, config, shutdown_trigger=trio.sleep_forever, task_status=task_status)

        binds = await nursery.start(started)
        if settings.public_url is None and binds:
            app.base_url = binds[0].rstrip("/")  # the port the system chose for :0
            app.origins.add(normalise_origin(app.base_url))
        task_status.started(app.base_url)
