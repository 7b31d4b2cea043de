"""The bridge hand-over (SCM_RIGHTS) and the worker's network environment, on this namespace's loopback."""

from __future__ import annotations

import os
import socket

import pytest
import trio

from sandbox import BridgeError, BridgePorts, ConfinementError, receive_bridge, worker_network_env
from sandbox._bridge import decode_bridge_message, encode_bridge_message, open_bridge, receive_bridge_nowait
from sandbox._resolver import plan_resolv_conf


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_message_round_trip_and_refusals() -> None:
    ports = BridgePorts(proxy=3128, dns=53)
    assert decode_bridge_message(encode_bridge_message(ports)) == ports
    for bad in [
        b"",
        b"\xff",
        b"[]",
        b'{"magic": "other", "proxy": 1, "dns": 2}',
        b'{"magic": "agents-supervise-bridge/1", "proxy": 0, "dns": 53}',
        b'{"magic": "agents-supervise-bridge/1", "proxy": true, "dns": 53}',
        b'{"magic": "agents-supervise-bridge/1", "proxy": 3128}',
    ]:
        with pytest.raises(BridgeError):
            decode_bridge_message(bad)


def test_open_bridge_hands_over_listening_sockets_and_closes_its_end() -> None:
    parent, child = socket.socketpair()
    child_fd = child.detach()
    try:
        ports = open_bridge(child_fd, proxy_port=0, dns_port=0)
    except BaseException:
        parent.close()
        raise
    with pytest.raises(OSError, match="Bad file descriptor"):
        os.fstat(child_fd)  # open_bridge closed the carrier
    bridge = receive_bridge_nowait(parent)
    try:
        assert bridge.ports == ports
        assert bridge.proxy.getsockname() == ("127.0.0.1", ports.proxy)
        assert bridge.dns_udp.getsockname() == ("127.0.0.1", ports.dns)
        assert bridge.dns_tcp.getsockname() == ("127.0.0.1", ports.dns)
        assert bridge.dns_udp.type == socket.SOCK_DGRAM
        # the received listener really accepts: connect through it
        with socket.create_connection(("127.0.0.1", ports.proxy), timeout=5):
            bridge.proxy.setblocking(True)
            conn, _ = bridge.proxy.accept()
            conn.close()
        assert ports.tcp_connect_ports == (ports.proxy, ports.dns)
    finally:
        bridge.close()
        bridge.close()  # twice is fine
        parent.close()


def test_eof_before_the_bridge_is_an_error() -> None:
    parent, child = socket.socketpair()
    child.close()
    with pytest.raises(BridgeError, match="closed the bridge socket"):
        receive_bridge_nowait(parent)
    parent.close()


def test_wrong_descriptors_are_refused_and_closed() -> None:
    parent, child = socket.socketpair()
    r1, w1 = os.pipe()
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    before = _open_fds()
    socket.send_fds(child, [encode_bridge_message(BridgePorts(3128, udp.getsockname()[1]))], [r1, w1, udp.fileno()])
    with pytest.raises(BridgeError):
        receive_bridge_nowait(parent)
    assert _open_fds() == before  # the received copies were closed
    socket.send_fds(child, [encode_bridge_message(BridgePorts())], [r1])
    with pytest.raises(BridgeError, match="1 file descriptors"):
        receive_bridge_nowait(parent)
    assert _open_fds() == before
    for fd in (r1, w1):
        os.close(fd)
    udp.close()
    parent.close()
    child.close()


def test_open_bridge_fails_closed_when_a_port_is_taken() -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    parent, child = socket.socketpair()
    child_fd = child.detach()
    with pytest.raises(BridgeError, match="cannot open"):
        open_bridge(child_fd, proxy_port=taken.getsockname()[1], dns_port=0)
    with pytest.raises(OSError, match="Bad file descriptor"):
        os.fstat(child_fd)
    taken.close()
    parent.close()


def test_a_dns_port_taken_for_tcp_only_is_given_back_and_refused_when_fixed() -> None:
    """A kernel-chosen UDP number may be taken for TCP by another process of a shared namespace: the pair is given
    back (both closed) so that open_bridge picks again; a fixed DNS port taken for TCP is the bridge's error."""
    from sandbox._bridge import _dns_pair

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    socks: list[socket.socket] = []
    before = _open_fds()
    udp, tcp = _dns_pair(socks, port)
    assert tcp is None and socks == [] and udp.fileno() == -1 and _open_fds() == before
    parent, child = socket.socketpair()
    with pytest.raises(BridgeError, match="Address already in use"):
        open_bridge(child.detach(), proxy_port=0, dns_port=port)
    assert len(_open_fds()) == len(before) + 1  # the pair's parent end: every bridge socket and the carrier closed
    taken.close()
    parent.close()


async def test_receive_bridge_under_trio() -> None:
    parent, child = socket.socketpair()
    tparent = trio.socket.from_stdlib_socket(parent)
    child_fd = child.detach()
    ports = await trio.to_thread.run_sync(lambda: open_bridge(child_fd, proxy_port=0, dns_port=0))
    with trio.fail_after(5):
        bridge = await receive_bridge(tparent)
    assert bridge.ports == ports
    proxy, udp, tcp = bridge.to_trio()
    for s in (proxy, udp, tcp):
        s.close()
    tparent.close()


def test_worker_network_env_points_every_client_at_the_proxy() -> None:
    env = worker_network_env(BridgePorts(proxy=3128))
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        assert env[name] == "http://127.0.0.1:3128"
    assert env["NO_PROXY"] == env["no_proxy"] == ""


def test_resolv_conf_names_the_stub_and_only_port_53() -> None:
    assert "nameserver 127.0.0.1\n" in plan_resolv_conf(53)
    with pytest.raises(ConfinementError):
        plan_resolv_conf(5353)
