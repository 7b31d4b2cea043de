"""The egress bridge: the one door out of a worker's network namespace, and the environment that points at it.

The launcher, right after it entered a fresh network namespace and brought ``lo`` up (still root, before
Landlock), calls :func:`open_bridge`: it binds three listening sockets on the namespace's 127.0.0.1, an HTTP
proxy (TCP, port 3128) and a DNS stub (UDP and TCP, port 53), and sends them over the inherited unix socket
with ``SCM_RIGHTS``, together with their port numbers. It then closes its own copies: no process inside the
sandbox keeps a bridge socket. The supervisor receives them with :func:`receive_bridge` and serves them with
trio (:func:`sandbox._egress.serve_egress`, :func:`sandbox._dns_stub.serve_dns_stub`); a socket keeps the
namespace it was made in, so connections the worker makes to 127.0.0.1:3128 arrive at the supervisor.

The ports are fixed (3128 and 53) because every worker has its own namespace, so they never clash, Landlock's
TCP rules can name them before the sockets exist, and a resolv.conf cannot name a DNS port other than 53.

What this module does not do: decide anything (the proxy and the stub do), or route name resolution to the stub
(:mod:`sandbox._resolver` does that with a private ``/etc/resolv.conf``).
"""

from __future__ import annotations

import errno
import json
import os
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandbox._errors import SandboxError

if TYPE_CHECKING:
    import trio

__all__ = [
    "DEFAULT_DNS_PORT",
    "DEFAULT_PROXY_PORT",
    "BridgeError",
    "BridgePorts",
    "BridgeSockets",
    "decode_bridge_message",
    "encode_bridge_message",
    "open_bridge",
    "receive_bridge",
    "receive_bridge_nowait",
    "worker_network_env",
]

DEFAULT_PROXY_PORT = 3128
DEFAULT_DNS_PORT = 53
BRIDGE_HOST = "127.0.0.1"
_MAGIC = "agents-supervise-bridge/1"
_MAX_MESSAGE = 1024
_FD_COUNT = 3
_BACKLOG = 128


class BridgeError(SandboxError):
    """The bridge could not be opened or what arrived on the bridge socket is not a bridge.

    Raised by :func:`open_bridge` in the launcher (bind or send failed: the worker must not run, so the launcher
    reports it like a confinement failure) and by :func:`receive_bridge` in the supervisor (EOF before the
    message, wrong message, wrong number or kind of sockets: the launcher is broken or not ours; kill it).
    Any file descriptors that did arrive are closed before this is raised.
    """


@dataclass(frozen=True)
class BridgePorts:
    """The ports the bridge listens on inside the worker's namespace (all on 127.0.0.1)."""

    proxy: int = DEFAULT_PROXY_PORT
    dns: int = DEFAULT_DNS_PORT

    @property
    def tcp_connect_ports(self) -> tuple[int, ...]:
        """The TCP ports a worker must be allowed to connect to (for the Landlock plan)."""
        return (self.proxy, self.dns)


@dataclass
class BridgeSockets:
    """The bridge sockets as received by the supervisor; it owns them and must :meth:`close` them.

    Attributes:
        proxy: listening TCP socket of the HTTP proxy.
        dns_udp: bound UDP socket of the DNS stub.
        dns_tcp: listening TCP socket of the DNS stub.
        ports: their ports inside the worker's namespace.
    """

    proxy: socket.socket
    dns_udp: socket.socket
    dns_tcp: socket.socket
    ports: BridgePorts

    def close(self) -> None:
        """Close the three sockets; closing twice is fine."""
        for sock in (self.proxy, self.dns_udp, self.dns_tcp):
            sock.close()

    def to_trio(self) -> tuple[trio.socket.SocketType, trio.socket.SocketType, trio.socket.SocketType]:
        """Wrap the sockets for trio (proxy, dns_udp, dns_tcp); trio then owns the same file descriptors."""
        import trio

        return (
            trio.socket.from_stdlib_socket(self.proxy),
            trio.socket.from_stdlib_socket(self.dns_udp),
            trio.socket.from_stdlib_socket(self.dns_tcp),
        )


def encode_bridge_message(ports: BridgePorts) -> bytes:
    """The data part of the bridge message: a small JSON object with a magic string and the ports."""
    return json.dumps({"magic": _MAGIC, "proxy": ports.proxy, "dns": ports.dns}).encode()


def decode_bridge_message(data: bytes) -> BridgePorts:
    """Parse the data part of the bridge message; raise :class:`BridgeError` when it is not one."""
    try:
        obj = json.loads(data.decode())
    except (UnicodeDecodeError, ValueError):
        raise BridgeError(f"the bridge message is not JSON ({len(data)} bytes)") from None
    if not isinstance(obj, dict) or obj.get("magic") != _MAGIC:
        raise BridgeError("the bridge message does not carry the bridge magic string")
    ports = []
    for key in ("proxy", "dns"):
        value = obj.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 65535:
            raise BridgeError(f"the bridge message has no valid {key!r} port")
        ports.append(value)
    return BridgePorts(proxy=ports[0], dns=ports[1])


_DNS_PORT_TRIES = 16


def _dns_pair(socks: list[socket.socket], port: int) -> tuple[socket.socket, socket.socket | None]:
    """Bind the DNS port's UDP and listening TCP socket on ``port`` (0: the UDP socket's, chosen by the kernel),
    appended to ``socks``. A TCP port already taken (possible only for a kernel-chosen number, in a shared
    namespace) gives ``None`` for TCP, with that UDP socket closed and removed, so the caller may pick again."""
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    socks.append(udp)
    udp.bind((BRIDGE_HOST, port))
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    socks.append(tcp)
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        tcp.bind((BRIDGE_HOST, udp.getsockname()[1]))
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        for s in (tcp, udp):
            socks.remove(s)
            s.close()
        return udp, None
    tcp.listen(_BACKLOG)
    return udp, tcp


def open_bridge(unix_fd: int, *, proxy_port: int = DEFAULT_PROXY_PORT, dns_port: int = DEFAULT_DNS_PORT) -> BridgePorts:
    """Open the bridge sockets in the current network namespace, send them over ``unix_fd``, close both ends.

    Binds 127.0.0.1:``proxy_port`` (TCP, listening), 127.0.0.1:``dns_port`` (UDP) and 127.0.0.1:``dns_port``
    (TCP, listening); a port of 0 lets the kernel choose (the message carries the real ports; for DNS, a number
    free for both UDP and TCP, tried up to 16 times). Ports below 1024 need root or ``CAP_NET_BIND_SERVICE`` in
    the namespace's owner: call this before dropping privileges. Blocking and synchronous (the launcher is
    single-threaded). ``unix_fd`` is closed in every case.

    Raises:
        BridgeError: a bind or the send failed; the worker must not run.
    """
    socks: list[socket.socket] = []
    try:
        try:
            proxy = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(proxy)
            proxy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            proxy.bind((BRIDGE_HOST, proxy_port))
            proxy.listen(_BACKLOG)
            for attempt in range(_DNS_PORT_TRIES if dns_port == 0 else 1):
                udp, tcp = _dns_pair(socks, dns_port)
                if tcp is not None:
                    break
                if attempt == _DNS_PORT_TRIES - 1 or dns_port != 0:
                    raise OSError(errno.EADDRINUSE, os.strerror(errno.EADDRINUSE))
            dns_port = udp.getsockname()[1]
        except OSError as exc:
            raise BridgeError(f"cannot open the egress bridge sockets: {exc.strerror or exc}") from exc
        ports = BridgePorts(proxy=proxy.getsockname()[1], dns=dns_port)
        try:
            with socket.socket(fileno=os.dup(unix_fd)) as carrier:
                socket.send_fds(carrier, [encode_bridge_message(ports)], [s.fileno() for s in socks])
        except OSError as exc:
            raise BridgeError(f"cannot pass the egress bridge to the supervisor: {exc.strerror or exc}") from exc
        return ports
    finally:
        for s in socks:
            s.close()
        try:
            os.close(unix_fd)
        except OSError:
            pass


def _check_socket(sock: socket.socket, kind: int, port: int, what: str) -> None:
    try:
        family, stype = sock.family, sock.type
        host, got_port = sock.getsockname()[:2]
        listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
    except (OSError, ValueError) as exc:
        raise BridgeError(f"the bridge's {what} is not a usable socket: {exc}") from None
    if family != socket.AF_INET or stype != kind or host != BRIDGE_HOST or got_port != port:
        raise BridgeError(
            f"the bridge's {what} is not the expected socket (got {family!r}/{stype!r} on {host}:{got_port}, "
            f"expected {BRIDGE_HOST}:{port})"
        )
    if kind == socket.SOCK_STREAM and not listening:
        raise BridgeError(f"the bridge's {what} is not listening")


def _build(data: bytes, fds: list[int]) -> BridgeSockets:
    """Turn a received message into :class:`BridgeSockets`, closing every fd on any failure."""
    socks: list[socket.socket] = []
    try:
        if not data:
            raise BridgeError("the launcher closed the bridge socket before sending the bridge")
        if len(fds) != _FD_COUNT:
            raise BridgeError(f"the bridge message carries {len(fds)} file descriptors, expected {_FD_COUNT}")
        ports = decode_bridge_message(data)
        while fds:
            try:
                socks.append(socket.socket(fileno=fds[0]))
            except OSError as exc:
                raise BridgeError(f"a bridge descriptor is not a socket: {exc.strerror or exc}") from None
            fds.pop(0)
        proxy, udp, tcp = socks
        _check_socket(proxy, socket.SOCK_STREAM, ports.proxy, "proxy socket")
        _check_socket(udp, socket.SOCK_DGRAM, ports.dns, "DNS UDP socket")
        _check_socket(tcp, socket.SOCK_STREAM, ports.dns, "DNS TCP socket")
        for s in socks:
            s.setblocking(False)
        return BridgeSockets(proxy=proxy, dns_udp=udp, dns_tcp=tcp, ports=ports)
    except BaseException:
        for s in socks:
            s.close()
        for fd in fds:
            os.close(fd)
        raise


def _fds_from_ancillary(ancdata: list[tuple[int, int, bytes]]) -> list[int]:
    fds: list[int] = []
    for level, ctype, cdata in ancdata:
        if level == socket.SOL_SOCKET and ctype == socket.SCM_RIGHTS:
            usable = len(cdata) - len(cdata) % 4
            fds.extend(int.from_bytes(cdata[i : i + 4], "little", signed=True) for i in range(0, usable, 4))
    return fds


def receive_bridge_nowait(sock: socket.socket) -> BridgeSockets:
    """Receive the bridge from a blocking stdlib socket (waits until the launcher sends or closes).

    Raises:
        BridgeError: EOF first, a malformed message, or sockets that are not the bridge's.
    """
    data, ancdata, _flags, _addr = sock.recvmsg(
        _MAX_MESSAGE, socket.CMSG_SPACE(4 * (_FD_COUNT + 1)), socket.MSG_CMSG_CLOEXEC
    )
    return _build(data, _fds_from_ancillary(ancdata))


async def receive_bridge(sock: trio.socket.SocketType) -> BridgeSockets:
    """Wait for the bridge on a trio unix socket and return the received sockets (non-blocking, for trio).

    A checkpoint; cancellable while waiting (the caller bounds the wait with ``trio.fail_after``). Sockets that
    arrived are owned by the caller, who must close them (``BridgeSockets.close``).

    Raises:
        BridgeError: EOF first, a malformed message, or sockets that are not the bridge's.
    """
    data, ancdata, _flags, _addr = await sock.recvmsg(
        _MAX_MESSAGE, socket.CMSG_SPACE(4 * (_FD_COUNT + 1)), socket.MSG_CMSG_CLOEXEC
    )
    return _build(data, _fds_from_ancillary(ancdata))


def worker_network_env(ports: BridgePorts) -> dict[str, str]:
    """The environment that points a worker's HTTP clients at the proxy (merge it into ``plan.env``).

    ``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY`` and their lower-case forms (curl reads only the lower-case
    ``http_proxy``) name ``http://127.0.0.1:<proxy>``; ``NO_PROXY``/``no_proxy`` are empty so that even
    ``localhost`` goes through the proxy (the worker's own loopback has nothing else on it).
    """
    url = f"http://{BRIDGE_HOST}:{ports.proxy}"
    env: dict[str, str] = {}
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        env[name] = url
        env[name.lower()] = url
    env["NO_PROXY"] = ""
    env["no_proxy"] = ""
    return env
