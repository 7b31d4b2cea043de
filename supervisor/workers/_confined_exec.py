"""Run one program to completion under the launcher's confinement (the confined command runner).

The supervisor uses it for work it must do before any worker exists, on untrusted input: cloning a git skill
source (``_skill_sources.py``) and running a script's ``describe`` for ``agents-supervise check-tool-call``.
The program runs through ``sandbox._launcher`` with the built-in entry ``sandbox._launcher:exec_argv``: the
launcher confines itself from a :class:`~sandbox._plan.ConfinementPlan` (own network and PID namespaces,
Landlock rules given here, rlimits, no_new_privs, the sandbox uid) and then executes the program, so nothing of
it runs unconfined.

With ``allowed_hosts`` the plan asks for the egress bridge and this module serves it (proxy and DNS stub, the
same code that serves workers) while the program runs; without, the program has loopback only.

What it leaves to callers: which paths to grant (they pass every rule), what the output means, and retries.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import struct
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack
import trio

import sandbox
from sandbox._bridge import BridgeError, BridgePorts, receive_bridge, worker_network_env
from sandbox._credentials import Credential
from sandbox._dns_stub import serve_dns_stub
from sandbox._egress import Terminator, serve_egress
from sandbox._hosts import AllowedHosts
from sandbox._plan import ConfinementPlan, FsRule, Rlimits

from ._spawn import spawn_child

__all__ = ["ConfinedOutcome", "launcher_argv", "run_confined"]

#: Exit status of the launcher when a confinement step failed (``sandbox._launcher.EXIT_CONFINEMENT_FAILED``).
EXIT_CONFINEMENT_FAILED = 78


def launcher_argv(python: str | None = None, code_root: str | None = None) -> list[str]:
    """The command that starts the launcher; ``code_root`` holds the ``sandbox`` package (default: this checkout).

    The launcher imports everything it needs (``exec_argv`` lives in the launcher module itself) before it
    confines itself, so ``code_root`` need not be readable by the sandbox uid.
    """
    root = code_root or os.path.dirname(os.path.dirname(os.path.abspath(sandbox.__file__)))
    boot = f"import sys; sys.path.insert(0, {root!r}); from sandbox._launcher import main; main()"
    return [python or sys.executable, "-I", "-B", "-c", boot]


@dataclass(frozen=True)
class ConfinedOutcome:
    """How a confined program ended. ``returncode`` is negative for a signal, ``None`` when it was killed at
    the time limit (``timed_out``). Output past the caps is dropped (``*_total`` counts every byte)."""

    returncode: int | None
    stdout: bytes
    stderr: bytes
    stdout_total: int
    timed_out: bool

    @property
    def confinement_failed(self) -> bool:
        return self.returncode == EXIT_CONFINEMENT_FAILED and b"agents-supervise launcher" in self.stderr

    def stderr_text(self, limit: int = 2000) -> str:
        return self.stderr.decode("utf-8", "replace").strip()[-limit:]


async def _read_capped(stream: Any, cap: int, into: list[bytes], total: list[int]) -> None:
    kept = 0
    try:
        while chunk := await stream.receive_some(65536):
            total[0] += len(chunk)
            if kept < cap:
                into.append(chunk[: cap - kept])
                kept += len(into[-1])
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass


async def run_confined(
    argv: Sequence[str],
    *,
    toolbox: str,
    workdir: str,
    fs_rules: Sequence[FsRule],
    env: dict[str, str],
    timeout_s: float,
    uid: int | None = None,
    gid: int | None = None,
    min_landlock_abi: int = 1,
    rlimits: Rlimits | None = None,
    allowed_hosts: Sequence[str] = (),
    private_networks: Sequence[str] = (),
    cname_targets: Sequence[str] = (),
    on_egress: Callable[[dict[str, Any]], None] | None = None,
    credentials: Sequence[Credential] = (),
    terminator: Terminator | None = None,
    launcher: Sequence[str] | None = None,
    stdout_cap: int = 1 << 20,
    stderr_cap: int = 64 << 10,
) -> ConfinedOutcome:
    """Run ``argv`` confined and wait for it (at most ``timeout_s``, then SIGKILL of the launcher, whose PID
    namespace dies with it). Stdin is empty.

    ``uid``/``gid`` must be given when the supervisor runs as root (the launcher refuses to run as root).
    Raises ``OSError`` only when the launcher itself cannot be spawned; everything the program or the
    confinement does is in the outcome. Cancellation kills the program. ``credentials`` and ``terminator`` are
    given to the bridge's proxy (``sandbox._egress.serve_egress``): the program's requests to the credentials'
    hosts carry them (a terminator: its TLS tunnels are terminated; the program must trust that CA).
    """
    ports = BridgePorts()
    run_env = dict(env)
    bridge = bool(allowed_hosts)
    if bridge:
        run_env.update(worker_network_env(ports))
    plan = ConfinementPlan(
        toolbox=toolbox, workdir=workdir, entry="sandbox._launcher:exec_argv", payload={"argv": list(argv)},
        uid=uid, gid=gid, fs_rules=tuple(fs_rules), min_landlock_abi=min_landlock_abi,
        tcp_connect_ports=ports.tcp_connect_ports if bridge else (), bridge=bridge,
        rlimits=rlimits or Rlimits(), env=run_env)
    carrier: socket.socket | None = None
    child_end: socket.socket | None = None
    if bridge:
        carrier, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        plan = dataclasses.replace(plan, bridge_fd=child_end.fileno())
    try:
        proc = spawn_child(list(launcher or launcher_argv()), env={"LANG": "C.UTF-8"}, cwd="/",
                           pass_fds=(child_end.fileno(),) if child_end else ())
    except OSError:
        if carrier is not None:
            carrier.close()
        raise
    finally:
        if child_end is not None:
            child_end.close()
    frame = msgpack.packb(plan.to_wire(), use_bin_type=True)
    out: list[bytes] = []
    err: list[bytes] = []
    out_total, err_total = [0], [0]
    timed_out = False
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_read_capped, proc.stdout, stdout_cap, out, out_total)
            nursery.start_soon(_read_capped, proc.stderr, stderr_cap, err, err_total)
            try:
                await proc.stdin.send_all(struct.pack(">I", len(frame)) + frame)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            await proc.stdin.aclose()  # the program's stdin: empty
            with trio.move_on_after(timeout_s) as scope:
                if carrier is not None:
                    nursery.start_soon(_serve_bridge, carrier, proc, toolbox, allowed_hosts, private_networks,
                                       cname_targets, on_egress, tuple(credentials), terminator)
                    carrier = None  # owned by the task now
                await proc.wait()
            if scope.cancelled_caught:
                timed_out = True
                await proc.kill()
            nursery.cancel_scope.deadline = trio.current_time() + 2.0  # readers end at EOF; never hang
    finally:
        if carrier is not None:
            carrier.close()
        await proc.aclose(grace_s=0.0)
    return ConfinedOutcome(None if timed_out else proc.returncode, b"".join(out), b"".join(err), out_total[0],
                           timed_out)


async def _serve_bridge(carrier: socket.socket, proc: Any, toolbox: str, hosts: Sequence[str],
                        private: Sequence[str], cname_targets: Sequence[str],
                        on_egress: Callable[[dict[str, Any]], None] | None,
                        credentials: tuple[Credential, ...] = (), terminator: Terminator | None = None) -> None:
    """Receive the bridge sockets from the launcher and serve them until the program exits."""
    try:
        bridge = await receive_bridge(trio.socket.from_stdlib_socket(carrier))
    except (BridgeError, OSError):
        return  # the launcher failed before the bridge: its exit status and stderr say why
    finally:
        carrier.close()
    proxy, dns_udp, dns_tcp = bridge.to_trio()
    rules = AllowedHosts.parse(tuple(hosts), private_networks=tuple(private), cname_targets=tuple(cname_targets))
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(lambda task_status: serve_egress(
                proxy, rules, on_decision=on_egress or (lambda _d: None), toolbox=toolbox, credentials=credentials,
                terminator=terminator, task_status=task_status))
            await nursery.start(lambda task_status: serve_dns_stub(dns_udp, dns_tcp, rules, task_status=task_status))
            await proc.wait()
            nursery.cancel_scope.cancel()
    finally:
        for sock in (proxy, dns_udp, dns_tcp):
            sock.close()
