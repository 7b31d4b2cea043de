"""The confinement plan: everything the launcher needs to confine a worker, as plain data.

The supervisor builds a :class:`ConfinementPlan` per toolbox (pure code, testable anywhere), sends it to the launcher
as the first msgpack frame on the worker's stdin, and the launcher applies it step by step before any toolbox code is
imported. The plan knows nothing of tools: the ``payload`` is opaque to this package and handed to the entry point
named by ``entry`` once confinement is complete.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

__all__ = ["NEUTRAL_HOSTNAME", "ConfinementPlan", "FsRule", "Rlimits", "ViewSpec"]

#: Access modes a filesystem rule may grant.
READ = "read"  # read files, list directories, execute
WRITE = "write"  # READ plus create, remove, write, truncate, rename within
FS_MODES = (READ, WRITE)


@dataclass(frozen=True)
class FsRule:
    """One Landlock path rule: ``path`` (absolute, canonical) with ``mode`` ``read`` or ``write``.

    A rule on a regular file grants only the file rights of its mode (the kernel refuses directory rights on
    files); a rule on a directory covers the whole tree beneath it.
    """

    path: str
    mode: str = READ


@dataclass(frozen=True)
class Rlimits:
    """Resource limits in the units the kernel uses. ``None`` leaves the inherited limit in place."""

    address_space_bytes: int | None = None
    cpu_seconds: int | None = None
    open_files: int | None = None
    file_size_bytes: int | None = None
    processes: int | None = None
    core_bytes: int = 0


#: The host name a worker sees when the ``hostname`` capability is not granted.
NEUTRAL_HOSTNAME = "sandbox"


@dataclass(frozen=True)
class ViewSpec:
    """The worker's private filesystem view (``sandbox._view``): a root of its own built from the plan's rules.

    Attributes:
        hostname: the name of the worker's UTS namespace (:data:`NEUTRAL_HOSTNAME`, or the host's own when the
            ``hostname`` capability is granted).
        tmp_bytes: size of the fresh tmpfs on ``/tmp``.
        shm_bytes: size of the fresh tmpfs on ``/dev/shm``.
        system_paths: rule paths no worker and no agent file can write (the policy's system paths, the
            interpreter, the staged worker code): their read-only binds, and every device node, get inodes of the
            worker's own (a read-only overlay), so a lock on them reaches no other worker. Other
            read-only grants stay plain binds: their writers' changes and locks (SQLite's) must be seen live.
    """

    hostname: str = NEUTRAL_HOSTNAME
    tmp_bytes: int = 64 << 20
    shm_bytes: int = 16 << 20
    system_paths: tuple[str, ...] = ()
    #: folders shown at their own paths even when no rule shows them (then empty but for what rules put in them), so
    #: a process can stand in them: the agent file's folder, where ``execute-command`` runs (docs/FILES.md)
    directories: tuple[str, ...] = ()


@dataclass(frozen=True)
class ConfinementPlan:
    """What a worker gets from the kernel.

    Attributes:
        toolbox: the toolbox's display name, for messages only.
        uid / gid: identity to drop to when the launcher starts as root (``None``: keep the current one, which the
            supervisor only allows when it is not root).
        groups: supplementary groups to keep with ``uid`` (the policy's ``shared_groups``); none by default.
        fs_rules: the only paths the worker may touch; everything else is denied by Landlock.
        min_landlock_abi: refuse to run (``ConfinementError``) when the kernel's Landlock ABI is lower. 0 means
            "best effort": run unconfined by Landlock if it is missing (permissive policies only).
        tcp_connect_ports: TCP ports on 127.0.0.1 the worker may connect to (the egress bridge); all other TCP
            connects and every TCP bind are refused when the kernel has ABI 4.
        new_netns: enter a new network namespace with only ``lo`` up.
        new_pidns: enter a new PID namespace; the worker is its PID 1, so every descendant dies with it.
        new_ipcns: enter a new IPC namespace (SysV IPC and POSIX message queues of the worker's own).
        account_name: when set and the host has no ``/etc/passwd`` entry for ``uid``, the worker sees private copies
            of ``/etc/passwd`` and ``/etc/group`` that name it (``sandbox._accounts``).
        umask: the worker's file mode creation mask.
        bridge: open the egress bridge listening sockets inside the namespace and pass them up on ``bridge_fd``.
        bridge_fd: the inherited unix socket that carries the bridge sockets (SCM_RIGHTS), or ``None``.
        rlimits: resource limits.
        view: a private filesystem view (``sandbox._view``: only the rules' paths exist, a fresh ``/tmp``,
            ``/dev/shm`` and ``/proc``, ``/etc`` files naming only the worker, a UTS namespace), or ``None``: the
            worker sees the host's tree (Landlock alone decides what it may open). Needs ``new_pidns``.
        xattrs: let the worker use the extended-attribute system calls (seccomp answers ``EOPNOTSUPP`` otherwise).
        audit_denials: the kernel reports the worker's denials to its audit log, for the supervisor's explanations:
            an audit session of its own (``sandbox._audit_session``), Landlock logging after exec too, and the
            seccomp refusals worth explaining logged (``sandbox._seccomp.plan_seccomp_log``).
        workdir: the worker's own work folder (read-write, its cwd and HOME).
        env: the complete environment of the worker (nothing of the supervisor's is inherited).
        entry: ``module:function`` called as ``function(payload)`` after confinement.
        payload: opaque data for the entry point.
    """

    toolbox: str
    workdir: str
    entry: str
    payload: dict[str, Any] = field(default_factory=dict)
    uid: int | None = None
    gid: int | None = None
    groups: tuple[int, ...] = ()
    fs_rules: tuple[FsRule, ...] = ()
    min_landlock_abi: int = 1
    tcp_connect_ports: tuple[int, ...] = ()
    new_netns: bool = True
    new_pidns: bool = True
    new_ipcns: bool = True
    account_name: str = ""
    umask: int = 0o077
    bridge: bool = False
    bridge_fd: int | None = None
    rlimits: Rlimits = field(default_factory=Rlimits)
    view: ViewSpec | None = None
    env: dict[str, str] = field(default_factory=dict)
    xattrs: bool = False
    audit_denials: bool = False

    def to_wire(self) -> dict[str, Any]:
        """Return the plan as plain msgpack-able data: what ``dataclasses.asdict`` gives, except that the mappings
        (``payload``, ``env``) are the plan's own, not deep copies (encode it before changing them). A toolbox's
        payload holds its whole config; copying it cost about a millisecond of the supervisor's loop a start."""
        wire: dict[str, Any] = _plain(self)
        return wire

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> ConfinementPlan:
        """Rebuild a plan sent by :meth:`to_wire`; raises ``TypeError``/``KeyError`` on a malformed plan."""
        data = dict(data)
        data["fs_rules"] = tuple(FsRule(**r) for r in data.get("fs_rules", ()))
        data["rlimits"] = Rlimits(**data.get("rlimits", {}))
        data["tcp_connect_ports"] = tuple(data.get("tcp_connect_ports", ()))
        data["groups"] = tuple(data.get("groups", ()))
        if data.get("view") is not None:
            view = dict(data["view"])
            view["system_paths"] = tuple(view.get("system_paths", ()))
            view["directories"] = tuple(view.get("directories", ()))
            data["view"] = ViewSpec(**view)
        return cls(**data)


def _plain(value: Any) -> Any:
    """``value`` with every dataclass in it (through tuples and lists) turned into a dict of its fields; mappings
    and other values as they are (not copied)."""
    kind = type(value)
    if kind not in _FIELD_NAMES:
        _FIELD_NAMES[kind] = tuple(f.name for f in fields(kind)) if is_dataclass(kind) else None
    names = _FIELD_NAMES[kind]
    if names is not None:
        return {name: _plain(getattr(value, name)) for name in names}
    if kind is tuple or kind is list:
        return kind(_plain(item) for item in value)
    return value


#: the field names of each dataclass :func:`_plain` met (``None`` for any other type)
_FIELD_NAMES: dict[type, tuple[str, ...] | None] = {}
