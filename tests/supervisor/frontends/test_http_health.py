"""The HTTP frontend's probes: ``/healthz`` (liveness) and ``/readyz`` (readiness), against the real
``agents-supervise serve --http``, and the pure answer they are built from."""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

import httpx
import pytest
import trio

from labkit import RawSession
from supervisor.frontends._http_auth import hash_token
from supervisor.frontends._http_health import health_answer
from tests._policies import agent, system_toolbox, write_policy
from tests.supervisor.frontends.test_mcp_http import _start

if TYPE_CHECKING:
    from pathlib import Path

TOKEN = "health-token"


def test_liveness_is_ok_whatever_the_state_and_readiness_follows_start_and_drain() -> None:
    for started, draining in [(False, False), (True, False), (True, True)]:
        assert health_answer("/healthz", "GET", started=started, draining=draining).status == 200
    assert health_answer("/readyz", "GET", started=True, draining=False).body == {"status": "ready"}
    starting = health_answer("/readyz", "GET", started=False, draining=False)
    assert starting.status == 503 and "starting" in starting.body["reason"] and dict(starting.headers)["retry-after"]
    draining = health_answer("/readyz", "HEAD", started=True, draining=True)
    assert draining.status == 503 and "shutting down" in draining.body["reason"]
    assert health_answer("/readyz", "POST", started=True, draining=False).status == 405


@pytest.mark.root
async def test_probes_answer_without_a_token_and_readiness_turns_off_while_draining(sandbox_tmp: Path) -> None:
    policy = write_policy(
        sandbox_tmp,
        {"alpha": agent("alpha", builtinToolboxes=[system_toolbox("system", ["date"])])},
        frontends={"http": {"listen": "127.0.0.1:0", "drain_s": 60}},
        tenants={"acme": {"tokens": [hash_token(TOKEN)], "agents": ["alpha"]}},
    )
    async with _start(policy) as server, httpx.AsyncClient(timeout=30) as client:
        live = await client.get(f"{server.base}/healthz")
        assert live.status_code == 200 and live.json() == {"status": "ok"}  # no token, no tenant or agent named
        assert (await client.head(f"{server.base}/healthz")).status_code == 200
        ready = await client.get(f"{server.base}/readyz")
        assert ready.status_code == 200 and ready.json() == {"status": "ready"}
        session = RawSession(client, server.url("alpha"), {"authorization": f"Bearer {TOKEN}"})
        await session.open()

        server.process.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            while (await client.get(f"{server.base}/readyz")).status_code == 200:  # noqa: ASYNC110 (another process)
                await trio.sleep(0.05)
        not_ready = await client.get(f"{server.base}/readyz")
        assert not_ready.status_code == 503 and "shutting down" in not_ready.json()["reason"]
        assert not_ready.headers["retry-after"]
        # While it drains it still serves: liveness, and a tenant's calls.
        assert (await client.get(f"{server.base}/healthz")).status_code == 200
        result = await session.request("tools/call", {"name": "system_system_date", "arguments": {}})
        assert not result.get("isError"), result
        assert server.process.returncode is None
        assert any(r.get("drain_s") == 60 for r in server.records("http_draining"))
        # A second signal stops it at once.
        server.process.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            await server.process.wait()
