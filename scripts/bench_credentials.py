#!/opt/agents-supervise/venv/bin/python
"""Benchmark egress credential injection: one HTTPS request per connection, three ways, in the same run.

Three processes on 127.0.0.1 of the current namespace (nothing leaves loopback): an HTTPS server (a ``trustme`` CA
made for the run, certificate for 127.0.0.1), the egress proxy (``sandbox._egress.serve_egress``, AllowedHosts
``127.0.0.1``, one credential bound to ``127.0.0.1:<port>``, upstream verified against the run's CA) and this
client. Each round, in rotating order:

- ``absolute+credential``: ``GET https://127.0.0.1:<port>/`` sent in plain HTTP to the proxy, which matches and
  adds the credential and originates (and verifies) TLS: what the project's own clients do;
- ``absolute``: the same to a path the credential is not bound to (``path_prefixes``): the injection's own cost
  is the difference;
- ``CONNECT``: a tunnel, and TLS from the client itself to the server (what a client that tunnels pays; it gets
  no credential).

Prints the median and p90 of each, and the differences. Target: injection within noise of ``absolute``.

Usage: ``scripts/bench_credentials.py [--requests 300]``
"""

from __future__ import annotations

import argparse
import http.server
import multiprocessing
import socket
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SECRET = "bench-secret-value"


def _server(port_out: multiprocessing.connection.Connection, ca_dir: str) -> None:
    import trustme

    ca = trustme.CA()
    ca.cert_pem.write_to_path(f"{ca_dir}/ca.pem")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(ctx)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"ok" if self.headers.get("Authorization") != f"Bearer {SECRET}" else b"ok+credential"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    port_out.send(server.server_address[1])
    server.serve_forever()


def _proxy(port_out: multiprocessing.connection.Connection, server_port: int, ca_file: str) -> None:
    import trio

    from sandbox import AllowedHosts, Credential, CredentialBinding, serve_egress

    cred = Credential(
        "bench",
        SECRET,
        (CredentialBinding(("127.0.0.1",), (server_port,), ("https",), ("/bound",)),),
        ("Authorization", "Bearer {value}"),
    )

    async def main() -> None:
        sock = trio.socket.socket()
        await sock.bind(("127.0.0.1", 0))
        sock.listen(512)
        port_out.send(sock.getsockname()[1])
        await serve_egress(
            sock,
            AllowedHosts.parse(["127.0.0.1"], loopback=True),
            on_decision=lambda record: None,
            own_addresses=frozenset,
            credentials=(cred,),
            upstream_tls=ssl.create_default_context(cafile=ca_file),
        )

    trio.run(main)


def _read_all(sock: socket.socket | ssl.SSLSocket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def _absolute(proxy_port: int, server_port: int, path: str) -> bytes:
    with socket.create_connection(("127.0.0.1", proxy_port)) as sock:
        sock.sendall(f"GET https://127.0.0.1:{server_port}{path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        return _read_all(sock)


def _connect(proxy_port: int, server_port: int, client_tls: ssl.SSLContext) -> bytes:
    sock = socket.create_connection(("127.0.0.1", proxy_port))
    sock.sendall(f"CONNECT 127.0.0.1:{server_port} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        byte = sock.recv(1)
        if not byte:
            raise RuntimeError("the proxy closed the tunnel")
        head += byte
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"the proxy refused: {head!r}")
    with client_tls.wrap_socket(sock, server_hostname="127.0.0.1") as tls:
        tls.sendall(b"GET /tunnel HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        return _read_all(tls)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args(argv)
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as ca_dir:
        server_recv, server_send = ctx.Pipe(duplex=False)
        procs = [ctx.Process(target=_server, args=(server_send, ca_dir), daemon=True)]
        procs[0].start()
        try:
            server_port = server_recv.recv()
            proxy_recv, proxy_send = ctx.Pipe(duplex=False)
            procs.append(ctx.Process(target=_proxy, args=(proxy_send, server_port, f"{ca_dir}/ca.pem"), daemon=True))
            procs[1].start()
            proxy_port = proxy_recv.recv()
            client_tls = ssl.create_default_context(cafile=f"{ca_dir}/ca.pem")
            ways = {
                "absolute+credential": lambda: _absolute(proxy_port, server_port, "/bound/x"),
                "absolute": lambda: _absolute(proxy_port, server_port, "/unbound/x"),
                "CONNECT": lambda: _connect(proxy_port, server_port, client_tls),
            }
            expected = {"absolute+credential": b"ok+credential", "absolute": b"ok", "CONNECT": b"ok"}
            for name, way in ways.items():  # warm up, and check each way does what it says
                body = way().partition(b"\r\n\r\n")[2]
                if body != expected[name]:
                    raise RuntimeError(f"{name}: unexpected answer {body!r}")
            times: dict[str, list[float]] = {name: [] for name in ways}
            order = list(ways)
            for i in range(args.requests):
                for name in order[i % 3 :] + order[: i % 3]:
                    start = time.perf_counter()
                    ways[name]()
                    times[name].append(time.perf_counter() - start)
        finally:
            for proc in procs:
                proc.kill()
                proc.join()
    med = {name: statistics.median(t) * 1000 for name, t in times.items()}
    for name, t in times.items():
        p90 = statistics.quantiles(t, n=10)[-1] * 1000
        print(f"{name:>20}: median {med[name]:.3f} ms, p90 {p90:.3f} ms ({len(t)} requests)")
    injection = med["absolute+credential"] - med["absolute"]
    noise = statistics.stdev(times["absolute"]) * 1000 / len(times["absolute"]) ** 0.5 * 2
    print(
        f"credential injection: {injection:+.3f} ms per request (noise, 2 standard errors: {noise:.3f} ms); "
        f"absolute-form https vs CONNECT + client TLS: {med['absolute+credential'] - med['CONNECT']:+.3f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
