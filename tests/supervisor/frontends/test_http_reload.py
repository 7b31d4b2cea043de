"""SIGHUP applies every section of the policy to a running HTTP service, or none of it.

A real ``serve --http`` process, sessions held over Streamable HTTP by curl and by the official MCP SDK client,
several tenants, the policy edited and a real SIGHUP sent:

- tenants: one added (its token works at once), one whose session limit shrank under what it holds (its sessions
  go on, a new one is refused 429), one removed (its sessions closed, its open event stream ended saying why, its
  token answered 401 saying the tenant is no longer configured), one whose token was rotated and whose agents
  shrank (its session on an agent still allowed goes on with the new token, the old token is refused saying it was
  withdrawn, its session on the agent taken away is closed: 403 naming the agent), one unchanged (its sessions
  untouched: the same session id, the next call served, the SDK client's session too);
- the HTTP frontend: a new ``listen`` address is bound before the old one closes (the old address refuses
  connections, the session goes on at the new one), a lower ``max_body_bytes``, ``max_connections`` and
  ``keepalive_s`` apply to new connections; a ``listen`` that cannot
  be bound refuses the whole reload (a tenant added in the same edit is not there, the trace did not move);
- the trace: moved to a new path (a ``trace_moved`` record ending the old file and beginning the new one, the
  calls after it in the new file), rotated at the new ``max_bytes``;
- ``sessions.keep_days``: a shorter retention prunes at once;
- ``state_dir``: a reload that moves it is refused, saying why, and nothing else of it applies;
- the OAuth key set read again (old key's tokens refused, the session goes on with a new key's token), TLS files
  read again (new connections get the renewed certificate), a session closed by a reload named again: 404 saying
  why it was closed.
"""

from __future__ import annotations

import json
import socket
import subprocess
from typing import TYPE_CHECKING, Any

import pytest
import trio
import yaml
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from supervisor.config import Tenant
from supervisor.frontends._http_auth import Authenticator, hash_token
from supervisor.frontends._http_reload import TenantPlan, plan_tenants
from supervisor.frontends._http_tenants import TenantState
from tests._policies import agent, system_toolbox, write_policy
from tests.supervisor._service import Service, serve_processes

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

pytestmark = pytest.mark.root

ACME, GLOBEX, UMBRELLA, UMBRELLA2 = "acme-tok", "globex-tok", "umbrella-tok", "umbrella-tok-2"
INITECH, HOOLI = "initech-tok", "hooli-tok"


# -- pure parts -------------------------------------------------------------------------------------------------


def _tenant(agents: list[str], *tokens: str, **limits: Any) -> Tenant:
    return Tenant(tokens=[hash_token(t) for t in tokens], agents=agents, limits=limits)


def test_plan_tenants_closes_only_what_lost_its_right() -> None:
    old = {"acme": _tenant(["a"], ACME), "globex": _tenant(["a"], GLOBEX), "umb": _tenant(["a", "b"], UMBRELLA)}
    new = {"acme": _tenant(["a"], ACME), "umb": _tenant(["a"], UMBRELLA2), "ini": _tenant(["b"], INITECH)}
    sessions = [("s1", "acme", "a"), ("s2", "globex", "a"), ("s3", "umb", "a"), ("s4", "umb", "b"), ("s5", "acme", "a")]
    plan = plan_tenants(old, new, sessions, {"a", "b"})
    assert plan.added == ("ini",) and plan.removed == ("globex",) and plan.changed == {"umb": ("tokens", "agents")}
    assert set(plan.closing) == {"s2", "s4"}
    assert "tenant 'globex' is no longer configured" in plan.closing["s2"]
    assert "tenant 'umb' may no longer use agent 'b'" in plan.closing["s4"]
    # an agent the policy no longer serves closes its sessions, whatever the tenant lists
    gone = plan_tenants(new, new, [("s1", "acme", "a")], {"b"})
    assert gone == TenantPlan(closing={"s1": "agent 'a' is no longer served here (a policy reload)"})
    assert plan_tenants(old, old, sessions, {"a", "b"}) == TenantPlan()


def test_withdrawn_tokens_and_removed_tenants_are_refused_saying_why() -> None:
    before = Authenticator({"acme": _tenant(["a"], ACME), "globex": _tenant(["a"], GLOBEX)})
    after = Authenticator({"acme": _tenant(["a"], ACME + "-new")})
    after.carry_retired(before)
    removed = after.authenticate(f"Bearer {GLOBEX}", agent="a", resources=("r",))
    assert removed.status == 401 and "tenant 'globex' is no longer configured" in removed.description  # type: ignore[union-attr]
    rotated = after.authenticate(f"Bearer {ACME}", agent="a", resources=("r",))
    assert rotated.status == 401 and "token of tenant 'acme' was withdrawn" in rotated.description  # type: ignore[union-attr]
    unknown = after.authenticate("Bearer never-was", agent="a", resources=("r",))
    assert unknown.description == "the token is not known to this server"  # type: ignore[union-attr]
    assert after.authenticate(f"Bearer {ACME}-new", agent="a", resources=("r",)).tenant == "acme"  # type: ignore[union-attr]
    # a tenant added back is served again, and its old token is no longer "withdrawn" once listed
    again = Authenticator({"globex": _tenant(["a"], GLOBEX)})
    again.carry_retired(after)
    assert again.authenticate(f"Bearer {GLOBEX}", agent="a", resources=("r",)).tenant == "globex"  # type: ignore[union-attr]
    assert "no longer configured" in again.authenticate(f"Bearer {ACME}-new", agent="a", resources=("r",)).description  # type: ignore[union-attr]


async def test_tenant_state_takes_new_limits_and_keeps_its_counts() -> None:
    state = TenantState(_tenant(["a"], ACME, concurrent_calls=4))
    state.sessions, state.streams = 3, 1
    state.update(_tenant(["a"], ACME, concurrent_calls=2, calls_per_second=5))
    assert (state.sessions, state.streams, state.calls.total_tokens) == (3, 1, 2)
    assert state.take_call_token() == 0.0  # a rate newly set starts with a full bucket


# -- the real service -----------------------------------------------------------------------------------------


@pytest.fixture
async def start(sandbox_tmp: Path) -> AsyncIterator[Any]:
    async with serve_processes(sandbox_tmp) as start:
        yield start


_JSON = ["-H", "content-type: application/json", "-H", "accept: application/json, text/event-stream"]


async def _curl(*args: str) -> tuple[int, dict[str, str], str]:
    done = await trio.run_process(["curl", "-s", "-i", "--max-time", "20", *args], capture_stdout=True, check=False)
    if done.returncode != 0:
        return -done.returncode, {}, ""  # curl could not connect (7) or timed out (28)
    head, _, body = done.stdout.decode().replace("\r\n", "\n").partition("\n\n")
    status_line, *header_lines = head.split("\n")
    headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
    return int(status_line.split()[1]), headers, body


def _rpc(req_id: int, method: str, params: dict[str, Any]) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": req_id, "method": method, "params": params})


class CurlSession:
    """One MCP session of the 2025-11-25 revision made and used with curl."""

    def __init__(self, base: str, agent_slug: str, token: str) -> None:
        self.base, self.agent, self.token = base, agent_slug, token
        self.id = ""

    def url(self) -> str:
        return f"{self.base}/agents/{self.agent}/mcp"

    async def open(self) -> None:
        init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "curl", "version": "1"}}
        status, headers, body = await self.post(_rpc(1, "initialize", init), with_session=False)
        assert status == 200, body
        self.id = headers["mcp-session-id"]
        status, _, body = await self.post(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        assert status == 202, body

    async def post(self, body: str, *, token: str | None = None, with_session: bool = True) -> tuple[int, dict, str]:
        session = ["-H", f"mcp-session-id: {self.id}", "-H", "mcp-protocol-version: 2025-11-25"] if with_session else []
        auth = ["-H", f"authorization: Bearer {token or self.token}"]
        return await _curl("-X", "POST", self.url(), *_JSON, *auth, *session, "-d", body)

    async def call(self, tool: str, *, token: str | None = None) -> tuple[int, dict, str]:
        return await self.post(_rpc(7, "tools/call", {"name": tool, "arguments": {}}), token=token)


async def _open_stream(session: CurlSession) -> trio.Process:
    """curl holding ``session``'s GET event stream open (its head has arrived: the stream is open)."""
    headers = ["-H", "accept: text/event-stream", "-H", f"mcp-session-id: {session.id}"]
    headers += ["-H", "mcp-protocol-version: 2025-11-25", "-H", f"authorization: Bearer {session.token}"]
    process = await trio.lowlevel.open_process(
        ["curl", "-s", "-i", "-N", "--max-time", "120", *headers, session.url()], stdout=subprocess.PIPE
    )
    assert process.stdout is not None
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = await process.stdout.receive_some(65536)
        assert chunk, head
        head += chunk
    assert head.startswith(b"HTTP/1.1 200 ") and b"text/event-stream" in head, head
    return process


async def _held_connection(base: str, token: str) -> trio.SocketStream:
    """A connection the server admitted and holds open (keep-alive) for a tenant: a request with the tenant's token
    answered on it (400: no session named). Connections of curls that just ended may still count for a moment;
    tried until one is admitted."""
    host, port = base.removeprefix("http://").rsplit(":", 1)
    while True:
        stream = await trio.open_tcp_stream(host, int(port))
        await stream.send_all(
            f"DELETE /agents/alpha/mcp HTTP/1.1\r\nhost: {host}\r\nauthorization: Bearer {token}\r\n\r\n".encode()
        )
        answer = b""
        while b"\r\n\r\n" not in answer and (chunk := await stream.receive_some(65536)):
            answer += chunk
        if answer.startswith(b"HTTP/1.1 400 "):
            return stream
        await stream.aclose()
        await trio.sleep(0.05)


def _served(status: int, body: str) -> bool:
    return status == 200 and json.loads(body)["result"].get("isError") is False


def _policy(root: Path, tenants: dict[str, Any], **extra: Any) -> Path:
    return write_policy(
        root,
        {
            "alpha": agent("alpha", builtinToolboxes=[system_toolbox("sys", ["date"])]),
            "beta": agent("beta", builtinToolboxes=[system_toolbox("sysb", ["date"])]),
        },
        frontends={"http": {"listen": "127.0.0.1:0", "max_body_bytes": 65536}},
        tenants=tenants,
        **extra,
    )


def _edit(root: Path, change: Any) -> None:
    path = root / "policy.yaml"
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def _tenants(**named: tuple[list[str], str]) -> dict[str, Any]:
    return {name: {"tokens": [hash_token(token)], "agents": agents} for name, (agents, token) in named.items()}


async def _serving(service: Service) -> str:
    with trio.fail_after(120):
        line = await service.wait_line("serving MCP over HTTP at ")
    return line.split("serving MCP over HTTP at ")[1].split("/agents/")[0]


async def test_sighup_applies_tenants_and_keeps_unchanged_sessions(sandbox_tmp: Path, start: Any) -> None:
    tenants = _tenants(acme=(["alpha"], ACME), globex=(["alpha"], GLOBEX), umbrella=(["alpha", "beta"], UMBRELLA))
    _policy(
        sandbox_tmp, {**tenants, "hooli": {**_tenants(hooli=(["beta"], HOOLI))["hooli"], "limits": {"sessions": 3}}}
    )
    _edit(sandbox_tmp, lambda data: data["frontends"]["http"].update(sse_keepalive_s=0.2))  # streams open at once
    service = await start("--http")
    base = await _serving(service)
    acme = CurlSession(base, "alpha", ACME)
    globex = CurlSession(base, "alpha", GLOBEX)
    umb_alpha, umb_beta = CurlSession(base, "alpha", UMBRELLA), CurlSession(base, "beta", UMBRELLA)
    hooli = [CurlSession(base, "beta", HOOLI) for _ in range(2)]
    with trio.fail_after(180):
        for session in (acme, globex, umb_alpha, umb_beta, *hooli):
            await session.open()
        assert _served(*(await acme.call("system_sys_date"))[::2])
        globex_stream = await _open_stream(globex)
        async with (
            create_mcp_http_client(headers={"Authorization": f"Bearer {ACME}"}) as http,
            Client(streamable_http_client(f"{base}/agents/alpha/mcp", http_client=http), mode="legacy") as sdk,
        ):
            assert not (await sdk.call_tool("system_sys_date", {})).is_error
            [sdk_start] = [r for r in service.records("http_session_start") if r["tenant"] == "acme"][1:]

            def change(data: dict[str, Any]) -> None:
                hooli_limits = data["tenants"]["hooli"]
                data["tenants"] = _tenants(
                    acme=(["alpha"], ACME), umbrella=(["alpha"], UMBRELLA2), initech=(["beta"], INITECH)
                )
                data["tenants"]["hooli"] = {**hooli_limits, "limits": {"sessions": 1}}

            _edit(sandbox_tmp, change)
            line = await service.wait_line("the policy was", service.hup())
            assert "the policy was reloaded" in line, line
            assert "tenants: added initech, removed globex, umbrella's tokens and agents changed" in line, line
            assert "hooli's limits changed" in line, line
            assert "2 session(s) closed" in line and "kept alpha/sys, beta/sysb" in line, line

            # unchanged tenant: the same sessions, served (curl's by its id, the SDK client's as it was)
            assert _served(*(await acme.call("system_sys_date"))[::2])
            assert not (await sdk.call_tool("system_sys_date", {})).is_error
            assert {t.name for t in (await sdk.list_tools()).tools} == {"system_sys_date"}
        ended = {r["session"]: r["why"] for r in service.records("http_session_end")}
        acme_sessions = [r["session"] for r in service.records("http_session_start") if r["tenant"] == "acme"]
        assert sdk_start["session"] in acme_sessions
        assert ended.get(acme_sessions[0]) is None  # curl's acme session never ended

        # removed tenant: its open event stream was ended, its token says so, its session is gone
        assert globex_stream.stdout is not None
        rest = b""
        while chunk := await globex_stream.stdout.receive_some(65536):
            rest += chunk
        assert rest.endswith(
            b": session ended: tenant 'globex' is no longer configured on this server (a policy reload)\n\n"
        )
        assert await globex_stream.wait() == 0  # ended whole by the server (curl says 18 for a cut stream)
        status, headers, body = await globex.call("system_sys_date")
        assert status == 401 and "tenant 'globex' is no longer configured on this server" in body, body
        assert 'error="invalid_token"' in headers["www-authenticate"]
        # rotated token, shrunk agents: the allowed session goes on with the new token, the old one is withdrawn
        status, _, body = await umb_alpha.call("system_sys_date", token=UMBRELLA2)
        assert _served(status, body), body
        status, _, body = await umb_alpha.call("system_sys_date")
        assert status == 401 and "this token of tenant 'umbrella' was withdrawn by a policy reload" in body, body
        status, _, body = await umb_beta.call("system_sysb_date", token=UMBRELLA2)
        assert status == 403 and "tenant 'umbrella' may not use agent 'beta'" in body, body
        # limits shrunk under what the tenant holds: its sessions go on, a new one is refused until it is under
        for session in hooli:
            assert _served(*(await session.call("system_sysb_date"))[::2])
        status, _, body = await CurlSession(base, "beta", HOOLI).post(_rpc(1, "initialize", {}), with_session=False)
        assert status == 429 and "tenant 'hooli' holds 2 sessions, its limit" in body, body
        # the new tenant is served at once
        initech = CurlSession(base, "beta", INITECH)
        await initech.open()
        assert _served(*(await initech.call("system_sysb_date"))[::2])

    why = {r["tenant"] + "/" + r["agent"]: r["why"] for r in service.records("http_session_end")}
    assert "tenant 'globex' is no longer configured" in why["globex/alpha"]
    assert "tenant 'umbrella' may no longer use agent 'beta'" in why["umbrella/beta"]
    assert "umbrella/alpha" not in why  # (acme's SDK session was ended by the client itself, at its exit)
    [applied] = [r for r in service.records("policy_reload") if r["status"] == "applied"]
    assert any(note.startswith("tenants: added initech") for note in applied["applied"]), applied


async def test_sighup_moves_the_listener_and_the_trace_or_refuses_whole(sandbox_tmp: Path, start: Any) -> None:
    _policy(sandbox_tmp, _tenants(acme=(["alpha"], ACME)))
    service = await start("--http")
    base = await _serving(service)
    acme = CurlSession(base, "alpha", ACME)
    moved = sandbox_tmp / "moved" / "trace.jsonl"
    with trio.fail_after(180), socket.socket() as taken:
        await acme.open()
        taken.bind(("127.0.0.3", 0))  # an address in use: the reload cannot bind it
        taken.listen()
        busy = f"127.0.0.3:{taken.getsockname()[1]}"

        def refused_change(data: dict[str, Any]) -> None:
            data["frontends"]["http"]["listen"] = busy
            data["tenants"]["late"] = {"tokens": [hash_token("late-tok")], "agents": ["alpha"]}
            data["trace"] = {"path": str(moved)}

        _edit(sandbox_tmp, refused_change)
        line = await service.wait_line("the policy was", service.hup())
        assert line.endswith(
            f"the policy was not reloaded, the running one stays: frontends.http.listen {busy}: cannot listen "
            f"there (Address already in use); still serving at {base}"
        ), line
        [refused] = [r for r in service.records("policy_reload") if r["status"] == "refused"]
        assert refused["reason"].startswith(f"frontends.http.listen {busy}: cannot listen there")
        late = CurlSession(base, "alpha", "late-tok")  # nothing of the edit applied: not the tenant, not the trace
        status, _, body = await late.post(_rpc(1, "initialize", {}), with_session=False)
        assert status == 401 and "the token is not known" in body, body
        assert not moved.exists()
        assert _served(*(await acme.call("system_sys_date"))[::2])

        def change(data: dict[str, Any]) -> None:
            data["frontends"]["http"].update(listen="127.0.0.2:0", max_body_bytes=2048)
            data["trace"] = {"path": str(moved), "max_bytes": 20000}
            del data["tenants"]["late"]

        _edit(sandbox_tmp, change)
        line = await service.wait_line("the policy was", service.hup())
        assert "the policy was reloaded" in line and f"trace moved to {moved}" in line, line
        assert "frontends.http: max_body_bytes changed" in line and "trace rotates at 20000 bytes" in line, line
        new_base = line.split("frontends.http: serving at ")[1].split(" (was ")[0]
        assert new_base.startswith("http://127.0.0.2:") and f"(was {base})" in line, line

        status, _, _ = await acme.call("system_sys_date")  # the old address is closed
        assert status == -7, status
        acme.base = new_base  # the session goes on at the new address
        assert _served(*(await acme.call("system_sys_date"))[::2])
        status, _, body = await acme.post(_rpc(8, "tools/list", {"pad": "x" * 4096}))
        assert status == 413, body

        old_records = [json.loads(x) for x in (sandbox_tmp / "state" / "trace.jsonl").read_text().splitlines()]
        assert old_records[-1]["event"] == "trace_moved" and old_records[-1]["to"] == str(moved)
        for _ in range(300):  # the trace rotates at the new size
            if moved.with_name("trace.jsonl.1").exists():
                break
            assert _served(*(await acme.call("system_sys_date"))[::2])
        assert moved.with_name("trace.jsonl.1").exists()

        # connection limits apply to connections accepted after the reload: a cap of one, idle ones closed soon
        _edit(sandbox_tmp, lambda data: data["frontends"]["http"].update(max_connections=1, keepalive_s=2))
        line = await service.wait_line("the policy was", service.hup())
        assert "frontends.http: max_connections, keepalive_s changed" in line, line
        held = await _held_connection(new_base, ACME)
        status, _, body = await _curl(f"{new_base}/.well-known/oauth-protected-resource")
        assert status == 503 and "holds 1 open connections, its limit" in body, body
        with trio.fail_after(20):  # closed after keepalive_s: 2 (the 30 s it was would not end before this)
            while await held.receive_some(65536):
                pass
        await held.aclose()
    first = json.loads(moved.with_name("trace.jsonl.1").read_text().splitlines()[0])
    assert first["event"] == "trace_moved" and first["from"] == str(sandbox_tmp / "state" / "trace.jsonl")
    assert not [r for r in old_records if r["event"] == "policy_reload" and r["status"] == "applied"]


async def test_sighup_applies_a_shorter_retention_at_once(sandbox_tmp: Path, start: Any) -> None:
    _policy(sandbox_tmp, _tenants(acme=(["alpha"], ACME)), sessions={"keep_days": None})
    service = await start("--http")
    acme = CurlSession(await _serving(service), "alpha", ACME)
    with trio.fail_after(120):
        await acme.open()
        assert _served(*(await acme.call("system_sys_date"))[::2])
        await acme.post(json.dumps({"jsonrpc": "2.0", "id": 9, "method": "ping"}))
        await trio.sleep(2.0)  # not synchronisation: the session must be older than the new retention (0.86 s)
        _edit(sandbox_tmp, lambda data: data["sessions"].update(keep_days=0.00001))
        line = await service.wait_line("the policy was", service.hup())
    assert "sessions kept 1e-05 days" in line, line
    [pruned] = service.records("sessions_pruned")
    assert pruned["keep_days"] == 0.00001 and pruned["sessions"] >= 1, pruned


async def test_sighup_refuses_to_move_the_state_dir(sandbox_tmp: Path, start: Any) -> None:
    _policy(sandbox_tmp, _tenants(acme=(["alpha"], ACME)))
    service = await start("--http")
    base = await _serving(service)
    acme = CurlSession(base, "alpha", ACME)
    with trio.fail_after(120):
        await acme.open()

        def change(data: dict[str, Any]) -> None:
            data["state_dir"] = str(sandbox_tmp / "elsewhere")
            data["tenants"]["late"] = {"tokens": [hash_token("late-tok")], "agents": ["alpha"]}

        _edit(sandbox_tmp, change)
        line = await service.wait_line("the policy was", service.hup())
        assert (
            "the policy was not reloaded, the running one stays: state_dir cannot change while the service runs; "
            "restart to move it" in line
        ), line
        assert f"running with {sandbox_tmp / 'state'}, the policy now says {sandbox_tmp / 'elsewhere'}" in line
        [refused] = [r for r in service.records("policy_reload") if r["status"] == "refused"]
        assert refused["reason"].startswith("state_dir cannot change while the service runs")
        assert not (sandbox_tmp / "elsewhere").exists()
        status, _, body = await CurlSession(base, "alpha", "late-tok").post(
            _rpc(1, "initialize", {}), with_session=False
        )
        assert status == 401 and "the token is not known" in body, body
        assert _served(*(await acme.call("system_sys_date"))[::2])


async def test_sighup_takes_a_renewed_certificate_for_new_connections(sandbox_tmp: Path, start: Any) -> None:
    """The TLS files are read again at a reload: new connections get the renewed certificate, the session made
    before goes on; a key file that does not load refuses the reload and the served certificate stays."""
    import ssl

    import httpx
    import trustme

    old_ca, new_ca = trustme.CA(), trustme.CA()
    pem = sandbox_tmp / "server.pem"
    old_ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(pem))
    _policy(sandbox_tmp, _tenants(acme=(["alpha"], ACME)))
    _edit(sandbox_tmp, lambda data: data["frontends"]["http"].update(tls={"cert": str(pem), "key": str(pem)}))
    service = await start("--http")
    base = await _serving(service)
    assert base.startswith("https://127.0.0.1:")

    def trusting(*cas: trustme.CA) -> ssl.SSLContext:
        context = ssl.create_default_context()
        for ca in cas:
            ca.configure_trust(context)
        return context

    async def handshake(context: ssl.SSLContext) -> bool:
        async with httpx.AsyncClient(verify=context, timeout=30) as client:
            try:
                await client.get(f"{base}/.well-known/oauth-protected-resource")
            except httpx.ConnectError:
                return False
            return True

    with trio.fail_after(120):
        both = trusting(old_ca, new_ca)  # the SDK client's session outlives the certificate it began with
        async with (
            httpx.AsyncClient(headers={"Authorization": f"Bearer {ACME}"}, verify=both, timeout=30) as http,
            Client(streamable_http_client(f"{base}/agents/alpha/mcp", http_client=http), mode="legacy") as sdk,
        ):
            assert not (await sdk.call_tool("system_sys_date", {})).is_error
            new_ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(pem))
            line = await service.wait_line("the policy was", service.hup())
            assert "frontends.http: new TLS certificate or key (for new connections)" in line, line
            assert await handshake(trusting(new_ca)) and not await handshake(trusting(old_ca))
            assert not (await sdk.call_tool("system_sys_date", {})).is_error  # the same session goes on

            pem.write_text("not a PEM file\n")
            line = await service.wait_line("the policy was", service.hup())
            assert "the policy was not reloaded, the running one stays: frontends.http.tls" in line, line
            assert await handshake(trusting(new_ca))  # the certificate loaded before is still served
            assert not (await sdk.call_tool("system_sys_date", {})).is_error


async def test_sighup_applies_new_oauth_keys_and_tenants(sandbox_tmp: Path, start: Any) -> None:
    """The OAuth key set is read again at a reload: tokens of the new key are accepted, those of the old one refused;
    a token naming a tenant the reload removed is refused saying so; a key set that does not load refuses the reload
    and the keys loaded before stay."""
    import time

    from joserfc import jwt
    from joserfc.jwk import ECKey, KeySet

    issuer = "https://auth.example.test"
    jwks = sandbox_tmp / "jwks.json"

    def key_set(*keys: ECKey) -> None:
        jwks.write_text(json.dumps(KeySet(list(keys)).as_dict(private=False)))

    def token(key: ECKey, tenant: str, audience: str) -> str:
        now = int(time.time())
        claims = {"iss": issuer, "sub": "u", "iat": now, "exp": now + 600, "tenant": tenant, "aud": audience}
        return jwt.encode({"alg": "ES256", "kid": key.kid}, claims, key)

    old_key, new_key = ECKey.generate_key("P-256", {"kid": "old"}), ECKey.generate_key("P-256", {"kid": "new"})
    key_set(old_key)
    _policy(
        sandbox_tmp,
        _tenants(acme=(["alpha"], ACME), globex=(["alpha"], GLOBEX)),
        oauth={"issuer": issuer, "jwks_file": str(jwks)},
    )
    service = await start("--http")
    base = await _serving(service)
    url = f"{base}/agents/alpha/mcp"
    with trio.fail_after(120):
        acme = CurlSession(base, "alpha", token(old_key, "acme", url))
        await acme.open()
        globex = CurlSession(base, "alpha", token(old_key, "globex", url))
        await globex.open()

        key_set(new_key)

        def change(data: dict[str, Any]) -> None:
            del data["tenants"]["globex"]

        _edit(sandbox_tmp, change)
        line = await service.wait_line("the policy was", service.hup())
        assert "the policy was reloaded" in line and "tenants: removed globex, 1 session(s) closed" in line, line
        assert f"oauth: new key set from {jwks} (1 key(s) added, 1 withdrawn, 1 in all)" in line, line
        status, _, body = await acme.call("system_sys_date")  # its token's key was withdrawn
        assert status == 401 and "the access token's signature does not verify" in body, body
        status, _, body = await acme.call("system_sys_date", token=token(new_key, "acme", url))
        assert _served(status, body), body  # the same session, with a token of the new key
        status, _, body = await globex.call("system_sys_date", token=token(new_key, "globex", url))
        assert status == 403 and "tenant 'globex' is no longer configured on this server" in body, body

        jwks.write_text("{not json")
        line = await service.wait_line("the policy was", service.hup())
        assert f"the policy was not reloaded, the running one stays: oauth key set {jwks}: invalid JWK Set" in line
        status, _, body = await acme.call("system_sys_date", token=token(new_key, "acme", url))
        assert _served(status, body), body

        key_set(new_key)  # the same keys as running: the reload does not say they changed
        line = await service.wait_line("the policy was", service.hup())
        assert "the policy was reloaded" in line and "key set" not in line, line


async def test_a_session_closed_by_a_reload_says_why_when_named_again(sandbox_tmp: Path, start: Any) -> None:
    """A tenant removed, then added back with the same token: the session the first reload closed is answered 404
    saying why it was closed (not a bare "no such session"), and the tenant makes a new one."""
    both = _tenants(acme=(["alpha"], ACME), globex=(["alpha"], GLOBEX))
    _policy(sandbox_tmp, both)
    service = await start("--http")
    base = await _serving(service)
    globex = CurlSession(base, "alpha", GLOBEX)
    with trio.fail_after(120):
        await globex.open()
        _edit(sandbox_tmp, lambda data: data["tenants"].pop("globex"))
        line = await service.wait_line("the policy was", service.hup())
        assert "tenants: removed globex, 1 session(s) closed" in line, line
        _edit(sandbox_tmp, lambda data: data.update(tenants=both))
        line = await service.wait_line("the policy was", service.hup())
        assert "tenants: added globex" in line, line
        status, _, body = await globex.call("system_sys_date")
        assert status == 404, body
        assert json.loads(body)["error"]["message"] == (
            "this session was closed: tenant 'globex' is no longer configured on this server (a policy reload); "
            "initialize a new one"
        )
        again = CurlSession(base, "alpha", GLOBEX)
        await again.open()
        assert _served(*(await again.call("system_sys_date"))[::2])
