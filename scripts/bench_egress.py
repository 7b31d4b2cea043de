#!/opt/agents-supervise/venv/bin/python
"""Benchmark the egress proxy against direct loopback: throughput of a large transfer and connect overhead.

Three processes on 127.0.0.1 of the current namespace (nothing leaves loopback): a sink/source server, the
proxy (``sandbox._egress.serve_egress`` under trio, AllowedHosts ``127.0.0.1``) and this client. The client
downloads ``--mib`` MiB directly and through a CONNECT tunnel, then makes ``--connects`` short connections
(connect, one byte each way) both ways, and prints the ratios. Targets: tunnel throughput at least half of
direct, connect overhead (median, proxy minus direct) under 1 ms.

Usage: ``scripts/bench_egress.py [--mib 256] [--connects 300]``
"""

from __future__ import annotations

import argparse
import multiprocessing
import socket
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CHUNK = 1 << 20


def _server(port_out: multiprocessing.connection.Connection, total: int) -> None:
    listener = socket.create_server(("127.0.0.1", 0), backlog=512)
    port_out.send(listener.getsockname()[1])
    payload = b"x" * CHUNK

    def handle(conn: socket.socket) -> None:
        with conn:
            command = conn.recv(1)
            if command == b"B":
                left = total
                while left > 0:
                    conn.sendall(payload[: min(left, CHUNK)])
                    left -= CHUNK
            elif command == b"P":
                conn.sendall(b"p")

    while True:
        conn, _ = listener.accept()
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


def _proxy(port_out: multiprocessing.connection.Connection) -> None:
    import trio

    from sandbox import AllowedHosts, serve_egress

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
        )

    trio.run(main)


def _connect(server_port: int, proxy_port: int | None) -> socket.socket:
    if proxy_port is None:
        return socket.create_connection(("127.0.0.1", server_port))
    sock = socket.create_connection(("127.0.0.1", proxy_port))
    sock.sendall(f"CONNECT 127.0.0.1:{server_port} HTTP/1.1\r\nHost: 127.0.0.1:{server_port}\r\n\r\n".encode())
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        byte = sock.recv(1)
        if not byte:
            raise RuntimeError("the proxy closed the connection")
        head += byte
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"the proxy refused: {head!r}")
    return sock


def _download(server_port: int, proxy_port: int | None, total: int) -> float:
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    start = time.perf_counter()
    with _connect(server_port, proxy_port) as sock:
        sock.sendall(b"B")
        got = 0
        while True:
            n = sock.recv_into(view)
            if not n:
                break
            got += n
    elapsed = time.perf_counter() - start
    if got != total:
        raise RuntimeError(f"received {got} bytes, expected {total}")
    return total / elapsed


def _connect_time(server_port: int, proxy_port: int | None) -> float:
    start = time.perf_counter()
    with _connect(server_port, proxy_port) as sock:
        sock.sendall(b"P")
        if sock.recv(1) != b"p":
            raise RuntimeError("no pong")
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--connects", type=int, default=300)
    args = parser.parse_args(argv)
    total = args.mib * CHUNK
    ctx = multiprocessing.get_context("spawn")
    server_recv, server_send = ctx.Pipe(duplex=False)
    proxy_recv, proxy_send = ctx.Pipe(duplex=False)
    procs = [
        ctx.Process(target=_server, args=(server_send, total), daemon=True),
        ctx.Process(target=_proxy, args=(proxy_send,), daemon=True),
    ]
    for proc in procs:
        proc.start()
    try:
        server_port, proxy_port = server_recv.recv(), proxy_recv.recv()
        _connect_time(server_port, proxy_port)  # warm up both paths
        _connect_time(server_port, None)
        direct_bps = max(_download(server_port, None, total) for _ in range(2))
        proxy_bps = max(_download(server_port, proxy_port, total) for _ in range(2))
        direct_t, proxy_t = [], []
        for _ in range(args.connects):
            direct_t.append(_connect_time(server_port, None))
            proxy_t.append(_connect_time(server_port, proxy_port))
    finally:
        for proc in procs:
            proc.kill()
            proc.join()
    ratio = proxy_bps / direct_bps
    overhead_ms = (statistics.median(proxy_t) - statistics.median(direct_t)) * 1000
    mib = 1 << 20
    print(
        f"transfer of {args.mib} MiB: direct {direct_bps / mib:.0f} MiB/s, "
        f"through the proxy {proxy_bps / mib:.0f} MiB/s, ratio {ratio:.2f} (target >= 0.50)"
    )
    print(
        f"connect + 1-byte round trip, median of {args.connects}: direct "
        f"{statistics.median(direct_t) * 1000:.3f} ms, through the proxy {statistics.median(proxy_t) * 1000:.3f} ms, "
        f"overhead {overhead_ms:.3f} ms (target < 1 ms)"
    )
    ok = ratio >= 0.5 and overhead_ms < 1.0
    print("targets met" if ok else "targets NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
