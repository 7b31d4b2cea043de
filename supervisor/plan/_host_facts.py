"""What planning knows of the host and of this supervisor, read once before a plan is made, as data.

:func:`read_host_facts` is the only reading a plan needs besides the toolboxes' own paths (which :class:`HostView`
answers, each question once): who the supervisor runs as, the kernel's Landlock ABI, the cgroup layout it may use,
the CPUs, the host name, the interpreter's trees, each agent file's owner and inode, the state dir's identity table
and the host-wide uid registry as they are now, the credentials' values, and the supervisor's CA when a toolbox
terminates TLS. It makes, changes and runs nothing: a state dir or registry that does not exist reads as empty, a
credential's ``command:`` source is not run: its value is supplied by the caller (``run_credential_commands``,
awaited first through the supervisor's child runner) or stays unresolved (``check``).

The planning functions (``_policy_plan.plan_policy`` and the steps it calls) take a :class:`HostFacts` and touch
nothing else, so a test builds one (``dataclasses.replace`` of a real one: "as root", another cgroup layout, another
Landlock ABI) and plans without root.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sandbox import CgroupLayout, landlock_abi, python_runtime_paths, read_layout, supervisor_ca

from ._agent_bindings import AgentFile, loaded_agent_claim
from ._credential_values import load_credentials
from ._host_view import HostView
from ._identity_store import IdentitySnapshot, read_identities
from ._uid_registry import registry_dir

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sandbox import Credential, SupervisorCA
    from supervisor.config import LoadedConfig

__all__ = ["HostFacts", "read_host_facts"]


@dataclass(frozen=True)
class HostFacts:
    """The host as one plan sees it (module docstring). Frozen: a plan made from it can be made again from it."""

    #: the state directory the plan is for (absolute)
    state_dir: str
    euid: int
    egid: int
    #: the kernel's Landlock ABI (0: none)
    landlock_abi: int
    #: where the supervisor may make cgroups (``None``: nowhere, ``cgroup_problem`` says why)
    cgroup_layout: CgroupLayout | None
    cgroup_problem: str
    cpu_count: int
    #: the host's name (a System toolbox with ``hostname`` shows it)
    hostname: str
    #: the interpreter's trees every worker reads (``sandbox._syspaths.python_runtime_paths``)
    runtime_paths: tuple[str, ...]
    #: what the host says of a path (``lstat``, existence, mount points, readable by a uid), asked once each
    paths: HostView
    #: each agent file as the identity table binds it (canonical path, owner, device, inode), by slug
    agent_files: Mapping[str, AgentFile]
    #: the host-wide uid registry's directory (``None``: no uids are given: ``worker_uids: null`` or not root)
    registry: str | None
    #: the identity table and the registry as they are now
    identities: IdentitySnapshot
    #: every credential with its value; a ``command:`` source not run has the value ``NOT_RUN``
    credentials: Mapping[str, Credential] = field(default_factory=dict)
    #: whether the ``command:`` sources' values were supplied (they were run; otherwise their values are unresolved)
    commands_run: bool = False
    #: the supervisor's CA (``None``: no toolbox terminates TLS)
    ca: SupervisorCA | None = None

    @property
    def root(self) -> bool:
        return self.euid == 0


def read_host_facts(
    config: LoadedConfig, *, state_dir: str | None = None, command_values: Mapping[str, str] | None = None
) -> HostFacts:
    """Read what a plan of ``config`` for ``state_dir`` (default the policy's) needs of the host (module
    docstring). ``command_values``: the outputs of the credentials' ``command:`` sources
    (``_credential_values.run_credential_commands``); ``None`` (``check``): unresolved, never run.

    Raises:
        PolicyRefused: a credential's value cannot be read, the identity table or the registry is damaged, or the
            registry is not root's alone.
    """
    policy = config.policy
    state_dir = os.path.abspath(state_dir or policy.state_dir)
    euid = os.geteuid()
    layout, problem = read_layout()
    uids = policy.worker_uids
    registry = registry_dir(uids.registry, os.environ) if euid == 0 and uids is not None else None
    terminates = any(t.tls_termination for t in policy.toolboxes.values())
    return HostFacts(
        state_dir=state_dir,
        euid=euid,
        egid=os.getegid(),
        landlock_abi=landlock_abi(),
        cgroup_layout=layout,
        cgroup_problem=problem,
        cpu_count=os.cpu_count() or 1,
        hostname=socket.gethostname(),
        runtime_paths=tuple(python_runtime_paths()),
        paths=HostView(),
        agent_files={a.slug: loaded_agent_claim(a) for a in config.agents},
        registry=registry,
        identities=read_identities(state_dir, registry),
        credentials=load_credentials(policy.credentials, command_values=command_values),
        commands_run=command_values is not None,
        ca=supervisor_ca() if terminates else None,
    )
