"""systemd's readiness protocol, as the unit's ``Type=notify`` uses it: a real ``serve --http`` with
``$NOTIFY_SOCKET`` set says ``READY=1`` only once it serves (its ``/readyz`` answers 200 then), frames a SIGHUP
reload with ``RELOADING=1`` and ``READY=1``, and says ``STOPPING=1`` on SIGTERM. The socket is the test's own, bound
where systemd would bind its own (no systemd runs as PID 1 here)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from supervisor.frontends._http_auth import hash_token
from supervisor.frontends._sd_notify import notify, notify_address
from tests._policies import agent, system_toolbox, write_policy

REPO = str(Path(__file__).resolve().parents[2])


def test_the_notify_socket_address() -> None:
    assert notify_address({"NOTIFY_SOCKET": "/run/systemd/notify"}) == "/run/systemd/notify"
    assert notify_address({"NOTIFY_SOCKET": "@abstract/name"}) == b"\0abstract/name"
    assert notify_address({}) is None and notify_address({"NOTIFY_SOCKET": "vsock:2:1234"}) is None
    assert notify("READY=1", {}) is False  # not under systemd: nothing sent, no error


def test_a_notification_is_one_datagram(tmp_path: Path) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
        server.bind(str(tmp_path / "notify"))
        assert notify("READY=1\nSTATUS=up", {"NOTIFY_SOCKET": str(tmp_path / "notify")}) is True
        assert server.recv(4096) == b"READY=1\nSTATUS=up"
    with pytest.raises(ConnectionRefusedError):  # a socket no one reads is said, not ignored
        notify("READY=1", {"NOTIFY_SOCKET": str(tmp_path / "notify")})


async def _next(server: trio.socket.SocketType) -> dict[str, str]:
    with trio.fail_after(120):
        data = await server.recv(65536)
    return dict(line.split("=", 1) for line in data.decode().splitlines())


@pytest.mark.root
async def test_serve_says_ready_reloading_and_stopping(sandbox_tmp: Path) -> None:
    policy = write_policy(
        sandbox_tmp,
        {"alpha": agent("alpha", builtinToolboxes=[system_toolbox("system", ["date"])])},
        frontends={"http": {"listen": "127.0.0.1:0"}},
        tenants={"ops": {"tokens": [hash_token("ops-token")], "agents": ["alpha"]}},
    )
    server = trio.socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = str(sandbox_tmp / "notify")
    await server.bind(path)
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "supervisor", "serve", "--http", "--policy", str(policy)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": REPO, "NOTIFY_SOCKET": path},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        ready = await _next(server)
        assert ready["READY"] == "1", ready
        url = re.search(r"serving MCP over HTTP at (\S+)", ready["STATUS"]).group(1)  # type: ignore[union-attr]
        probe = await trio.run_process(["curl", "-s", "-w", " %{http_code}", f"{url}/readyz"], capture_stdout=True)
        body, code = probe.stdout.decode().rsplit(" ", 1)
        assert code == "200" and json.loads(body)["status"] == "ready"  # READY=1 came once it serves

        process.send_signal(signal.SIGHUP)
        reloading = await _next(server)
        assert reloading["RELOADING"] == "1" and int(reloading["MONOTONIC_USEC"]) > 0
        again = await _next(server)
        assert again["READY"] == "1" and "the policy was reloaded" in again["STATUS"], again

        process.send_signal(signal.SIGTERM)
        assert (await _next(server))["STOPPING"] == "1"
        with trio.fail_after(60):
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        server.close()
