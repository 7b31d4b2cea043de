"""A private network lab for the egress tests: namespaces, veth pairs, real servers, the proxy under test.

Topology (every name unique per run, every namespace deleted on teardown)::

    client ns (only lo)          supervisor ns                              internet ns
    127.0.0.1:3128/53 ---SCM_RIGHTS--> proxy + DNS stub   203.0.113.1 ==veth== 203.0.113.10  HTTP (+ 2001:db8::10)
    (bridge sockets opened            (this module, mode    2001:db8::1          203.0.113.11  HTTPS (trustme cert)
     by sandbox._bridge)               "proxy")             127.0.0.1:8080       203.0.113.53  DNS (logs queries)
                                                            loopback HTTP        169.254.169.254 fake metadata

No packet leaves these namespaces: the machine's own namespace only runs ``ip`` and waits.
Modes (``python -m tests.sandbox._netlab MODE``): ``inet`` serves the internet hosts, ``proxy`` receives a
bridge and serves the proxy and the DNS stub with the supervisor's real resolver (``default_resolve``).

The supervisor namespace's resolv.conf (``/etc/netns/<ns>/resolv.conf``, which ``ip netns exec`` shows as
``/etc/resolv.conf``) names the lab's DNS server with a search domain and ``ndots:5``, as a Kubernetes pod's
does: ``abs.example.test`` asked without its trailing dot would first be tried as ``abs.example.test.<SEARCH>``,
which the lab answers with another server (``SEARCH_ANSWER``). The DNS server logs every question it gets
(``Lab.dns_log``), answers CNAME chains like a recursive resolver (the chain plus the target's records), and the
"internet" also serves fake metadata services on the cloud metadata addresses outside link-local (Azure
WireServer, Alibaba, AWS and GCP over IPv6): all answer ``SECRET-METADATA``.
"""

from __future__ import annotations

import argparse
import errno
import http.server
import json
import os
import queue
import secrets
import shutil
import socket
import ssl
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

PY = sys.executable  # the venv scripts/setup makes (readable by the sandbox uid)
REPO = str(Path(__file__).resolve().parents[2])
SUP_V4, INET_HTTP, INET_TLS, INET_DNS, METADATA = (
    "203.0.113.1",
    "203.0.113.10",
    "203.0.113.11",
    "203.0.113.53",
    "169.254.169.254",
)
SUP_V6, INET_V6 = "2001:db8::1", "2001:db8::10"
SEARCH, SEARCH_ANSWER = "corp.example.test", "203.0.113.12"
#: the names the lab's TLS server (INET_TLS:443) has a certificate for
TLS_NAMES = ("secure.example.test", "api.example.test", "other.example.test", "api.example.test.evil.test")
#: metadata addresses outside link-local the lab serves (every private range that holds one can be opened)
METADATA_ELSEWHERE = ("168.63.129.16", "100.100.100.200", "fd00:ec2::254", "fd20:ce::254")
LOOPBACK_PORT = 8080
ALT_PORT = 8443
ZONE: dict[str, dict[str, list[str]]] = {
    # absolute-name resolution: the search-domain form answers elsewhere
    "abs.example.test": {"A": [INET_HTTP], "AAAA": []},
    f"abs.example.test.{SEARCH}": {"A": [SEARCH_ANSWER], "AAAA": []},
    f"leak.example.test.{SEARCH}": {"A": [SEARCH_ANSWER], "AAAA": []},
    # metadata addresses behind names
    "azure.example.test": {"A": ["168.63.129.16"], "AAAA": []},
    "alibaba.example.test": {"A": ["100.100.100.200"], "AAAA": []},
    "aws6.example.test": {"A": [], "AAAA": ["fd00:ec2::254"]},
    "gcp6.example.test": {"A": [], "AAAA": ["fd20:ce::254"]},
    "azure-mapped.example.test": {"A": [], "AAAA": ["::ffff:168.63.129.16"]},
    # CNAME chains
    "alias.example.test": {"CNAME": ["www.example.test"]},
    "cdn-alias.example.test": {"CNAME": ["edge.cdn.example.test"]},
    "edge.cdn.example.test": {"A": [INET_HTTP], "AAAA": []},
    "meta-alias.example.test": {"CNAME": ["azure.example.test"]},
    "git-alias.example.test": {"CNAME": ["git-edge.cdn.example.test"]},
    "git-edge.cdn.example.test": {"A": [INET_TLS], "AAAA": []},
    "www.example.test": {"A": [INET_HTTP], "AAAA": [INET_V6]},
    "www6.example.test": {"A": [], "AAAA": [INET_V6]},
    "secure.example.test": {"A": [INET_TLS], "AAAA": []},
    # credential bindings: the bound name, another name on the same server, and a name that only starts like it
    "api.example.test": {"A": [INET_TLS], "AAAA": []},
    "other.example.test": {"A": [INET_TLS], "AAAA": []},
    "api.example.test.evil.test": {"A": [INET_TLS], "AAAA": []},
    "evil.example.test": {"A": [INET_HTTP], "AAAA": []},
    "loop.example.test": {"A": ["127.0.0.1"], "AAAA": []},
    "meta.example.test": {"A": [METADATA], "AAAA": []},
    "mapped.example.test": {"A": [], "AAAA": ["::ffff:169.254.169.254"]},
    "nat64.example.test": {"A": [], "AAAA": ["64:ff9b::a9fe:a9fe"]},
    "self.example.test": {"A": [SUP_V4], "AAAA": []},
    "private.example.test": {"A": ["10.1.2.3"], "AAAA": []},
}


def sh(*args: str, check: bool = True, **kw: Any) -> subprocess.CompletedProcess[str]:
    """Run a command quietly (text mode, 30 s bound); raise with its output when ``check`` and it fails."""
    proc = subprocess.run(args, capture_output=True, text=True, timeout=30, check=False, **kw)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def in_ns(ns: str, *args: str) -> list[str]:
    return ["ip", "netns", "exec", ns, *args]


class Lines:
    """Lines of a child's stdout, read by a thread so tests can wait for one with a bound."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with self.proc.stdout:
            for line in self.proc.stdout:
                self.queue.put(line.rstrip("\n"))
        self.queue.put(None)

    def next(self, prefix: str, timeout: float = 15.0) -> str:
        """The next line starting with ``prefix`` (others are skipped); fails when the child exits first."""
        while True:
            try:
                line = self.queue.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"no {prefix!r} line within {timeout} s") from None
            if line is None:
                err = self.proc.stderr.read() if self.proc.stderr else ""
                raise AssertionError(f"the child exited before a {prefix!r} line: {err}")
            if line.startswith(prefix):
                return line[len(prefix) :].strip()

    def pending(self) -> list[str]:
        out = []
        while True:
            try:
                line = self.queue.get_nowait()
            except queue.Empty:
                return out
            if line is not None:
                out.append(line)


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)
    if proc.stderr is not None:
        proc.stderr.close()


class Lab:
    """The supervisor and internet namespaces, the internet servers, and a factory for client bridges."""

    def __init__(self, workdir: Path) -> None:
        tag = secrets.token_hex(3)
        self.sup, self.inet = f"asv-s-{tag}", f"asv-i-{tag}"
        self.workdir = workdir
        self.ca_path = workdir / "ca.pem"
        self.request_log = workdir / "requests.log"
        self.dns_log = workdir / "dns-queries.log"
        self.procs: list[subprocess.Popen[str]] = []
        self.namespaces: list[str] = []
        try:
            self._build(tag)
        except BaseException:
            self.close()
            raise

    def _build(self, tag: str) -> None:
        for ns in (self.sup, self.inet):
            sh("ip", "netns", "add", ns)
            self.namespaces.append(ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        vs, vi = f"vs{tag}", f"vi{tag}"
        sh("ip", "-n", self.sup, "link", "add", vs, "type", "veth", "peer", "name", vi, "netns", self.inet)
        sh("ip", "-n", self.sup, "addr", "add", f"{SUP_V4}/24", "dev", vs)
        sh("ip", "-n", self.sup, "addr", "add", f"{SUP_V6}/64", "dev", vs, "nodad")
        sh("ip", "-n", self.sup, "link", "set", vs, "up")
        sh("ip", "-n", self.sup, "route", "add", f"{METADATA}/32", "dev", vs)
        for addr in (INET_HTTP, INET_TLS, INET_DNS, SEARCH_ANSWER):
            sh("ip", "-n", self.inet, "addr", "add", f"{addr}/24", "dev", vi)
        sh("ip", "-n", self.inet, "addr", "add", f"{METADATA}/16", "dev", vi)
        sh("ip", "-n", self.inet, "addr", "add", f"{INET_V6}/64", "dev", vi, "nodad")
        for addr in METADATA_ELSEWHERE:
            host_net, flags = (f"{addr}/128", ["nodad"]) if ":" in addr else (f"{addr}/32", [])
            sh("ip", "-n", self.inet, "addr", "add", host_net, "dev", vi, *flags)
            sh("ip", "-n", self.sup, "route", "add", host_net, "dev", vs)
        # the supervisor's resolver: the lab's DNS server, with a search domain and ndots as in a Kubernetes pod
        self.netns_etc = Path("/etc/netns") / self.sup
        self.netns_etc.mkdir(parents=True, exist_ok=True)
        (self.netns_etc / "resolv.conf").write_text(f"nameserver {INET_DNS}\nsearch {SEARCH}\noptions ndots:5\n")
        # IPv4 first (RFC 6724 table with IPv4-mapped on top): the tests name the address the proxy dials first
        (self.netns_etc / "gai.conf").write_text("precedence ::ffff:0:0/96 100\n")
        sh("ip", "-n", self.inet, "link", "set", vi, "up")
        sh("ip", "-n", self.inet, "route", "add", f"{SUP_V4}/32", "dev", vi, check=False)
        proc = subprocess.Popen(
            in_ns(
                self.inet,
                PY,
                "-m",
                "tests.sandbox._netlab",
                "inet",
                "--ca",
                str(self.ca_path),
                "--dns-log",
                str(self.dns_log),
                "--request-log",
                str(self.request_log),
            ),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.procs.append(proc)
        Lines(proc).next("ready")

    def bridge(
        self,
        rules: list[str],
        *,
        private: tuple[str, ...] = (),
        toolbox: str = "lab",
        cname_targets: tuple[str, ...] = (),
        credentials: list[dict[str, Any]] | None = None,
        terminate: bool = False,
        loopback: bool = False,
        own_ports: tuple[int, ...] = (),
    ) -> Bridge:
        """A client namespace with only ``lo`` whose bridge is served by a proxy in the supervisor namespace.
        ``credentials``: what the proxy injects (``{name, value, bindings: [{hosts, ports, schemes,
        path_prefixes}], header: [name, template] | None, query}``); the proxy trusts the lab's CA upstream.
        ``terminate``: the TLS-terminating mode, with a CA of the proxy's own (its certificate in
        ``Bridge.terminating_ca``). ``loopback``: the policy opens the host's loopback to the toolbox;
        ``own_ports``: the ports the proxy takes for the supervisor's own listening sockets."""
        return Bridge(self, rules, private, toolbox, cname_targets, credentials or [], terminate, (loopback, own_ports))

    def requests(self) -> list[dict[str, Any]]:
        """Every request the lab's HTTP(S) servers received so far: ``{tag, host, path, headers}``."""
        if not self.request_log.exists():
            return []
        return [json.loads(line) for line in self.request_log.read_text().splitlines() if line]

    def queries(self) -> list[str]:
        """Every question the lab's DNS server got so far, as ``name TYPE`` lines (name without the final dot)."""
        return self.dns_log.read_text().splitlines() if self.dns_log.exists() else []

    def close(self) -> None:
        for proc in self.procs:
            _stop(proc)
        for ns in self.namespaces:
            sh("ip", "netns", "del", ns, check=False)
        if getattr(self, "netns_etc", None) is not None:
            shutil.rmtree(self.netns_etc, ignore_errors=True)


class Bridge:
    """One client namespace, its bridge, and the proxy process serving it (with its decisions as lines)."""

    def __init__(
        self,
        lab: Lab,
        rules: list[str],
        private: tuple[str, ...],
        toolbox: str,
        cname_targets: tuple[str, ...] = (),
        credentials: list[dict[str, Any]] | None = None,
        terminate: bool = False,
        opened: tuple[bool, tuple[int, ...]] = (False, ()),
    ) -> None:
        self.lab = lab
        self.ns = f"asv-c-{secrets.token_hex(3)}"
        sh("ip", "netns", "add", self.ns)
        lab.namespaces.append(self.ns)
        sh("ip", "-n", self.ns, "link", "set", "lo", "up")
        # credentials reach the proxy in a file of the lab's (0700) folder, never on a command line the client sees
        creds_file = lab.workdir / f"credentials-{self.ns}.json"
        creds_file.write_text(json.dumps(credentials or []))
        creds_file.chmod(0o600)
        self.terminating_ca = lab.workdir / f"terminating-ca-{self.ns}.pem"
        sup_end, cli_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with sup_end, cli_end:
            self.proxy = subprocess.Popen(
                in_ns(
                    lab.sup,
                    PY,
                    "-m",
                    "tests.sandbox._netlab",
                    "proxy",
                    "--bridge-fd",
                    str(sup_end.fileno()),
                    "--rules",
                    json.dumps(rules),
                    "--private",
                    json.dumps(list(private)),
                    "--cname-targets",
                    json.dumps(list(cname_targets)),
                    "--toolbox",
                    toolbox,
                    *(["--loopback"] if opened[0] else []),
                    "--own-ports",
                    json.dumps(list(opened[1])),
                    "--credentials",
                    str(creds_file),
                    "--upstream-ca",
                    str(lab.ca_path),
                    *(["--terminating-ca", str(self.terminating_ca)] if terminate else []),
                ),
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                pass_fds=[sup_end.fileno()],
            )
            lab.procs.append(self.proxy)
            self.lines = Lines(self.proxy)
            opened = subprocess.run(
                in_ns(
                    self.ns,
                    PY,
                    "-c",
                    f"from sandbox._bridge import open_bridge; print(open_bridge({cli_end.fileno()}))",
                ),
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=30,
                pass_fds=[cli_end.fileno()],
            )
            if opened.returncode != 0:
                raise RuntimeError(f"open_bridge failed: {opened.stderr}")
        self.lines.next("ready")
        from sandbox import BridgePorts, worker_network_env

        self.env = {"PATH": "/usr/bin:/bin", **worker_network_env(BridgePorts())}

    def run(
        self, *args: str, env: dict[str, str] | None = None, timeout: float = 30
    ) -> subprocess.CompletedProcess[str]:
        """Run a command in the client namespace with the worker's proxy environment."""
        return subprocess.run(
            in_ns(self.ns, *args),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**self.env, **(env or {})},
        )

    def python(self, code: str, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run(PY, "-c", code, *args)

    def curl(self, url: str, *extra: str) -> tuple[int, str]:
        """``curl`` through the proxy from the environment; returns (HTTP status, body)."""
        proc = self.run("curl", "-sS", "--max-time", "10", "-w", "\n%{http_code}", *extra, url)
        body, _, code = proc.stdout.rpartition("\n")
        return int(code or 0), body

    def decision(self) -> dict[str, Any]:
        """The next decision the proxy reported (waits for it, bounded)."""
        return json.loads(self.lines.next("decision"))

    def close(self) -> None:
        _stop(self.proxy)
        sh("ip", "netns", "del", self.ns, check=False)
        self.lab.namespaces.remove(self.ns)


# --- the processes --------------------------------------------------------------------------------------------


_LOG_LOCK = threading.Lock()
_REQUEST_LOG: list[str] = []  # the path of the request log, once set by _main_inet


def _log_request(tag: str, handler: http.server.BaseHTTPRequestHandler) -> None:
    if not _REQUEST_LOG:
        return
    entry = {
        "tag": tag,
        "host": handler.headers.get("Host"),
        "path": handler.path,
        "headers": [[k, v] for k, v in handler.headers.items()],
    }
    with _LOG_LOCK, open(_REQUEST_LOG[0], "a") as log:
        log.write(json.dumps(entry) + "\n")


def _http_handler(tag: str) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        server_version = "netlab"
        protocol_version = "HTTP/1.1"  # keep-alive: a client may send a second request on the connection

        def do_GET(self) -> None:
            _log_request(tag, self)
            if self.path.startswith("/redirect?to="):  # a redirect to wherever the query says
                from urllib.parse import unquote

                self.send_response(302)
                self.send_header("Location", unquote(self.path.split("=", 1)[1]))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if "/echo" in self.path:  # what this server received
                body = json.dumps(
                    {
                        "tag": tag,
                        "host": self.headers.get("Host"),
                        "path": self.path,
                        "headers": dict(self.headers.items()),
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            if self.path.startswith("/big/"):
                size = int(self.path.split("/")[2])
                self.send_response(200)
                self.send_header("Content-Length", str(size))
                self.end_headers()
                chunk = b"x" * 65536
                while size > 0:
                    self.wfile.write(chunk[:size])
                    size -= len(chunk)
                return
            body = f"{tag} host={self.headers.get('Host')} path={self.path}".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            _log_request(tag, self)
            data = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            body = f"{tag} received {len(data)} bytes".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    return Handler


def _serve_http(addr: str, port: int, tag: str, ctx: ssl.SSLContext | None = None) -> None:
    class Server(http.server.ThreadingHTTPServer):
        address_family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        daemon_threads = True

    server = Server((addr, port), _http_handler(tag))
    if ctx is not None:
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()


def _serve_dns(addr: str, log_path: str) -> None:
    import dns.message
    import dns.name
    import dns.rcode
    import dns.rdatatype
    import dns.rrset

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((addr, 53))

    def loop() -> None:
        while True:
            wire, peer = sock.recvfrom(4096)
            query = dns.message.from_wire(wire)
            question = query.question[0]
            name = question.name.to_text(omit_final_dot=True).lower()
            with open(log_path, "a") as log:
                log.write(f"{name} {dns.rdatatype.to_text(question.rdtype)}\n")
            response = dns.message.make_response(query)
            kind = dns.rdatatype.to_text(question.rdtype)
            owner, entry = question.name, ZONE.get(name)
            if entry is None:
                response.set_rcode(dns.rcode.NXDOMAIN)
            while entry is not None and entry.get("CNAME") and kind != "CNAME":  # a chain, as a recursive resolver
                target = entry["CNAME"][0]
                response.answer.append(dns.rrset.from_text_list(owner, 60, "IN", "CNAME", [target + "."]))
                owner, entry = dns.name.from_text(target), ZONE.get(target)
            if entry is not None and entry.get(kind):
                response.answer.append(dns.rrset.from_text_list(owner, 60, "IN", kind, entry[kind]))
            sock.sendto(response.to_wire(), peer)

    threading.Thread(target=loop, daemon=True).start()


def _main_inet(args: argparse.Namespace) -> None:
    import trustme

    ca = trustme.CA()
    ca.cert_pem.write_to_path(args.ca)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*TLS_NAMES).configure_cert(ctx)
    if args.request_log:
        _REQUEST_LOG.append(args.request_log)
    _serve_http(INET_HTTP, 80, "origin")
    _serve_http(INET_V6, 80, "origin6")
    _serve_http(INET_TLS, 443, "tls-origin", ctx)
    _serve_http(METADATA, 80, "SECRET-METADATA")
    for addr in METADATA_ELSEWHERE:
        _serve_http(addr, 80, "SECRET-METADATA")
    _serve_http(SEARCH_ANSWER, 80, "SEARCH-LIST-ANSWER")
    _serve_http(INET_TLS, ALT_PORT, "origin-alt-port")
    _serve_dns(INET_DNS, args.dns_log)
    print("ready", flush=True)
    threading.Event().wait()


def _credentials(path: str) -> tuple[Any, ...]:
    from sandbox import Credential, CredentialBinding

    out = []
    for c in json.loads(Path(path).read_text()):
        bindings = tuple(
            CredentialBinding(
                tuple(b["hosts"]),
                tuple(b.get("ports", ())),
                tuple(b.get("schemes", ("https",))),
                tuple(b.get("path_prefixes", ())),
            )
            for b in c["bindings"]
        )
        header = tuple(c["header"]) if c.get("header") else None
        out.append(Credential(c["name"], c["value"], bindings, header, c.get("query")))  # type: ignore[arg-type]
    return tuple(out)


def _main_proxy(args: argparse.Namespace) -> None:
    import trio

    from sandbox import AllowedHosts, serve_dns_stub, serve_egress
    from sandbox._bridge import receive_bridge_nowait

    try:
        _serve_http("127.0.0.1", LOOPBACK_PORT, "loopback-service")
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise  # else another bridge's proxy in the supervisor namespace serves it already
    with socket.socket(fileno=args.bridge_fd) as carrier:
        bridge = receive_bridge_nowait(carrier)
    rules = AllowedHosts.parse(
        json.loads(args.rules),
        private_networks=json.loads(args.private),
        cname_targets=json.loads(args.cname_targets),
        loopback=args.loopback,
        policy_key=f"toolboxes.lab/{args.toolbox}",
    )
    own_ports = frozenset(json.loads(args.own_ports))
    credentials = _credentials(args.credentials) if args.credentials else ()
    upstream_tls = ssl.create_default_context(cafile=args.upstream_ca) if args.upstream_ca else None
    terminator = None
    if args.terminating_ca:
        from sandbox import supervisor_ca

        terminator = supervisor_ca()
        Path(args.terminating_ca).write_bytes(terminator.cert_pem)

    def report(record: dict[str, Any]) -> None:
        print("decision", json.dumps(record), flush=True)

    async def main() -> None:
        proxy, udp, tcp = bridge.to_trio()
        async with trio.open_nursery() as nursery:
            await nursery.start(
                lambda task_status: serve_egress(
                    proxy,
                    rules,
                    on_decision=report,
                    toolbox=args.toolbox,
                    credentials=credentials,
                    upstream_tls=upstream_tls,
                    terminator=terminator,
                    own_ports=lambda: own_ports,
                    task_status=task_status,
                )
            )
            await nursery.start(lambda task_status: serve_dns_stub(udp, tcp, rules, task_status=task_status))
            print("ready", flush=True)

    trio.run(main)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["inet", "proxy"])
    parser.add_argument("--ca")
    parser.add_argument("--dns-log")
    parser.add_argument("--bridge-fd", type=int)
    parser.add_argument("--rules", default="[]")
    parser.add_argument("--private", default="[]")
    parser.add_argument("--cname-targets", default="[]")
    parser.add_argument("--toolbox", default="lab")
    parser.add_argument("--loopback", action="store_true")
    parser.add_argument("--own-ports", default="[]")
    parser.add_argument("--request-log")
    parser.add_argument("--credentials")
    parser.add_argument("--upstream-ca")
    parser.add_argument("--terminating-ca")
    args = parser.parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[attr-defined]
    os.environ.pop("HTTP_PROXY", None)
    (_main_inet if args.mode == "inet" else _main_proxy)(args)


if __name__ == "__main__":
    main()
