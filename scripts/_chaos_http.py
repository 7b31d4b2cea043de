"""The HTTP faults of ``scripts/chaos http``: the service as an operator runs it, under every fault a client or a
peer can throw at it, at once.

``agents-supervise serve --http`` runs the chaos lab (``scripts/_chaos_lab.py``) in a process of its own, with two
tenants. For ``--seconds``, all together:

- **the tenant's work**: ``acme``'s sessions call the lab's tools in a loop, each call with a nonce its answer
  must echo; every answer is classified (passed, a tool error, refused with ``Retry-After``, lost: no answer within
  the call's limit and grace or a broken connection, cross-wired: another call's nonce);
- **a load past the server's work bound**: ``globex``'s lanes call a trivial tool in a loop, more than
  ``frontends.http.max_requests_in_flight`` at once, so that the server sheds (503 with ``Retry-After``);
- **a slowloris** from another loopback address (``labkit.Slowloris``): connections trickling request heads;
- **clients that disconnect mid-call**: a ``tools/call`` of a command that takes 2 s, the connection closed 0.1-0.5
  s after the request;
- **a stream reopened**: one session's ``GET`` event stream (with ``logging/setLevel`` set, so the workers' restarts
  are told on it) closed and opened again and again; the time to its response head is kept;
- **oversized bodies**: ``POST``s past ``max_body_bytes``, by ``Content-Length`` and chunked;
- **the killer**: SIGKILL, or SIGSTOP then SIGCONT, of a random worker of the service every 0.2-0.6 s.

Then the service must still serve a new session, ``/healthz`` must answer 200, and SIGTERM must end it and every
process it started. From its trace: every ``call_start`` has one ``call_end`` (no call left hanging, none answered
twice). Refusals must be 503 or 429 with ``Retry-After``; any other 5xx is counted as ``server_errors``.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import statistics
import subprocess
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

import httpx
import psutil
import trio
from _bench_common import start_http_service
from _chaos_lab import NONCE_RE, Lab

from labkit import REVISION, RawSession, Slowloris, answer_of
from supervisor.frontends._http_auth import hash_token

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["KINDS", "http_chaos", "http_policy"]

TOKENS = {"acme": "chaos-acme-token", "globex": "chaos-globex-token"}
#: the toolbox kinds of the HTTP chaos lab (the HTTP faults are the point; these start in seconds)
KINDS = frozenset({"system", "lua", "sqlite", "bash", "mcp"})
MAX_BODY = 1 << 20
NONCE = re.compile(NONCE_RE)
_ACCEPT = "application/json, text/event-stream"


def http_policy(max_in_flight: int) -> dict[str, Any]:
    """The policy keys the lab gets for the HTTP chaos: the frontend with a small work bound and tight head timeout,
    and two tenants on the lab's agent whose own limits stay out of the way (the server's bound is the one hit)."""
    limits = {"concurrent_calls": 1024, "sessions": 256}
    return {
        "frontends": {
            "http": {
                "listen": "127.0.0.1:0",
                "max_body_bytes": MAX_BODY,
                "head_timeout_s": 3,
                "max_requests_in_flight": max_in_flight,
                "max_connections": 1024,
            }
        },
        "tenants": {
            name: {"tokens": [hash_token(token)], "agents": ["chaos"], "limits": dict(limits)}
            for name, token in TOKENS.items()
        },
        "sessions": {"max_calls": None, "max_concurrent_calls": 64},
    }


class Service:
    """The ``serve --http`` process (``_bench_common.start_http_service``: started, its stderr read): its URL, its
    workers."""

    def __init__(self, policy: Path) -> None:
        self.process, url = start_http_service(policy)
        self.base = url.split("/agents/")[0]

    @property
    def url(self) -> str:
        return f"{self.base}/agents/chaos/mcp"

    def workers(self) -> list[int]:
        """The pids of the service's workers: the first process of each tree that runs as another user than root
        (forked by the zygote, or started by a launcher)."""
        try:
            tree = psutil.Process(self.process.pid).children(recursive=True)
        except psutil.Error:
            return []
        out = []
        for proc in tree:
            with contextlib.suppress(psutil.Error):
                if proc.uids().real != 0 and psutil.Process(proc.ppid()).uids().real == 0:
                    out.append(proc.pid)
        return out

    def tree(self) -> list[int]:
        with contextlib.suppress(psutil.Error):
            return [p.pid for p in psutil.Process(self.process.pid).children(recursive=True)]
        return []

    def stop(self, timeout: float = 60) -> tuple[int | None, float]:
        """SIGTERM, then wait: ``(exit status or None when it had to be killed, seconds it took)``."""
        start = time.monotonic()
        self.process.terminate()
        try:
            code: int | None = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            code = None
        return code, time.monotonic() - start


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _answer(response: httpx.Response, req_id: int) -> dict[str, Any] | None:
    """The JSON-RPC answer to ``req_id`` in a 200 (``labkit.answer_of``), or ``None`` when it holds none."""
    try:
        return answer_of(response, req_id)
    except (RuntimeError, ValueError):
        return None


class Run:
    """The figures of one run, and what every fault shares: the service, the RNG, the stop event."""

    def __init__(self, service: Service, the_lab: Lab, rng: random.Random, limit_s: float) -> None:
        self.service, self.lab, self.rng, self.limit_s = service, the_lab, rng, limit_s
        self.f: Counter[str] = Counter()
        self.causes: Counter[str] = Counter()
        self.latencies: list[float] = []
        self.stream_heads: list[float] = []
        self.stop = trio.Event()
        self.serial = 0

    def headers(self, tenant: str, session: RawSession | None = None) -> dict[str, str]:
        out = {"authorization": f"Bearer {TOKENS[tenant]}", "accept": _ACCEPT, "content-type": "application/json"}
        if session is not None and session.session_id:
            out |= {"mcp-session-id": session.session_id, "mcp-protocol-version": REVISION}
        return out

    async def session(self, client: httpx.AsyncClient, tenant: str) -> RawSession:
        """A new session of ``tenant`` (retried while the server sheds)."""
        while True:
            session = RawSession(client, self.service.url, {"authorization": f"Bearer {TOKENS[tenant]}"})
            try:
                await session.open()
                return session
            except (RuntimeError, httpx.HTTPError) as exc:
                self.f[f"{tenant}_session_retries"] += 1
                if self.stop.is_set():
                    raise
                self.causes[f"session open: {str(exc)[:60]}"] += 1
                await trio.sleep(0.2)

    def refused(self, who: str, response: httpx.Response) -> float:
        """Count a refusal; the seconds to wait (``Retry-After``, at most 1 s here to keep the pressure on)."""
        wait = _retry_after(response)
        self.f[f"{who}_refused_{response.status_code}"] += 1
        if wait is None:
            self.f["refused_without_retry_after"] += 1
            wait = 0.5
        return min(wait, 1.0)

    async def tenant_lane(self, client: httpx.AsyncClient) -> None:
        """One of acme's sessions calling the lab's tools in a loop until the stop."""
        session = await self.session(client, "acme")
        while not self.stop.is_set():
            self.serial += 1
            kind, tool, args, nonce = self.lab.call(self.rng, self.serial, f"http-{id(session)}")
            params = {"name": tool, "arguments": args}
            body = json.dumps({"jsonrpc": "2.0", "id": self.serial, "method": "tools/call", "params": params}).encode()
            self.f["calls"] += 1
            began = time.monotonic()
            try:
                with trio.fail_after(self.limit_s + 30):
                    response = await client.post(self.service.url, headers=self.headers("acme", session), content=body)
            except (trio.TooSlowError, httpx.HTTPError) as exc:
                self.f["lost"] += 1
                self.causes[f"lost: {type(exc).__name__}"] += 1
                continue
            if response.status_code in (429, 503):
                await trio.sleep(self.refused("acme", response))
                continue
            if response.status_code == 404:  # the session ended (idle or a restart): a new one, as a client does
                self.f["sessions_reopened"] += 1
                session = await self.session(client, "acme")
                continue
            if response.status_code != 200:
                self.f[f"http_{response.status_code}"] += 1
                self.f["server_errors" if response.status_code >= 500 else "client_errors"] += 1
                self.causes[f"HTTP {response.status_code}: {response.text[:60]}"] += 1
                continue
            answer = _answer(response, self.serial)
            if answer is None or "result" not in answer:
                self.f["rpc_errors"] += 1
                self.causes[f"JSON-RPC: {str(answer)[:70]}"] += 1
                continue
            self.f["answered"] += 1
            self.latencies.append(time.monotonic() - began)
            text = json.dumps(answer["result"])
            if set(NONCE.findall(text)) - {nonce}:
                self.f["cross_wired"] += 1
            elif answer["result"].get("isError"):
                self.f["tool_errors"] += 1
                self.causes[f"{kind}: " + re.sub(r"\d+", "N", text[:70])] += 1
            elif nonce in text:
                self.f["passed"] += 1
            else:
                self.f["cross_wired"] += 1  # a pass without its own nonce

    async def flood_lane(self, client: httpx.AsyncClient) -> None:
        """One of globex's lanes calling a trivial tool in a loop: together past the server's work bound."""
        session = await self.session(client, "globex")
        body = json.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "system_sys0_date", "arguments": {}}}
        ).encode()
        while not self.stop.is_set():
            try:
                with trio.fail_after(self.limit_s + 30):
                    response = await client.post(
                        self.service.url, headers=self.headers("globex", session), content=body
                    )
            except (trio.TooSlowError, httpx.HTTPError):
                self.f["flood_lost"] += 1
                continue
            if response.status_code in (429, 503):
                await trio.sleep(self.refused("flood", response))
            elif response.status_code == 404:
                session = await self.session(client, "globex")
            elif response.status_code != 200:
                self.f["flood_server_errors" if response.status_code >= 500 else "flood_client_errors"] += 1
            else:
                self.f["flood_answered"] += 1

    async def disconnector(self, client: httpx.AsyncClient) -> None:
        """A ``tools/call`` of a 2 s command, its connection closed 0.1-0.5 s after the request went."""
        session = await self.session(client, "globex")
        host, port = self.service.base.removeprefix("http://").rsplit(":", 1)
        while not self.stop.is_set():
            body = json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": {"name": "system_sys1_execute_command", "arguments": {"command": "sleep 2; echo late"}},
                }
            )
            head = {**self.headers("globex", session), "host": f"{host}:{port}", "content-length": str(len(body))}
            request = "POST /agents/chaos/mcp HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in head.items())
            with contextlib.suppress(OSError, trio.BrokenResourceError):
                stream = await trio.open_tcp_stream(host, int(port))
                try:
                    await stream.send_all((request + "\r\n" + body).encode())
                    await trio.sleep(self.rng.uniform(0.1, 0.5))
                    self.f["disconnects"] += 1
                finally:
                    await trio.aclose_forcefully(stream)
            await trio.sleep(self.rng.uniform(0.2, 0.6))

    async def streamer(self, client: httpx.AsyncClient) -> None:
        """One session's event stream closed and reopened again and again; the time to each response head kept."""
        session = await self.session(client, "globex")
        await client.post(
            self.service.url,
            headers=self.headers("globex", session),
            content=b'{"jsonrpc":"2.0","id":2,"method":"logging/setLevel","params":{"level":"debug"}}',
        )
        while not self.stop.is_set():
            began = time.monotonic()
            try:
                headers = {**self.headers("globex", session), "accept": "text/event-stream"}
                async with client.stream("GET", self.service.url, headers=headers) as response:
                    self.stream_heads.append(time.monotonic() - began)
                    self.f["streams_opened"] += 1
                    if response.status_code != 200:
                        self.f[f"stream_http_{response.status_code}"] += 1
                        if response.status_code == 404:
                            session = await self.session(client, "globex")
                        continue
                    with trio.move_on_after(self.rng.uniform(0.3, 3.0)):
                        async for line in response.aiter_lines():
                            if line.startswith("data:"):
                                self.f["stream_messages"] += 1
            except httpx.HTTPError as exc:
                self.f["stream_errors"] += 1
                self.causes[f"stream: {type(exc).__name__}"] += 1

    async def oversized(self, client: httpx.AsyncClient) -> None:
        """Bodies past ``max_body_bytes``: by ``Content-Length`` and chunked."""
        session = await self.session(client, "globex")
        big = b'{"jsonrpc":"2.0","id":3,"method":"ping","params":{"pad":"' + b"x" * (2 * MAX_BODY) + b'"}}'

        async def chunks() -> Any:
            for i in range(0, len(big), 65536):
                yield big[i : i + 65536]

        while not self.stop.is_set():
            chunked = self.rng.random() < 0.5
            try:
                response = await client.post(
                    self.service.url, headers=self.headers("globex", session), content=chunks() if chunked else big
                )
                self.f[f"oversized_{response.status_code}"] += 1
            except httpx.HTTPError as exc:  # the server may close before reading it all: a refusal too
                self.f["oversized_closed"] += 1
                self.causes[f"oversized: {type(exc).__name__}"] += 1
            await trio.sleep(self.rng.uniform(0.2, 0.5))

    async def killer(self) -> None:
        """SIGKILL, or SIGSTOP then SIGCONT, of a random worker of the service, every 0.2-0.6 s."""
        while not self.stop.is_set():
            await trio.sleep(self.rng.uniform(0.2, 0.6))
            workers = self.service.workers()
            if not workers:
                continue
            pid = self.rng.choice(workers)
            with contextlib.suppress(ProcessLookupError):
                if self.rng.random() < 0.7:
                    os.kill(pid, signal.SIGKILL)
                    self.f["chaos_kill"] += 1
                    continue
                os.kill(pid, signal.SIGSTOP)
                self.f["chaos_stop"] += 1
                try:
                    await trio.sleep(self.rng.uniform(0.2, 2.0))
                finally:  # also when the run ends meanwhile: no worker is left stopped
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGCONT)


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))] if ordered else 0.0


async def _after(run: Run, client: httpx.AsyncClient) -> None:
    """What must hold once the faults stop: a new session is served, /healthz answers."""
    try:
        with trio.fail_after(60):
            session = await run.session(client, "acme")
            result = await session.request("tools/call", {"name": "system_sys0_date", "arguments": {}})
        run.f["served_after"] = int(not result.get("isError"))
    except (RuntimeError, httpx.HTTPError, trio.TooSlowError) as exc:
        run.f["served_after"] = 0
        run.causes[f"after the run: {str(exc)[:80]}"] += 1
    health = await client.get(f"{run.service.base}/healthz")
    run.f["healthz_after"] = health.status_code


async def http_chaos(the_lab: Lab, args: Any) -> dict[str, Any]:
    """Run the HTTP chaos on ``the_lab`` (made with :func:`http_policy`'s keys); the figures, printed by the caller."""
    rng = random.Random(args.seed)
    service = Service(the_lab.policy)
    figures: dict[str, Any] = {}
    try:
        run = Run(service, the_lab, rng, limit_s=10)
        port = int(service.base.rsplit(":", 1)[1])
        loris = Slowloris(port, args.slowloris, 0.5, path="/agents/chaos/mcp")
        rss_before = psutil.Process(service.process.pid).memory_info().rss
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        async with httpx.AsyncClient(timeout=httpx.Timeout(60, connect=10), limits=limits) as client:
            async with trio.open_nursery() as faults:
                faults.start_soon(loris.run)
                faults.start_soon(run.killer)
                faults.start_soon(run.streamer, client)
                faults.start_soon(run.oversized, client)
                faults.start_soon(run.disconnector, client)
                for _ in range(args.flood):
                    faults.start_soon(run.flood_lane, client)
                async with trio.open_nursery() as tenants:
                    for _ in range(args.sessions):
                        tenants.start_soon(run.tenant_lane, client)
                    await trio.sleep(args.seconds)
                    run.stop.set()
                faults.cancel_scope.cancel()
            await trio.sleep(3)  # the workers stopped by the killer are back (SIGCONT was sent), restarts settle
            await _after(run, client)
            rss_after = psutil.Process(service.process.pid).memory_info().rss
            tree = service.tree()
            code, took = service.stop()
        await trio.sleep(2)
        left = [p for p in tree if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        records = [json.loads(line) for line in (the_lab.root / "state" / "trace.jsonl").read_text().splitlines()]
        starts = {r["call_id"] for r in records if r["event"] == "call_start"}
        ends = Counter(r["call_id"] for r in records if r["event"] == "call_end")
        f = run.f
        figures = {
            **f,
            "seconds": args.seconds,
            "sessions": args.sessions,
            "flood": args.flood,
            "p50_ms": 1000 * statistics.median(run.latencies) if run.latencies else 0.0,
            "p99_ms": 1000 * _pct(run.latencies, 0.99),
            "stream_head_p50_ms": 1000 * statistics.median(run.stream_heads) if run.stream_heads else 0.0,
            "stream_head_max_ms": 1000 * max(run.stream_heads, default=0.0),
            "slowloris_opened": loris.opened,
            "slowloris_closed_by_server": loris.closed_by_server,
            "slowloris_longest_s": max(loris.lifetimes, default=0.0),
            "unanswered_calls": len(starts - set(ends)),
            "duplicated": sum(1 for n in ends.values() if n > 1),
            "exit_status": code,
            "stop_s": took,
            "left": len(left),
            "rss_before_mb": rss_before / 2**20,
            "rss_after_mb": rss_after / 2**20,
            "restarts": sum(1 for r in records if r["event"] == "worker_restart"),
            "load": os.getloadavg()[0],
            "causes": dict(run.causes.most_common(8)),
        }
    finally:
        if service.process.poll() is None:
            service.process.kill()
            service.process.wait()
    return figures
