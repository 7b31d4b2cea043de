"""Run one program to completion under the launcher's confinement (the confined command runner).

The supervisor uses it for work it must do before any worker exists, on untrusted input: cloning a git skill
source (``plan/_skill_clones.py``) and running a script's ``describe`` for ``agents-supervise check-tool-call``.
The program runs through ``sandbox._launcher``, started, given its plan and served its bridge as a worker is
(``_launch.py``), with the built-in entry ``sandbox._launcher:exec_argv``: the launcher confines itself from a
:class:`~sandbox._plan.ConfinementPlan` (own network and PID namespaces, Landlock rules given here, rlimits,
no_new_privs, the sandbox uid) and then executes the program, so nothing of it runs unconfined.

The program gets the same private filesystem view as a worker (``sandbox._view_plan`` plans it from the rules in
the launcher, ``sandbox._view`` builds it): only the rules' paths and ``workdir`` exist, a fresh ``/tmp``, a
minimal ``/dev``, its own ``/proc`` and ``/etc`` files naming only its account, host name ``sandbox``. ``view``
``False`` (a policy's ``private_view: false``) runs it on the host's tree, Landlock alone deciding.

With ``allowed_hosts`` the plan asks for the egress bridge and this module serves it (proxy and DNS stub, the
same code that serves workers) while the program runs; without, the program has loopback only.

What it leaves to callers: which paths to grant (they pass every rule), what the output means, and retries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

from sandbox import (
    READ,
    AllowedHosts,
    BridgeError,
    BridgePorts,
    ConfinementPlan,
    FsRule,
    Rlimits,
    ViewSpec,
    no_own_ports,
    receive_bridge,
    worker_network_env,
)

from ._launch import launch, launcher_argv, plan_frame, serve_bridge
from ._one_shot import ChildOutcome, collect

if TYPE_CHECKING:
    import socket
    from collections.abc import Callable, Sequence

    from sandbox import Credential, Terminator

__all__ = ["ConfinedOutcome", "run_confined"]

#: Exit status of the launcher when a confinement step failed (``sandbox._launcher.EXIT_CONFINEMENT_FAILED``).
EXIT_CONFINEMENT_FAILED = 78


@dataclass(frozen=True)
class ConfinedOutcome(ChildOutcome):
    """How a confined program ended (:class:`~supervisor.workers._one_shot.ChildOutcome`), and whether the launcher
    refused it (a confinement step failed: nothing of it ran)."""

    @property
    def confinement_failed(self) -> bool:
        return self.returncode == EXIT_CONFINEMENT_FAILED and b"agents-supervise launcher" in self.stderr


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
    loopback: bool = False,
    policy_key: str = "",
    own_ports: Callable[[], frozenset[int]] = no_own_ports,
    launcher: Sequence[str] | None = None,
    view: bool = True,
    system_paths: Sequence[str] = (),
    stdout_cap: int = 1 << 20,
    stderr_cap: int = 64 << 10,
) -> ConfinedOutcome:
    """Run ``argv`` confined and wait for it (at most ``timeout_s``, then SIGKILL of the launcher, whose PID
    namespace dies with it). Stdin is empty.

    ``uid``/``gid`` must be given when the supervisor runs as root (the launcher refuses to run as root).
    Raises ``OSError`` only when the launcher itself cannot be spawned; everything the program or the
    confinement does is in the outcome. Cancellation kills the program. ``credentials`` and ``terminator`` are
    given to the bridge's proxy (``sandbox._egress.serve_egress``): the program's requests to the credentials'
    hosts carry them (a terminator: its TLS tunnels are terminated; the program must trust that CA). ``loopback``,
    ``policy_key`` and ``own_ports`` as in a worker's bridge (``sandbox._hosts.AllowedHosts``, ``serve_egress``).
    ``view``: the private filesystem view (module docstring); ``system_paths`` are the rules' paths no worker or
    agent file writes, shown with inodes of the program's own (``ViewSpec.system_paths``). ``workdir`` is always
    granted read-only (more if a rule says so): the program starts in it.
    """
    ports = BridgePorts()
    run_env = dict(env)
    bridge = bool(allowed_hosts)
    if bridge:
        run_env.update(worker_network_env(ports))
    plan = ConfinementPlan(
        toolbox=toolbox,
        workdir=workdir,
        entry="sandbox._launcher:exec_argv",
        payload={"argv": list(argv)},
        uid=uid,
        gid=gid,
        fs_rules=(*fs_rules, FsRule(workdir, READ)),
        min_landlock_abi=min_landlock_abi,
        tcp_connect_ports=ports.tcp_connect_ports if bridge else (),
        bridge=bridge,
        rlimits=rlimits or Rlimits(),
        env=run_env,
        view=ViewSpec(system_paths=tuple(system_paths)) if view else None,
    )
    launched = await launch(launcher or launcher_argv(), plan, env={"LANG": "C.UTF-8"})
    carrier = launched.carrier

    def serve(nursery: trio.Nursery) -> None:
        nonlocal carrier
        if carrier is not None:
            nursery.start_soon(
                _serve_bridge,
                carrier,
                launched.proc,
                toolbox,
                allowed_hosts,
                private_networks,
                cname_targets,
                on_egress,
                tuple(credentials),
                terminator,
                (loopback, policy_key, own_ports),
            )
            carrier = None  # owned by the task now

    try:
        outcome = await collect(
            launched.proc,
            timeout_s=timeout_s,
            stdout_cap=stdout_cap,
            stderr_cap=stderr_cap,
            stdin=plan_frame(launched.plan),  # then the program's stdin: empty
            beside=serve,
        )
    finally:
        if carrier is not None:
            carrier.close()
    return ConfinedOutcome(**vars(outcome))


async def _serve_bridge(
    carrier: socket.socket,
    proc: Any,
    toolbox: str,
    hosts: Sequence[str],
    private: Sequence[str],
    cname_targets: Sequence[str],
    on_egress: Callable[[dict[str, Any]], None] | None,
    credentials: tuple[Credential, ...] = (),
    terminator: Terminator | None = None,
    opened: tuple[bool, str, Callable[[], frozenset[int]]] = (False, "", no_own_ports),
) -> None:
    """Receive the bridge sockets from the launcher and serve them until the program exits. ``opened``: the
    loopback flag, policy key and the supervisor's own ports (:func:`run_confined`)."""
    try:
        bridge = await receive_bridge(trio.socket.from_stdlib_socket(carrier))
    except (BridgeError, OSError):
        return  # the launcher failed before the bridge: its exit status and stderr say why
    finally:
        carrier.close()
    loopback, policy_key, own_ports = opened
    rules = AllowedHosts.parse(
        tuple(hosts),
        private_networks=tuple(private),
        cname_targets=tuple(cname_targets),
        loopback=loopback,
        policy_key=policy_key,
    )
    await serve_bridge(
        bridge,
        rules,
        toolbox=toolbox,
        until=proc.wait,
        on_decision=on_egress or (lambda _d: None),
        credentials=credentials,
        terminator=terminator,
        own_ports=own_ports,
    )
