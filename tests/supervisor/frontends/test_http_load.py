"""The HTTP service past its bounds, for real against ``agents-supervise serve --http``: a load past the server's
work in flight is shed (503 with ``Retry-After``) while what is admitted completes; one tenant's many large bodies
are refused past its byte budget (429) while another tenant's calls go on and the server's memory stays bounded.
Assertions are on behaviour with generous bounds, never on speed (that is ``scripts/bench``'s)."""

from __future__ import annotations

import json
import time
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import trio

from labkit import REVISION, LeanLane, RawSession
from supervisor.frontends._http_auth import hash_token
from tests._policies import agent, system_toolbox, write_policy
from tests.supervisor.frontends.test_mcp_http import _start

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

pytestmark = pytest.mark.root

ACME, GLOBEX = "load-acme-token", "load-globex-token"
MiB = 1024 * 1024


def _policy(root: Path, http: dict[str, Any], acme: dict[str, Any]) -> Path:
    return write_policy(
        root,
        {"alpha": agent("alpha", builtinToolboxes=[system_toolbox("system", ["execute-command", "date"])])},
        frontends={"http": {"listen": "127.0.0.1:0", **http}},
        tenants={
            "acme": {"tokens": [hash_token(ACME)], "agents": ["alpha"], "limits": acme},
            "globex": {"tokens": [hash_token(GLOBEX)], "agents": ["alpha"]},
        },
    )


def _call(req_id: int, name: str, arguments: dict[str, Any], meta: dict[str, Any] | None = None) -> bytes:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if meta is not None:
        params["_meta"] = meta
    return json.dumps({"jsonrpc": "2.0", "id": req_id, "method": "tools/call", "params": params}).encode()


def _headers(session: RawSession) -> dict[str, str]:
    return {**session.headers, "mcp-session-id": session.session_id or "", "mcp-protocol-version": REVISION}


def _most_at_once(records: list[dict[str, Any]]) -> int:
    """The most calls that ran at once, from the trace's call_start and call_end records."""
    events = sorted([(r["ts"], 1 if r["event"] == "call_start" else -1) for r in records], key=lambda e: (e[0], e[1]))
    most = running = 0
    for _, step in events:
        running += step
        most = max(most, running)
    return most


@pytest.mark.slow
async def test_past_the_servers_work_bound_requests_are_shed_and_admitted_ones_complete(sandbox_tmp: Path) -> None:
    """24 sessions calling a 0.3 s tool in a loop against a server that answers 4 requests at once."""
    policy = _policy(sandbox_tmp, {"max_requests_in_flight": 4}, {"concurrent_calls": 64})
    async with _start(policy) as server:
        admitted: list[float] = []
        shed: list[httpx.Response] = []
        async with httpx.AsyncClient(headers={"authorization": f"Bearer {ACME}"}, timeout=60) as client:

            async def caller(until: float) -> None:
                session = RawSession(client, server.url("alpha"))
                await session.open()
                n = 100
                while time.monotonic() < until:
                    n += 1
                    began = time.monotonic()
                    body = _call(n, "system_system_execute_command", {"command": "sleep 0.3"})
                    answer = await client.post(session.url, headers=_headers(session), content=body)
                    if answer.status_code == 503:
                        shed.append(answer)
                        await trio.sleep(0.05)  # a real client waits Retry-After; this one presses on to load
                        continue
                    assert answer.status_code == 200, answer.text
                    result = answer.json()["result"]
                    assert not result["isError"], result
                    admitted.append(time.monotonic() - began)

            with trio.fail_after(120):
                async with trio.open_nursery() as nursery:
                    until = time.monotonic() + 6
                    for _ in range(24):
                        nursery.start_soon(caller, until)
        assert shed, "nothing was shed past the bound"
        refusal = shed[0]
        assert int(refusal.headers["retry-after"]) >= 1
        error = refusal.json()["error"]
        assert "max_requests_in_flight" in error["message"] and "retry in" in error["message"]
        assert error["data"]["retryAfterSeconds"] >= 1 and error["data"]["limit"] == "max_requests_in_flight"
        assert len(admitted) >= 8, len(admitted)  # the admitted ones completed, the server kept answering
        assert max(admitted) < 15, max(admitted)  # generous: 0.3 s of work, never a queue behind the bound
        calls = [r for r in server.records("call_start") + server.records("call_end") if "tool" in r]
        assert _most_at_once(calls) <= 4
        traced = [r for r in server.records("http_refused") if r["status"] == 503]
        assert traced and all("max_requests_in_flight" in r["why"] for r in traced)
        # shed at the head, before the request is authenticated (no tenant named), or, when a place was free at
        # its head and taken before its body was read, by the admission after (acme's)
        assert {r["tenant"] for r in traced} <= {None, "acme"} and any(r["tenant"] is None for r in traced)
        assert sum(r.get("refused", 1) for r in traced) <= len(shed)  # throttled: counted, not one record each


@asynccontextmanager
async def _closing(lane: LeanLane) -> AsyncIterator[None]:
    try:
        yield
    finally:
        await lane.aclose()


async def _head_only(url: str, headers: dict[str, str], length: int) -> bytes:
    """Send a POST's head announcing a body of ``length`` bytes, never the body; everything the server sends until
    it closes its side (within 20 s)."""
    parsed = httpx.URL(url)
    stream = await trio.open_tcp_stream(parsed.host, parsed.port or 80)
    head = {"host": f"{parsed.host}:{parsed.port}", "content-type": "application/json", **headers}
    lines = "".join(f"{k}: {v}\r\n" for k, v in {**head, "content-length": str(length)}.items())
    await stream.send_all(f"POST {parsed.raw_path.decode()} HTTP/1.1\r\n{lines}\r\n".encode())
    answer = b""
    async with stream:
        with trio.fail_after(20):
            while chunk := await stream.receive_some(65536):
                answer += chunk
    return answer


@pytest.mark.slow
async def test_past_the_bound_a_request_is_refused_at_its_head_and_admitted_calls_complete(sandbox_tmp: Path) -> None:
    """A server that answers one request at once, held by a call of 5 s: a request announcing a 4 MiB body is
    answered 503 with Retry-After from its head alone (its body is never sent, the server closes after the answer);
    a small call on a keep-alive connection is answered 503 and the connection kept; a notification is still
    served; the call that held the place completes, and the kept connection's next call succeeds."""
    policy = _policy(sandbox_tmp, {"max_requests_in_flight": 1}, {"concurrent_calls": 64})
    async with _start(policy) as server:
        async with httpx.AsyncClient(headers={"authorization": f"Bearer {ACME}"}, timeout=60) as client:
            session = RawSession(client, server.url("alpha"))
            await session.open()
            headers = {"authorization": f"Bearer {ACME}", "mcp-session-id": session.session_id or ""}
            lane = LeanLane(server.url("alpha"), headers, session.session_id, "system_system_date")
            long_call: list[dict[str, Any]] = []

            async def hold_the_place() -> None:
                body = _call(1, "system_system_execute_command", {"command": "sleep 5"})
                answer = await client.post(session.url, headers=_headers(session), content=body)
                while answer.status_code == 503:  # the lane's call held the place: this one is let in next
                    await trio.sleep(0.02)
                    answer = await client.post(session.url, headers=_headers(session), content=body)
                long_call.append({"status": answer.status_code, **answer.json()})

            async with _closing(lane):
                with trio.fail_after(60):
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(hold_the_place)
                        status, retry = await lane.answer()
                        while status == 200:  # until the long call holds the only place
                            await trio.sleep(0.05)
                            status, retry = await lane.answer()
                        kept = lane.stream
                        assert status == 503 and retry is not None and retry >= 1, (status, retry)
                        assert kept is not None  # the connection stays open after a request shed with its body

                        raw = await _head_only(
                            server.url("alpha"), {**headers, "mcp-protocol-version": REVISION}, 4 * MiB
                        )
                        head, _, body = raw.partition(b"\r\n\r\n")
                        lowered = head.lower()
                        assert lowered.startswith(b"http/1.1 503"), raw[:300]
                        assert b"\r\nretry-after: " in lowered and b"\r\nconnection: close" in lowered, head
                        error = json.loads(body)["error"]
                        assert (
                            error["data"]["limit"] == "max_requests_in_flight"
                            and error["data"]["retryAfterSeconds"] >= 1
                        )

                        cancel = b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":999}}'
                        noted = await client.post(session.url, headers=_headers(session), content=cancel)
                        assert noted.status_code == 202, noted.text  # a notification is never shed

                    assert long_call and long_call[0]["status"] == 200, long_call
                    assert not long_call[0]["result"]["isError"], long_call
                    await lane.call()  # the place is free again: the kept connection serves the next call
                    assert lane.stream is kept
        traced = [r for r in server.records("http_refused") if r["status"] == 503]
        assert traced and all("max_requests_in_flight" in r["why"] for r in traced)
        assert any(r["tenant"] is None for r in traced)  # shed at the head, before it was authenticated


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


async def test_one_tenants_large_bodies_beside_another_tenants_calls(sandbox_tmp: Path) -> None:
    """acme sends 32 bodies of 4 MiB at once, each a call that runs 1 s (so the bytes are held); its budget holds
    two. The others are refused 429 with Retry-After, globex's calls all succeed meanwhile, and the server's memory
    grows by far less than the 128 MiB sent (unbounded, each body and its parsed copy were held at once)."""
    policy = _policy(
        sandbox_tmp,
        {"max_body_bytes": 5 * MiB, "max_body_bytes_in_flight": 16 * MiB},
        {"body_bytes_in_flight": 10 * MiB},
    )
    async with _start(policy) as server:
        pid = server.process.pid
        statuses: list[int] = []
        refusals: list[httpx.Response] = []
        globex_slowest = 0.0
        globex_calls = 0
        peak = base = _rss_mib(pid)
        done = trio.Event()
        async with (
            httpx.AsyncClient(headers={"authorization": f"Bearer {ACME}"}, timeout=60) as acme,
            httpx.AsyncClient(headers={"authorization": f"Bearer {GLOBEX}"}, timeout=60) as globex,
        ):
            big = RawSession(acme, server.url("alpha"))
            await big.open()
            small = RawSession(globex, server.url("alpha"))
            await small.open()

            async def large(n: int) -> None:
                body = _call(n, "system_system_execute_command", {"command": "sleep 1"}, {"pad": "x" * (4 * MiB)})
                answer = await acme.post(big.url, headers=_headers(big), content=body)
                statuses.append(answer.status_code)
                if answer.status_code != 200:
                    refusals.append(answer)

            async def other_tenant() -> None:
                nonlocal globex_slowest, globex_calls
                while not done.is_set():
                    began = time.monotonic()
                    result = await small.request("tools/call", {"name": "system_system_date", "arguments": {}})
                    assert not result["isError"], result
                    globex_slowest = max(globex_slowest, time.monotonic() - began)
                    globex_calls += 1

            async def watch_memory() -> None:
                nonlocal peak
                while not done.is_set():
                    peak = max(peak, _rss_mib(pid))
                    await trio.sleep(0.02)

            with trio.fail_after(120):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(other_tenant)
                    nursery.start_soon(watch_memory)
                    async with trio.open_nursery() as flood:
                        for n in range(32):
                            flood.start_soon(large, 1000 + n)
                    done.set()
        assert statuses.count(200) >= 2 and refusals, statuses
        assert {r.status_code for r in refusals} <= {429, 503}, {r.status_code for r in refusals}
        tenant_refusal = next(r for r in refusals if r.status_code == 429)
        assert int(tenant_refusal.headers["retry-after"]) >= 1
        assert "body_bytes_in_flight" in tenant_refusal.json()["error"]["message"]
        assert globex_calls >= 3 and globex_slowest < 10, (globex_calls, globex_slowest)
        assert peak - base < 96, (base, peak)  # 128 MiB were sent; the budgets hold 16 at most
