"""Starting a confined process: the one launch path of workers (``_worker.py``) and one-shot confined commands
(``_confined_exec.py``).

A confined process is ``sandbox._launcher`` started by :func:`launcher_argv` (the one bootstrap string), given its
:class:`~sandbox._plan.ConfinementPlan` as one frame on stdin (:func:`plan_frame`, the one encoding: a 4-byte
big-endian length, then the plan's msgpack), and, when the plan asks for the egress bridge, a socket pair whose
child end the launcher gets as ``bridge_fd`` and sends the bridge sockets up. :func:`launch` spawns it (a worker's
through its spawner, ``_spawner.py``: a fork of the zygote that runs the same launcher code, or the command itself);
:func:`serve_bridge` serves the bridge (proxy and DNS stub, name lookups bounded per bridge) until told to stop.

What differs between the two callers stays with them: a worker's cgroup is made before the spawn (a fork of the
zygote joins it itself, through the ``cgroup.procs`` fds it is sent, before it reads the plan, which already waits in
its stdin pipe; a launcher is moved in by the supervisor before the plan is sent), its connection then speaks the
protocol on the pipes; a one-shot command's output is read and its stdin closed.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import struct
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgpack
import trio

import sandbox
from sandbox import Terminator, default_resolve, limited_resolver, no_own_ports, serve_dns_stub, serve_egress

from ._spawn import spawn_child

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence

    from sandbox import AllowedHosts, BridgeSockets, ConfinementPlan, Credential

    from ._spawner import SpawnedChild, Spawner

__all__ = ["LOOKUPS_PER_BRIDGE", "Launched", "launch", "launcher_argv", "plan_frame", "serve_bridge"]

#: Name lookups one confined process's egress bridge (proxy and DNS stub) may have in flight; trio's thread pool
#: (40 threads) serves the whole supervisor.
LOOKUPS_PER_BRIDGE = 8


def launcher_argv(python: str | None = None, code_root: str | None = None) -> list[str]:
    """The command that starts the launcher: ``[python, "-I", "-B", "-c", <bootstrap>]``, the bootstrap putting
    ``code_root`` first on ``sys.path`` and calling ``sandbox._launcher.main``. ``code_root`` holds the ``sandbox``
    package (a worker's: the staged runtime folder; default: this checkout's).

    The launcher imports everything it needs before it confines itself, so for a one-shot command (entry
    ``sandbox._launcher:exec_argv``) ``code_root`` need not be readable by the sandbox uid; a worker's entry imports
    ``toolboxes`` after confinement, hence its staged copy.
    """
    root = code_root or os.path.dirname(os.path.dirname(os.path.abspath(sandbox.__file__)))
    boot = f"import sys; sys.path.insert(0, {root!r}); from sandbox._launcher import main; main()"
    return [python or sys.executable, "-I", "-B", "-c", boot]


def plan_frame(plan: ConfinementPlan) -> bytes:
    """The plan as the launcher reads it from stdin (``sandbox._launcher.decode_plan``)."""
    frame: bytes = msgpack.packb(plan.to_wire(), use_bin_type=True)
    return struct.pack(">I", len(frame)) + frame


@dataclass
class Launched:
    """A started launcher: its process, the plan to send it (``bridge_fd`` filled in), and this side of the bridge
    socket pair (``None`` without a bridge), which the caller owns and must close."""

    proc: SpawnedChild
    plan: ConfinementPlan
    carrier: socket.socket | None
    #: ``plan_frame(plan)`` when it was offered to the spawner to write before the child runs, else empty
    frame: bytes = b""

    def unsent_plan(self) -> bytes:
        """What of the plan's frame is still to be written on the child's stdin (all of it if none was offered)."""
        if not self.frame:
            return plan_frame(self.plan)
        return self.frame[self.proc.stdin_sent :]

    def close_carrier(self) -> None:
        if self.carrier is not None:
            self.carrier.close()
            self.carrier = None


async def launch(
    argv: Sequence[str],
    plan: ConfinementPlan,
    *,
    env: Mapping[str, str],
    cwd: str = "/",
    pass_fds: Sequence[int] = (),
    spawner: Spawner | None = None,
    cgroup_procs: Sequence[int] = (),
    prewrite_plan: bool = False,
) -> Launched:
    """Spawn the launcher ``argv`` for ``plan`` by ``spawner`` (``_spawner.py``: the launcher itself, or a fork of the
    zygote; default: the launcher, synchronously). The plan is not sent (see :func:`plan_frame`), unless
    ``prewrite_plan``: the spawner may then write it before the child runs (:meth:`Launched.unsent_plan` is the
    rest), and ``cgroup_procs`` (the ``cgroup.procs`` fds of the child's group) let it join its group itself first
    (``proc.cgroup_joined``; else the caller moves it before it sends the plan).

    Raises ``OSError`` when it cannot be spawned (nothing is left open then).
    """
    carrier: socket.socket | None = None
    child_end: socket.socket | None = None
    if plan.bridge:
        # The launcher opens the bridge sockets inside the process's namespace and passes them up this pair.
        carrier, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        plan = dataclasses.replace(plan, bridge_fd=child_end.fileno())
    frame = plan_frame(plan) if prewrite_plan else b""
    try:
        fds = (*pass_fds, *((child_end.fileno(),) if child_end else ()))
        if spawner is None:
            proc: SpawnedChild = spawn_child(list(argv), env=dict(env), cwd=cwd, pass_fds=fds)
        else:
            proc = await spawner.spawn(
                list(argv),
                env=dict(env),
                cwd=cwd,
                pass_fds=fds,
                new_pidns=plan.new_pidns,
                cgroup_procs=cgroup_procs,
                stdin_data=frame,
            )
    except BaseException:
        if carrier is not None:
            carrier.close()
        raise
    finally:
        if child_end is not None:
            child_end.close()
    return Launched(proc, plan, carrier, frame)


async def serve_bridge(
    bridge: BridgeSockets,
    rules: AllowedHosts,
    *,
    toolbox: str,
    until: Callable[[], Awaitable[Any]],
    on_decision: Callable[[dict[str, Any]], None],
    credentials: Sequence[Credential] = (),
    terminator: Terminator | None = None,
    own_ports: Callable[[], frozenset[int]] = no_own_ports,
) -> None:
    """Serve the egress proxy and DNS stub of one confined process until ``until()`` returns; then close the
    sockets. At most :data:`LOOKUPS_PER_BRIDGE` name lookups of the two are in flight at once. ``own_ports``: the
    supervisor's own listening ports, which the proxy never dials on loopback."""
    proxy, dns_udp, dns_tcp = bridge.to_trio()
    try:
        async with trio.open_nursery() as nursery:
            resolve = limited_resolver(default_resolve, LOOKUPS_PER_BRIDGE)
            await nursery.start(
                lambda task_status: serve_egress(
                    proxy,
                    rules,
                    on_decision=on_decision,
                    toolbox=toolbox,
                    resolve=resolve,
                    credentials=tuple(credentials),
                    terminator=terminator,
                    own_ports=own_ports,
                    task_status=task_status,
                )
            )
            await nursery.start(
                lambda task_status: serve_dns_stub(dns_udp, dns_tcp, rules, resolve=resolve, task_status=task_status)
            )
            await until()
            nursery.cancel_scope.cancel()
    finally:
        for sock in (proxy, dns_udp, dns_tcp):
            sock.close()
