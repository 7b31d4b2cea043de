"""Credential injection at egress, in the private network lab (see ``_netlab``): the proxy under test adds a
credential to the requests its binding matches, originates TLS to the upstream (verified against the lab's CA),
and never sends the value anywhere else: not to another name on the same server, not to a name that only starts
like the bound one, not through a redirect, not into a CONNECT tunnel, not in a second request on a connection.

The client is a process in a namespace with only ``lo`` (the worker's side of a bridge); the upstream is the lab's
TLS server, which logs every request it receives (``Lab.requests``). Nothing leaves the lab's namespaces.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import TYPE_CHECKING

import pytest

from tests.sandbox._netlab import ALT_PORT, INET_TLS, Bridge, Lab

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [pytest.mark.root, pytest.mark.slow]

SECRET = "s3cr3t-" + os.urandom(6).hex()
GITHUB = {
    "name": "github",
    "value": SECRET,
    "bindings": [{"hosts": ["api.example.test"]}],
    "header": ["Authorization", "Bearer {value}"],
}
RULES = ["api.example.test", "other.example.test", "api.example.test.evil.test", "secure.example.test", INET_TLS]

#: absolute-form requests to the proxy, one connection each, written as they would be by any HTTP client; prints
#: each raw response (repr)
RAW = """
import socket, sys
for part in sys.argv[1:]:
    s = socket.create_connection(("127.0.0.1", 3128), timeout=15)
    s.sendall(part.encode().decode("unicode_escape").encode("latin-1"))
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    print(repr(data))
"""


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("curl") is None:
        pytest.skip("needs root, iproute2 and curl to build network namespaces")
    lab = Lab(tmp_path_factory.mktemp("netlab-credentials"))
    try:
        yield lab
    finally:
        lab.close()


@pytest.fixture
def bridge(lab: Lab) -> Iterator[Bridge]:
    b = lab.bridge(RULES, credentials=[GITHUB])
    try:
        yield b
    finally:
        b.close()


def _raw(bridge: Bridge, *requests: str) -> list[bytes]:
    proc = bridge.python(RAW, *requests)
    assert proc.returncode == 0, proc.stderr
    return [eval(line) for line in proc.stdout.splitlines()]


def _body(response: bytes) -> dict:
    head, _, body = response.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), response[:300]
    echo = json.loads(body)
    echo["headers"] = {k.lower(): v for k, v in echo["headers"].items()}  # the proxy sends names lower case
    return echo


def _get(url: str, *headers: str) -> str:
    extra = "".join(f"{h}\\r\\n" for h in headers)
    return f"GET {url} HTTP/1.1\\r\\nHost: ignored.example\\r\\n{extra}\\r\\n"


def _carried(lab: Lab) -> list[dict]:
    """The requests the lab's servers received that carry the secret anywhere (path or any header)."""
    return [r for r in lab.requests() if SECRET in json.dumps(r)]


def test_absolute_form_https_gets_the_credential_and_tls_verified_upstream(lab: Lab, bridge: Bridge) -> None:
    """The bound host receives ``Authorization: Bearer <value>`` over TLS the proxy originated (the server is
    the lab's TLS server with a certificate of the lab's CA); the decision names the credential, never its value."""
    (resp,) = _raw(bridge, _get("https://api.example.test/echo/1", "Authorization: Bearer forged"))
    echo = _body(resp)
    assert echo["tag"] == "tls-origin" and echo["host"] == "api.example.test"
    assert echo["headers"]["authorization"] == f"Bearer {SECRET}"  # the credential wins over the client's
    decision = bridge.decision()
    assert decision["verdict"] == "allowed" and decision["scheme"] == "https"
    assert decision["credentials"] == ["github"]
    assert SECRET not in json.dumps(decision)


def test_no_other_host_gets_it_not_even_on_the_same_server_or_a_lookalike_name(lab: Lab, bridge: Bridge) -> None:
    """``api.example.test.evil.test``, ``other.example.test`` and the IP literal are served by the same TLS
    server as the bound name: none of their requests carries the credential."""
    before = len(lab.requests())
    out = _raw(
        bridge,
        _get("https://api.example.test.evil.test/echo/lookalike"),
        _get("https://other.example.test/echo/other"),
        _get("https://API.EXAMPLE.TEST:443/echo/caps"),
    )
    assert "authorization" not in _body(out[0])["headers"]
    assert "authorization" not in _body(out[1])["headers"]
    assert _body(out[2])["headers"]["authorization"] == f"Bearer {SECRET}"  # the same name, spelled otherwise
    got = lab.requests()[before:]
    assert {r["path"] for r in got} == {"/echo/lookalike", "/echo/other", "/echo/caps"}
    assert [r["path"] for r in got if SECRET in json.dumps(r)] == ["/echo/caps"]


def test_upstream_certificate_is_verified(lab: Lab, bridge: Bridge) -> None:
    """The lab's certificate names no IP: ``https://203.0.113.11/`` fails verification and is answered 502 with
    why, and nothing is sent upstream."""
    before = len(lab.requests())
    (resp,) = _raw(bridge, _get(f"https://{INET_TLS}/echo/ip"))
    assert resp.startswith(b"HTTP/1.1 502"), resp[:300]
    assert b"TLS with 203.0.113.11 failed" in resp and b"verif" in resp.lower()
    assert len(lab.requests()) == before


def test_connect_tunnels_and_a_second_request_never_carry_it(lab: Lab, bridge: Bridge) -> None:
    """A CONNECT tunnel to the bound host is opaque (the proxy adds nothing to bytes it cannot read, so a
    client that tunnels gets no credential); a CONNECT to another name neither. A second request sent on an
    absolute-form connection after the first is never forwarded (one request per connection)."""
    before = len(lab.requests())
    for name in ("api.example.test", "other.example.test"):
        status, body = bridge.curl(f"https://{name}/echo/tunnel", "--cacert", str(lab.ca_path))
        assert status == 200 and SECRET not in body
    both = _get("https://api.example.test/echo/first") + _get("https://other.example.test/echo/second")
    (resp,) = _raw(bridge, both)
    assert resp.count(b"HTTP/1.1 ") == 1
    got = lab.requests()[before:]
    assert [r["path"] for r in got] == ["/echo/tunnel", "/echo/tunnel", "/echo/first"]
    assert [r["path"] for r in got if SECRET in json.dumps(r)] == ["/echo/first"]


def test_a_followed_redirect_to_another_host_does_not_carry_it(lab: Lab) -> None:
    """curl follows a redirect from the bound host to another one, both through the proxy in absolute form
    (plain http, which the binding names): only the first request carries the credential."""
    cred = {**GITHUB, "bindings": [{"hosts": ["api.example.test"], "ports": [ALT_PORT], "schemes": ["http"]}]}
    b = lab.bridge(RULES, credentials=[cred])
    try:
        before = len(lab.requests())
        target = f"http://other.example.test:{ALT_PORT}/echo/landed"
        status, body = b.curl(f"http://api.example.test:{ALT_PORT}/redirect?to={target}", "-L")
        assert status == 200 and json.loads(body)["path"] == "/echo/landed"
        got = lab.requests()[before:]
        assert [r["host"].split(":")[0] for r in got] == ["api.example.test", "other.example.test"]
        assert [r["host"].split(":")[0] for r in got if SECRET in json.dumps(r)] == ["api.example.test"]
        # the same credential is not sent over https, which this binding does not name
        (resp,) = _raw(b, _get("https://api.example.test/echo/https"))
        assert "authorization" not in _body(resp)["headers"]
    finally:
        b.close()


def test_placeholder_swapped_only_for_bound_hosts_and_query_and_path_prefix(lab: Lab) -> None:
    """A credential with no header: its placeholder in a header is swapped on requests to the bound host
    (under /v1 only) and travels unchanged elsewhere; a query credential is set as a parameter; a path that only
    starts like /v1 gets nothing, and one that leaves it by dot segments is refused (400) and never sent."""
    key = {"name": "key", "value": SECRET, "bindings": [{"hosts": ["*.example.test"], "path_prefixes": ["/v1"]}]}
    q = {"name": "q", "value": SECRET + "q", "bindings": [{"hosts": ["secure.example.test"]}], "query": "api_key"}
    b = lab.bridge(RULES, credentials=[key, q])
    try:
        ph = "X-Key: AGENTS_SUPERVISE_CREDENTIAL_key"
        out = _raw(
            b,
            _get("https://api.example.test/v1/echo", ph),
            _get("https://api.example.test/v1x/echo", ph),
            _get("https://api.example.test/v1/../echo", ph),
            _get("https://api.example.test.evil.test/v1/", ph),
            _get("https://secure.example.test/echo?a=1&api_key=forged"),
        )
        assert _body(out[0])["headers"]["x-key"] == SECRET
        assert _body(out[1])["headers"]["x-key"] == "AGENTS_SUPERVISE_CREDENTIAL_key"
        # a dot segment under a bound prefix is refused outright, never sent (with or without the credential)
        assert out[2].startswith(b"HTTP/1.1 400 ") and b"is ambiguous" in out[2] and b"credential key" in out[2]
        assert out[3].startswith(b"HTTP/1.1 ")  # served by the lab (any status); what it got is checked below
        assert _body(out[4])["path"] == f"/echo?a=1&api_key={SECRET}q"
        carried = {r["path"] for r in _carried(lab)}
        assert "/v1/echo" in carried and "/v1x/echo" not in carried and "/v1/../echo" not in carried
        assert not [r for r in lab.requests() if r["host"] == "api.example.test.evil.test" and SECRET in json.dumps(r)]
    finally:
        b.close()


def test_the_worker_side_http_client_sends_absolute_form_https(lab: Lab, bridge: Bridge) -> None:
    """The project's own client (``toolboxes._http``, what OpenAPI and PostgREST use) sends ``https://`` to the
    proxy in absolute form, with a placeholder Token: the upstream gets the real value, the client never had it."""
    code = (
        "import json; from toolboxes._http import fetch_bytes; "
        "print(fetch_bytes('https://api.example.test/echo/client', "
        "headers={'Authorization': 'Bearer AGENTS_SUPERVISE_CREDENTIAL_github'}).decode())"
    )
    proc = bridge.python(code)
    assert proc.returncode == 0, proc.stderr
    echo = json.loads(proc.stdout)
    assert echo["headers"]["Authorization"] == f"Bearer {SECRET}"
    assert bridge.decision()["scheme"] == "https"


# --- the TLS-terminating mode ----------------------------------------------------------------------------------

#: two requests in one CONNECT tunnel, TLS from the client trusting only the proxy's CA; prints each status line
#: and body. argv: CA file, CONNECT host, then one Host per request
TUNNEL = r"""
import json, socket, ssl, sys
ca, connect, hosts = sys.argv[1], sys.argv[2], sys.argv[3:]
s = socket.create_connection(("127.0.0.1", 3128), timeout=15)
s.sendall(f"CONNECT {connect}:443 HTTP/1.1\r\nHost: {connect}:443\r\n\r\n".encode())
head = b""
while not head.endswith(b"\r\n\r\n"):
    head += s.recv(1)
assert head.startswith(b"HTTP/1.1 200"), head
tls = ssl.create_default_context(cafile=ca).wrap_socket(s, server_hostname=connect)
f = tls.makefile("rb")
for host in hosts:
    tls.sendall(f"GET /echo/{host} HTTP/1.1\r\nHost: {host}\r\n"
                "X-Key: AGENTS_SUPERVISE_CREDENTIAL_github\r\n\r\n".encode())
    status = f.readline().decode().strip()
    if not status:
        break  # the proxy ended the tunnel
    length = 0
    while (line := f.readline()) not in (b"\r\n", b""):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    print(json.dumps([status, f.read(length).decode()]))
"""


@pytest.fixture
def terminating(lab: Lab) -> Iterator[Bridge]:
    b = lab.bridge(RULES, credentials=[GITHUB], terminate=True)
    try:
        yield b
    finally:
        b.close()


def test_terminating_mode_injects_into_tunnelled_https_for_the_bound_host_only(lab: Lab, terminating: Bridge) -> None:
    """curl tunnels as usual and trusts the proxy's CA: the bound host gets the credential (header and the
    placeholder swapped), another host does not; the proxy's leaf names the host, and the upstream was verified."""
    ca = str(terminating.terminating_ca)
    placeholder = "X-Key: AGENTS_SUPERVISE_CREDENTIAL_github"
    status, body = terminating.curl("https://api.example.test/echo/curl", "--cacert", ca, "-H", placeholder)
    assert status == 200, body
    echo = {k.lower(): v for k, v in json.loads(body)["headers"].items()}
    assert echo["authorization"] == f"Bearer {SECRET}" and echo["x-key"] == SECRET
    decision = terminating.decision()
    assert decision["terminated"] is True and decision["credentials"] == ["github"]
    assert SECRET not in json.dumps(decision)
    status, body = terminating.curl("https://other.example.test/echo/curl", "--cacert", ca, "-H", placeholder)
    assert status == 200 and SECRET not in body
    assert "AGENTS_SUPERVISE_CREDENTIAL_github" in body
    # the proxy's CA is what the client must trust: the lab's real CA does not verify the proxy's leaf
    status, _ = terminating.curl("https://api.example.test/echo/real-ca", "--cacert", str(lab.ca_path))
    assert status == 0


def test_terminating_mode_a_second_request_for_another_host_in_one_tunnel_is_refused(
    lab: Lab, terminating: Bridge
) -> None:
    """Keep-alive works for the tunnel's own host; a request for another name in the same tunnel is 421 and the
    tunnel ends, and the credential was sent only with the requests for the bound host."""
    before = len(lab.requests())
    proc = terminating.python(
        TUNNEL,
        str(terminating.terminating_ca),
        "api.example.test",
        "api.example.test",
        "api.example.test",
        "other.example.test",
        "api.example.test",
    )
    answers = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [a[0].split()[1] for a in answers] == ["200", "200", "421"], (proc.stdout, proc.stderr)
    assert "needs its own CONNECT" in answers[2][1]  # and the tunnel ended: the fourth request was never read
    got = lab.requests()[before:]
    assert [r["path"] for r in got] == ["/echo/api.example.test", "/echo/api.example.test"]
    assert all(SECRET in json.dumps(r) for r in got)
    assert not any(r["host"] == "other.example.test" for r in got)


def test_terminating_mode_verifies_the_upstream_and_mints_only_allowed_hosts(lab: Lab, terminating: Bridge) -> None:
    """A CONNECT to the IP literal (allowed, but the lab's certificate names no IP) is terminated, and the
    request is answered 502 by the proxy: it verified the upstream. A host the rules refuse gets 403 before any
    TLS, so no leaf is ever made for it."""
    ca = str(terminating.terminating_ca)
    status, body = terminating.curl(f"https://{INET_TLS}/echo/ip", "--cacert", ca)
    assert status == 502 and "TLS with 203.0.113.11 failed" in body, body
    status, body = terminating.curl("https://evil.example.test/", "--cacert", ca)
    assert status == 0  # curl reports the proxy's 403 to the CONNECT as a failure of its own
    decisions = [terminating.decision() for _ in range(2)]
    assert decisions[1]["host"] == "evil.example.test" and decisions[1]["verdict"] == "refused"
