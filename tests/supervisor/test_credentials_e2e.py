"""Credentials end to end: the real supervisor in the lab's supervisor namespace (see ``tests/sandbox/_netlab``),
real confined workers, the lab's TLS server (a test CA the supervisor trusts through ``SSL_CERT_FILE``, as OpenSSL
reads it) as the upstream.

- An OpenAPI toolbox whose agent file says ``Token: "${GITHUB_TOKEN}"`` sends its call through the proxy in
  absolute form; the upstream receives ``Authorization: Bearer <value>`` over TLS the proxy verified.
- The same reference in a toolbox whose BaseUrl only starts like the bound host sends the placeholder, never the
  value.
- A worker granted the credential through ``credential_env`` sees the placeholder in its environment; nothing it
  can read (its environment, every ``/proc/*/environ`` and ``cmdline`` it sees, the memory of every process it may
  read, its files) holds the value, and a request it makes to the bound host with the placeholder arrives with the
  value, while the same request to another host arrives with the placeholder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests._policies import agent, mcp_script_server, system_toolbox, write_policy
from tests.sandbox._netlab import REPO, Lab

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [pytest.mark.root, pytest.mark.slow]

SECRET = "ghp_" + os.urandom(10).hex()
CREDENTIALS = {
    "github": {
        "source": {"env": "GITHUB_TOKEN"},
        "bindings": [{"hosts": ["api.example.test"]}],
        "header": "Authorization: Bearer {value}",
    }
}

#: run inside the worker: dumps what a hostile tool could read into $HOME for the test to search (the value is
#: never given to the worker, so it cannot search for it itself)
DUMP = r"""
import os
home = os.environ["HOME"]
with open(f"{home}/dump-env", "w") as f:
    f.write("\n".join(f"{k}={v}" for k, v in os.environ.items()))
pids = [p for p in os.listdir("/proc") if p.isdigit()]
mem_dumped = []
for pid in pids:
    for what in ("environ", "cmdline"):
        try:
            with open(f"/proc/{pid}/{what}", "rb") as src, open(f"{home}/dump-{what}-{pid}", "wb") as out:
                out.write(src.read())
        except OSError:
            pass
    try:
        maps = open(f"/proc/{pid}/maps").read().splitlines()
        mem = open(f"/proc/{pid}/mem", "rb", 0)
    except OSError:
        continue
    with mem, open(f"{home}/dump-mem-{pid}", "wb") as out:
        for line in maps:
            addr, perms = line.split()[:2]
            lo, hi = (int(x, 16) for x in addr.split("-"))
            if "r" not in perms or hi - lo > (256 << 20):
                continue
            try:
                mem.seek(lo)
                out.write(mem.read(hi - lo))
            except (OSError, ValueError, OverflowError):
                pass
    mem_dumped.append(pid)
print("pids", len(pids), "memory", len(mem_dumped))
"""

#: an absolute-form https request with the placeholder, as a tool that speaks HTTP to the proxy would send it
REQUEST = r"""
import os, socket, sys
for host in sys.argv[1:]:
    s = socket.create_connection(("127.0.0.1", 3128), timeout=15)
    s.sendall(f"GET https://{host}/log/worker HTTP/1.1\r\nHost: {host}\r\n"
              f"X-Token: {os.environ['GH_TOKEN']}\r\n\r\n".encode())
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    print(data.split(b"\r\n", 1)[0].decode())
"""


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("unshare") is None:
        pytest.skip("needs root, iproute2 and util-linux to build network namespaces")
    os.makedirs("/tmp/agents-supervise-tests", exist_ok=True)
    root = Path(tempfile.mkdtemp(dir="/tmp/agents-supervise-tests"))
    os.chmod(root, 0o755)
    lab = Lab(root)
    try:
        yield lab
    finally:
        lab.close()
        shutil.rmtree(root, ignore_errors=True)


def _call(lab: Lab, policy: Path, tool: str, args: dict) -> dict:
    """``supervisor call`` run in the lab's supervisor namespace, with the value in its environment only."""
    proc = subprocess.run(
        [
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            'mount --bind "$0" /etc/resolv.conf && exec nsenter --net="$1" "$2" -m supervisor call --policy "$3" '
            '"$4" "$5"',
            f"/etc/netns/{lab.sup}/resolv.conf",
            f"/run/netns/{lab.sup}",
            sys.executable,
            str(policy),
            tool,
            json.dumps(args),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": REPO, "GITHUB_TOKEN": SECRET, "SSL_CERT_FILE": str(lab.ca_path)},
    )
    assert proc.stdout, proc.stderr
    assert SECRET not in proc.stdout and SECRET not in proc.stderr  # nor in what the caller sees
    return json.loads(proc.stdout)


def _spec(root: Path) -> Path:
    path = root / "spec.json"
    path.write_text(
        json.dumps(
            {
                "openapi": "3.0.0",
                "info": {"title": "t", "version": "1"},
                "paths": {
                    "/log/openapi": {"get": {"operationId": "probe", "responses": {"200": {"description": "ok"}}}}
                },
            }
        )
    )
    return path


def _openapi(name: str, base: str, spec: Path) -> dict:
    return {
        "tag": "OpenAPIServer",
        "contents": {"SpecUrl": str(spec), "BaseUrl": base, "Name": name, "Token": "${GITHUB_TOKEN}"},
    }


def _received(lab: Lab, before: int, path: str) -> list[dict]:
    return [r for r in lab.requests()[before:] if r["path"] == path]


def _auth(request: dict, name: str) -> str | None:
    return next((v for k, v in request["headers"] if k.lower() == name.lower()), None)


def test_openapi_token_reference_reaches_only_the_bound_host(lab: Lab, sandbox_tmp: Path) -> None:
    spec = _spec(sandbox_tmp)
    policy = write_policy(
        sandbox_tmp,
        {
            "tester": agent(
                openApiToolboxes=[
                    _openapi("gh", "https://api.example.test", spec),
                    _openapi("lookalike", "https://api.example.test.evil.test", spec),
                ]
            )
        },
        credentials=CREDENTIALS,
    )
    before = len(lab.requests())
    out = _call(lab, policy, "openapi_gh_probe", {})
    assert out["status"] == "passed", out
    (got,) = _received(lab, before, "/log/openapi")
    assert got["host"] == "api.example.test" and _auth(got, "Authorization") == f"Bearer {SECRET}"
    before = len(lab.requests())
    out = _call(lab, policy, "openapi_lookalike_probe", {})
    assert out["status"] == "passed", out
    (got,) = _received(lab, before, "/log/openapi")
    assert got["host"] == "api.example.test.evil.test"
    assert _auth(got, "Authorization") == "Bearer AGENTS_SUPERVISE_CREDENTIAL_github"
    trace = (sandbox_tmp / "state" / "trace.jsonl").read_text()
    egress = [json.loads(line) for line in trace.splitlines() if '"egress"' in line]
    assert {(r["host"], tuple(r.get("credentials", ()))) for r in egress if r.get("event") == "egress"} >= {
        ("api.example.test", ("github",)),
        ("api.example.test.evil.test", ()),
    }
    assert SECRET not in trace


def test_a_worker_holds_only_the_placeholder(lab: Lab, sandbox_tmp: Path) -> None:
    scripts = sandbox_tmp / "scripts"
    scripts.mkdir()
    (scripts / "dump.py").write_text(DUMP)
    (scripts / "request.py").write_text(REQUEST)
    toolbox = system_toolbox(
        capabilities=["execute-command"],
        FileSandbox={"fsbPredicate": {"tag": "DirectoryRecursive", "contents": str(scripts)}, "fsbName": "scripts"},
    )
    policy = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=[toolbox])},
        credentials=CREDENTIALS,
        toolboxes={
            "system": {
                "credential_env": {"GH_TOKEN": "github"},
                "allowed_hosts": ["api.example.test", "other.example.test"],
            }
        },
    )
    before = len(lab.requests())
    command = (
        f"python3 {scripts}/dump.py && echo token=$GH_TOKEN && "
        f"python3 {scripts}/request.py api.example.test other.example.test"
    )
    out = _call(lab, policy, "system_system_execute_command", {"command": command})
    stdout = out["structured"]["stdout"]
    assert "token=AGENTS_SUPERVISE_CREDENTIAL_github" in stdout, out
    counts = stdout.split("pids", 1)[1].split()
    assert int(counts[0]) >= 3 and int(counts[2]) >= 2, stdout  # its processes; the memory of the shell and its own
    assert stdout.count("HTTP/1.1 200") == 2, stdout
    got = _received(lab, before, "/log/worker")
    assert {r["host"]: _auth(r, "X-Token") for r in got} == {
        "api.example.test": SECRET,
        "other.example.test": "AGENTS_SUPERVISE_CREDENTIAL_github",
    }
    dumps = 0
    for folder in (sandbox_tmp / "state").rglob("*"):
        if folder.is_file():
            assert SECRET.encode() not in folder.read_bytes(), folder
            dumps += folder.name.startswith("dump-mem-")
    assert dumps >= 1


def test_tls_termination_mode_from_a_real_worker(lab: Lab, sandbox_tmp: Path) -> None:
    """``tls_termination``: curl and Python's urllib in the worker tunnel as usual and verify the proxy's leaf
    with the supervisor's CA (found through CURL_CA_BUNDLE, SSL_CERT_FILE); the bound host receives the value in
    place of the placeholder; another host the placeholder. The worker can read the CA's certificate, not its key."""
    toolbox = system_toolbox(capabilities=["execute-command"])
    policy = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=[toolbox])},
        credentials=CREDENTIALS,
        toolboxes={
            "system": {
                "credential_env": {"GH_TOKEN": "github"},
                "tls_termination": True,
                "allowed_hosts": ["api.example.test", "other.example.test"],
            }
        },
    )
    before = len(lab.requests())
    urllib = (
        "import os, urllib.request; r = urllib.request.Request('https://other.example.test/log/urllib', "
        "headers={'X-Token': os.environ['GH_TOKEN']}); print(urllib.request.urlopen(r, timeout=15).status)"
    )
    command = (
        'curl -sS --max-time 15 -H "X-Token: $GH_TOKEN" -o /dev/null -w "%{http_code}\\n" '
        "https://api.example.test/log/curl; "
        f'python3 -c "{urllib}"; '
        'echo "ca=$SSL_CERT_FILE"; grep -c "PRIVATE KEY" "$SSL_CERT_FILE"; grep -c CERTIFICATE "$SSL_CERT_FILE"'
    )
    out = _call(lab, policy, "system_system_execute_command", {"command": command})
    lines = out["structured"]["stdout"].splitlines()
    assert lines[:2] == ["200", "200"], out
    assert lines[2].startswith(f"ca={sandbox_tmp}/state/tls/ca-") and lines[3:] == ["0", "2"], out
    got = {r["path"]: r for r in lab.requests()[before:]}
    assert (
        _auth(got["/log/curl"], "X-Token") == SECRET and _auth(got["/log/curl"], "Authorization") == f"Bearer {SECRET}"
    )
    assert _auth(got["/log/urllib"], "X-Token") == "AGENTS_SUPERVISE_CREDENTIAL_github"
    assert _auth(got["/log/urllib"], "Authorization") is None


def test_postgrest_and_lua_http_send_absolute_form_and_get_the_policy_granted_credential(
    lab: Lab, sandbox_tmp: Path
) -> None:
    """The other clients the project writes: a PostgREST toolbox (the seed has no Token for it: granted by the
    policy) and Lua's ``http`` reach the bound host with the value the proxy adds; Lua's request to another host
    carries nothing."""
    spec = sandbox_tmp / "todos.swagger.json"
    spec.write_text(
        json.dumps(
            {  # PostgREST's OpenAPI 2 description of one table, as small as it gets
                "swagger": "2.0",
                "info": {"title": "PostgREST API", "version": "12"},
                "basePath": "/",
                "paths": {"/todos": {"get": {"parameters": [], "responses": {"200": {"description": "OK"}}}}},
                "definitions": {"todos": {"type": "object", "properties": {"id": {"type": "integer"}}}},
            }
        )
    )
    postgrest = {
        "tag": "PostgRESTServer",
        "contents": {"SpecUrl": str(spec), "BaseUrl": "https://api.example.test", "Name": "db"},
    }
    lua = {
        "tag": "LuaToolbox",
        "contents": {
            "Name": "lua",
            "Description": "scripts",
            "MaxMemoryMB": 32,
            "MaxExecutionTimeSeconds": 20,
            "AllowedTools": [],
            "AllowedHosts": ["api.example.test", "other.example.test"],
        },
    }
    policy = write_policy(
        sandbox_tmp,
        {"tester": agent(postgrestToolboxes=[postgrest], builtinToolboxes=[lua])},
        credentials=CREDENTIALS,
        toolboxes={"db": {"credentials": ["github"]}, "lua": {"credentials": ["github"]}},
    )
    before = len(lab.requests())
    out = _call(lab, policy, "postgrest_db_get_todos", {})
    assert out["status"] == "passed", out
    script = (
        "local a = http.get('https://api.example.test/log/lua') "
        "local b = http.get('https://other.example.test/log/lua') return a.status, b.status"
    )
    out = _call(lab, policy, "lua_lua_execute", {"script": script})
    assert out["status"] == "passed" and out["structured"]["values"] == [200, 200], out
    got = lab.requests()[before:]
    by = {(r["host"], r["path"].split("?")[0]): _auth(r, "Authorization") for r in got}
    assert by == {
        ("api.example.test", "/todos"): f"Bearer {SECRET}",
        ("api.example.test", "/log/lua"): f"Bearer {SECRET}",
        ("other.example.test", "/log/lua"): None,
    }


#: an MCP server as a GitHub one from npm would be: it reads its token from the environment and calls the API over
#: https through the proxy it finds in the environment, verifying TLS with the default store (here SSL_CERT_FILE)
MCP_SERVER = r"""
import json, os, sys, urllib.request
def send(m):
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **m}) + "\n"); sys.stdout.flush()
for line in sys.stdin:
    msg = json.loads(line)
    method, mid = msg.get("method"), msg.get("id")
    if method == "initialize":
        send({"id": mid, "result": {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                                    "serverInfo": {"name": "gh", "version": "1"}}})
    elif method == "tools/list":
        schema = {"type": "object", "properties": {"host": {"type": "string"}}}
        send({"id": mid, "result": {"tools": [{"name": "fetch", "description": "fetch", "inputSchema": schema}]}})
    elif method == "tools/call":
        host = msg["params"]["arguments"]["host"]
        token = os.environ["GITHUB_PERSONAL_ACCESS_TOKEN"]
        req = urllib.request.Request(f"https://{host}/log/mcp", headers={"Authorization": f"Bearer {token}"})
        status = urllib.request.urlopen(req, timeout=15).status
        send({"id": mid, "result": {"content": [{"type": "text", "text": f"{status} token={token}"}]}})
"""


def test_an_mcp_server_with_a_placeholder_token_in_terminating_mode(lab: Lab, sandbox_tmp: Path) -> None:
    """The MCP server holds the placeholder (and shows it back); the bound host receives the value, another host
    the placeholder."""
    script = sandbox_tmp / "gh_mcp.py"
    script.write_text(MCP_SERVER)
    script.chmod(0o644)
    server = mcp_script_server("gh", script)
    policy = write_policy(
        sandbox_tmp,
        {"tester": agent(mcpServers=[server])},
        credentials=CREDENTIALS,
        toolboxes={
            "gh": {
                "credential_env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "github"},
                "tls_termination": True,
                "allowed_hosts": ["api.example.test:443", "other.example.test:443"],
            }
        },
    )
    before = len(lab.requests())
    for host in ("api.example.test", "other.example.test"):
        out = _call(lab, policy, "mcp_gh_fetch", {"host": host})
        assert out["status"] == "passed" and out["data"] == "200 token=AGENTS_SUPERVISE_CREDENTIAL_github", out
    by = {r["host"]: _auth(r, "Authorization") for r in lab.requests()[before:] if r["path"] == "/log/mcp"}
    assert by == {
        "api.example.test": f"Bearer {SECRET}",
        "other.example.test": "Bearer AGENTS_SUPERVISE_CREDENTIAL_github",
    }


def test_a_redirect_followed_from_a_real_worker_does_not_carry_it(lab: Lab, sandbox_tmp: Path) -> None:
    """curl -L in a terminating worker: the bound host's redirect to another host is followed through a new
    tunnel, and only the request to the bound host carried the credential."""
    toolbox = system_toolbox(capabilities=["execute-command"])
    policy = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=[toolbox])},
        credentials=CREDENTIALS,
        toolboxes={
            "system": {
                "credentials": ["github"],
                "tls_termination": True,
                "allowed_hosts": ["api.example.test", "other.example.test"],
            }
        },
    )
    before = len(lab.requests())
    target = "https://other.example.test/log/redirected"
    out = _call(
        lab,
        policy,
        "system_system_execute_command",
        {
            "command": f"curl -sSL --max-time 15 -o /dev/null -w '%{{http_code}}' 'https://api.example.test/redirect?to={target}'"
        },
    )
    assert out["structured"]["stdout"] == "200", out
    got = [(r["host"], r["path"].split("?")[0], _auth(r, "Authorization")) for r in lab.requests()[before:]]
    assert got == [
        ("api.example.test", "/redirect", f"Bearer {SECRET}"),
        ("other.example.test", "/log/redirected", None),
    ]


#: absolute-form requests through the proxy: ``<name> <status line> <body>`` per request
ODD_REQUESTS = r"""
import socket, sys
def send(name, target, extra=""):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=15)
    s.sendall(f"GET {target} HTTP/1.1\r\nHost: api.example.test\r\n{extra}\r\n".encode())
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    print(name, head.split(b"\r\n", 1)[0].decode(), "|", body.decode(errors="replace").replace("\n", " ")[:400])
FWD = (
    "X-Forwarded-Host: evil.example.test\r\nForwarded: host=evil.example.test;proto=http\r\n"
    "X-Original-URL: /admin\r\nX-Rewrite-URL: /admin\r\nX-Forwarded-For: 203.0.113.9\r\n"
    "X-Forwarded-Proto: http\r\nX-Real-IP: 203.0.113.9\r\nX-Token: kept\r\n"
)
send("forwarded", "https://api.example.test/log/v1/forwarded", FWD)
send("uncredentialed", "https://other.example.test/log/v1/uncredentialed", FWD)
for i, path in enumerate(sys.argv[1:]):
    send(f"odd{i}", "https://api.example.test" + path)
"""
ODD_PATHS = [
    "/log/v1/..;/admin",
    "/log/v1/%252e%252e/admin",
    "/log/v1/%u002e%u002e/admin",
    "/log/v1/%ef%bc%8e%ef%bc%8e/admin",
    "/log/v1/..%5cadmin",
    "/log/v1/..\\admin",
    "/log/v1/.%2e/admin",
    "/log/v1/%c0%ae%c0%ae/admin",
]
FORWARDING = {"x-forwarded-host", "forwarded", "x-original-url", "x-rewrite-url", "x-forwarded-for"}
FORWARDING |= {"x-forwarded-proto", "x-real-ip"}


def test_forwarding_headers_and_ambiguous_paths_never_travel_with_a_credential(lab: Lab, sandbox_tmp: Path) -> None:
    """Issue 24 item 7, from a real worker: a credential bound to ``/log/v1`` on the bound host. A request that
    carries it loses every forwarding header the tool set (they would make the server act for another host or
    path); one to another host (no credential) keeps them. Paths a server could read as another one (``..;``,
    double encoding, ``%u``, fullwidth and overlong dots, backslashes) are refused by the proxy, in absolute form
    and inside a terminated tunnel (curl), and never reach the server."""
    scripts = sandbox_tmp / "scripts"
    scripts.mkdir()
    (scripts / "odd.py").write_text(ODD_REQUESTS)
    toolbox = system_toolbox(
        capabilities=["execute-command"],
        FileSandbox={"fsbPredicate": {"tag": "DirectoryRecursive", "contents": str(scripts)}, "fsbName": "scripts"},
    )
    scoped = {
        "scoped": {
            "source": {"env": "GITHUB_TOKEN"},
            "bindings": [{"hosts": ["api.example.test"], "path_prefixes": ["/log/v1"]}],
            "header": "Authorization: Bearer {value}",
        }
    }
    policy = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=[toolbox])},
        credentials=scoped,
        toolboxes={
            "system": {
                "credentials": ["scoped"],
                "tls_termination": True,
                "allowed_hosts": ["api.example.test", "other.example.test"],
            }
        },
    )
    quoted = " ".join(f"'{p}'" for p in ODD_PATHS)
    curl = "curl -sS --max-time 15 --path-as-is -o /dev/null -w '%{http_code}\\n'"
    command = (
        f"python3 {scripts}/odd.py {quoted}; "
        f"{curl} -H 'X-Forwarded-Host: evil.example.test' -H 'X-Original-URL: /admin' "
        "https://api.example.test/log/v1/curl-forwarded; "
        f"{curl} 'https://api.example.test/log/v1/..;/admin-curl'; "
        f"{curl} 'https://api.example.test/log/v1/%252e%252e/admin-curl'"
    )
    before = len(lab.requests())
    out = _call(lab, policy, "system_system_execute_command", {"command": command})
    lines = out["structured"]["stdout"].splitlines()
    answers = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in lines if " HTTP/1.1 " in f" {line}"}
    assert answers["forwarded"].startswith("HTTP/1.1 200") and answers["uncredentialed"].startswith("HTTP/1.1 200")
    for i, path in enumerate(ODD_PATHS):
        answer = answers[f"odd{i}"]
        assert answer.startswith("HTTP/1.1 400") and "ambiguous" in answer and "scoped" in answer, (path, answer)
    assert lines[-3:] == ["200", "400", "400"], out
    got = lab.requests()[before:]
    assert not [r for r in got if "admin" in r["path"]], got  # no ambiguous request reached the server
    by_path = {r["path"]: r for r in got}
    for path in ("/log/v1/forwarded", "/log/v1/curl-forwarded"):
        request = by_path[path]
        names = {k.lower() for k, _ in request["headers"]}
        assert _auth(request, "Authorization") == f"Bearer {SECRET}", request
        assert not names & FORWARDING, request
    assert _auth(by_path["/log/v1/forwarded"], "X-Token") == "kept"
    other = by_path["/log/v1/uncredentialed"]
    assert {k.lower() for k, _ in other["headers"]} >= FORWARDING and _auth(other, "Authorization") is None
    trace = (sandbox_tmp / "state" / "trace.jsonl").read_text()
    records = [json.loads(line) for line in trace.splitlines() if '"egress"' in line]
    dropped = [r for r in records if r.get("dropped_headers")]
    assert any("x-forwarded-host" in r["dropped_headers"] and r.get("credentials") == ["scoped"] for r in dropped)
    refused = [r for r in records if "ambiguous" in str(r.get("reason", "")) + str(r.get("refused_requests", ""))]
    assert len(refused) >= len(ODD_PATHS) + 2, records
    assert SECRET not in trace
