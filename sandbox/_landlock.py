"""Landlock over ctypes, ABI 1 to 7: filesystem rules, TCP bind/connect rules, scoping.

What it enforces, once :func:`apply_ruleset` returns, on the calling thread and every process it later forks
or execs (Python is single-threaded at that point in the launcher):

- filesystem (ABI 1+): every access right the kernel knows is *handled*, so anything not granted by a path
  rule is denied (``EACCES``). A ``read`` rule grants read, list and execute; a ``write`` rule adds create,
  remove, write, truncate, rename/link within the tree (``REFER``, ABI 2+), device ioctls (ABI 5+). Device
  nodes (``MAKE_CHAR``, ``MAKE_BLOCK``) are never granted. A rule on a regular file gets only the file rights
  of its mode (the kernel answers ``EINVAL`` to directory rights on a file).
- network (ABI 4+): TCP bind is denied everywhere; TCP connect only to the plan's ports (any address).
- scoping (ABI 6+): no connecting to abstract unix sockets created outside the domain, no signals to processes
  outside the domain.

What it does NOT cover (see docs/CONFINEMENT.md): chmod, chown, utime, setxattr and stat of files outside the
rules; connect() to pathname unix sockets; file descriptors opened before the ruleset; UDP, and MPTCP sockets
(protocol 262); anything on a kernel older than the ABI that introduced it. Rights the running kernel does not
know are dropped from the plan, never passed to the kernel; callers who need a right must demand a minimum ABI
(the launcher refuses to run below ``plan.min_landlock_abi``).

Rule paths are opened by :func:`sandbox._path_walk.open_rule_path` (one component at a time, ``O_NOFOLLOW``): a
symlink on the way is followed only when root owns it and it lies outside the plan's writable trees, so a worker
cannot turn a rule nested in its own folder into a grant of whatever a link it planted names.

Decide, then apply: :func:`plan_ruleset` is pure and tested anywhere; :func:`apply_ruleset` and
:func:`landlock_abi` are the only functions making system calls. Every failure raises
:class:`~sandbox._errors.ConfinementError` with the errno of *that* call (errno is reset before each call).
"""

from __future__ import annotations

import ctypes
import os
import stat
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandbox._dirfd import UnsafeTreeError
from sandbox._errors import ConfinementError
from sandbox._libc import LIBC
from sandbox._path_walk import open_rule_path
from sandbox._plan import READ, WRITE, FsRule

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "PathGrant",
    "RulesetPlan",
    "apply_ruleset",
    "landlock_abi",
    "plan_ruleset",
]

# --- syscall numbers: Landlock uses the unified numbers on every architecture that has it.
_SYSCALLS: dict[str, tuple[int, int, int]] = {
    "x86_64": (444, 445, 446),
    "aarch64": (444, 445, 446),
    "arm64": (444, 445, 446),
    "riscv64": (444, 445, 446),
}

LANDLOCK_CREATE_RULESET_VERSION = 1 << 0
LANDLOCK_RULE_PATH_BENEATH = 1
LANDLOCK_RULE_NET_PORT = 2

# --- filesystem access rights, with the ABI that introduced them
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5

# --- network access rights (ABI 4)
NET_BIND_TCP = 1 << 0
NET_CONNECT_TCP = 1 << 1

# --- scopes (ABI 6)
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
SCOPE_SIGNAL = 1 << 1

# --- landlock_restrict_self() flags (ABI 7): audit logging of denials
RESTRICT_SELF_LOG_SAME_EXEC_OFF = 1 << 0
RESTRICT_SELF_LOG_NEW_EXEC_ON = 1 << 1
RESTRICT_SELF_LOG_SUBDOMAINS_OFF = 1 << 2

_FS_ABI1 = (1 << 13) - 1


def fs_rights_for_abi(abi: int) -> int:
    """Return every filesystem right the given ABI knows (0 for ABI 0)."""
    if abi < 1:
        return 0
    rights = _FS_ABI1
    if abi >= 2:
        rights |= FS_REFER
    if abi >= 3:
        rights |= FS_TRUNCATE
    if abi >= 5:
        rights |= FS_IOCTL_DEV
    return rights


def net_rights_for_abi(abi: int) -> int:
    """Return the network rights the given ABI knows (TCP bind and connect from ABI 4)."""
    return NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0


def scopes_for_abi(abi: int) -> int:
    """Return the scopes the given ABI knows (abstract unix sockets and signals from ABI 6)."""
    return SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0


#: Rights that may appear in a rule on a non-directory (the kernel refuses the others with EINVAL).
FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV

_READ_RIGHTS = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
_WRITE_RIGHTS = (
    _READ_RIGHTS
    | FS_WRITE_FILE
    | FS_REMOVE_DIR
    | FS_REMOVE_FILE
    | FS_MAKE_DIR
    | FS_MAKE_REG
    | FS_MAKE_FIFO
    | FS_MAKE_SYM
    | FS_REFER
    | FS_TRUNCATE
    | FS_IOCTL_DEV
)  # never MAKE_CHAR / MAKE_BLOCK; never MAKE_SOCK: a worker may not bind a pathname unix socket anywhere, so
#   no worker can offer a socket that another (same uid; Landlock below ABI 9 does not restrict connect()) reaches


@dataclass(frozen=True)
class PathGrant:
    """The rights granted beneath one path: ``dir_access`` if it is a directory, ``file_access`` otherwise.

    Both are already limited to what the ruleset handles; which one applies is decided when the path is
    opened, on the opened file itself (no race between checking and opening).
    """

    path: str
    dir_access: int
    file_access: int


@dataclass(frozen=True)
class RulesetPlan:
    """A complete Landlock ruleset for one kernel ABI, as plain data.

    Attributes:
        abi: the ABI the plan was made for (the running kernel's); 0 means "no Landlock", an empty plan.
        handled_fs / handled_net / scoped: the masks of ``struct landlock_ruleset_attr``.
        paths: one grant per distinct path, in the order given (duplicates merged).
        connect_ports: TCP ports connect() may reach (only when ``handled_net`` is non-zero).
        restrict_flags: flags for ``landlock_restrict_self`` (ABI 7 logging), 0 by default.
        writable_trees: the paths of the ``write`` rules: a symlink inside one is never followed when the rule
            paths are opened (``sandbox._path_walk.open_rule_path``).
    """

    abi: int
    handled_fs: int
    handled_net: int
    scoped: int
    paths: tuple[PathGrant, ...]
    connect_ports: tuple[int, ...]
    restrict_flags: int = 0
    writable_trees: tuple[str, ...] = ()


def plan_ruleset(
    rules: Iterable[FsRule],
    abi: int,
    *,
    tcp_connect_ports: Iterable[int] = (),
    scope: bool = True,
    restrict_flags: int = 0,
) -> RulesetPlan:
    """Turn path rules and TCP ports into a ruleset the kernel of ABI ``abi`` accepts. Pure.

    Args:
        rules: path rules; ``mode`` is ``"read"`` or ``"write"``. Paths must be absolute; several rules on the
            same path are merged (the union of their rights).
        abi: the running kernel's Landlock ABI (from :func:`landlock_abi`). Rights it does not know are
        dropped. tcp_connect_ports: the only TCP ports connect() may reach (ABI 4+); TCP bind is always
        denied. scope: scope abstract unix sockets and signals to the domain (ABI 6+).
        restrict_flags: ``RESTRICT_SELF_*`` logging flags, kept only on ABI 7+.

    Returns:
        The plan; for ``abi < 1`` an empty plan that :func:`apply_ruleset` refuses to apply.

    Raises:
        ConfinementError: a relative path, an unknown mode, or a port outside 0..65535.
    """
    rules = list(rules)
    handled_fs = fs_rights_for_abi(abi)
    merged: dict[str, tuple[int, int]] = {}
    for rule in rules:
        if not os.path.isabs(rule.path) or "\0" in rule.path:
            raise ConfinementError(f"Landlock rule path must be absolute: {rule.path!r}", step="landlock")
        if rule.mode == READ:
            rights = _READ_RIGHTS
        elif rule.mode == WRITE:
            rights = _WRITE_RIGHTS
        else:
            raise ConfinementError(
                f"Landlock rule on {rule.path}: unknown mode {rule.mode!r} (expected 'read' or 'write')",
                step="landlock",
            )
        dir_access = rights & handled_fs
        file_access = dir_access & FILE_RIGHTS
        old = merged.get(rule.path, (0, 0))
        merged[rule.path] = (old[0] | dir_access, old[1] | file_access)
    ports: list[int] = []
    for port in tcp_connect_ports:
        if not isinstance(port, int) or not 0 <= port <= 65535:
            raise ConfinementError(f"TCP port out of range: {port!r}", step="landlock")
        if port not in ports:
            ports.append(port)
    handled_net = net_rights_for_abi(abi)
    return RulesetPlan(
        abi=abi,
        handled_fs=handled_fs,
        handled_net=handled_net,
        scoped=scopes_for_abi(abi) if scope else 0,
        paths=tuple(PathGrant(p, d, f) for p, (d, f) in merged.items()),
        connect_ports=tuple(ports) if handled_net else (),
        restrict_flags=restrict_flags if abi >= 7 else 0,
        writable_trees=tuple(dict.fromkeys(r.path for r in rules if r.mode == WRITE)),
    )


# --- the thin part: system calls


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


class _NetPortAttr(ctypes.Structure):
    _fields_ = (("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64))


def _syscall_numbers() -> tuple[int, int, int] | None:
    return _SYSCALLS.get(os.uname().machine)


def _call(nr: int, *args: object) -> tuple[int, int]:
    """Make one system call; return ``(result, errno)`` where errno is that call's own (0 on success)."""
    ctypes.set_errno(0)
    result = LIBC.syscall(ctypes.c_long(nr), *args)
    return result, (ctypes.get_errno() if result == -1 else 0)


def landlock_abi() -> int:
    """Return the running kernel's Landlock ABI version, or 0 when Landlock is unsupported or disabled."""
    numbers = _syscall_numbers()
    if numbers is None:
        return 0
    version = ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION)
    result, _ = _call(numbers[0], None, ctypes.c_size_t(0), version)
    return max(result, 0)


def _fail(what: str, err: int) -> ConfinementError:
    return ConfinementError(f"Landlock: {what}: {os.strerror(err)} (errno {err})", step="landlock", errno=err)


def _open_rule(path: str, writable_trees: tuple[str, ...]) -> int:
    """``open_rule_path`` with its refusal as a :class:`ConfinementError` (``OSError`` and ``FileNotFoundError``
    pass through)."""
    try:
        return open_rule_path(path, writable_trees=writable_trees, root_links_only=os.geteuid() == 0)
    except UnsafeTreeError as exc:
        raise ConfinementError(f"Landlock: rule path refused: {exc}", step="landlock") from exc


def refuse_planted_links(rules: Iterable[FsRule]) -> None:
    """Open every rule path as :func:`apply_ruleset` will, and raise its refusal now. The launcher calls it on the
    host's tree before it plans a private view: the view recreates the links it meets as root's, so a link a worker
    planted must be refused before it is copied. Missing paths and other errors are left to the later steps."""
    rules = list(rules)
    writable = tuple(dict.fromkeys(r.path for r in rules if r.mode == WRITE))
    for rule in rules:
        try:
            os.close(_open_rule(rule.path, writable))
        except OSError:
            continue


def apply_ruleset(plan: RulesetPlan) -> list[str]:
    """Create the ruleset of ``plan`` and restrict the calling thread to it, for good.

    Must run after ``no_new_privs`` is set (or with ``CAP_SYS_ADMIN``) and while the process is
    single-threaded, so that the whole process is confined. A path that does not exist is skipped: it grants
    nothing, which is the safe direction. Any other failure raises; the process is then not restricted and
    must not go on.

    Returns:
        The paths skipped because they do not exist.

    Raises:
        ConfinementError: ``plan.abi < 1``, an architecture without known syscall numbers, or a failing system
            call (the error names the call, the path and the errno).
    """
    numbers = _syscall_numbers()
    if plan.abi < 1 or numbers is None:
        raise ConfinementError("Landlock is not available on this kernel", step="landlock")
    nr_create, nr_add, nr_restrict = numbers
    attr = _RulesetAttr(plan.handled_fs, plan.handled_net, plan.scoped)
    size = 24 if plan.abi >= 6 else 16 if plan.abi >= 4 else 8
    ruleset_fd, err = _call(nr_create, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset_fd < 0:
        raise _fail("create_ruleset", err)
    skipped: list[str] = []
    try:
        for grant in plan.paths:
            try:  # never through a link a worker could have planted (a rule nested in its own folder, swapped)
                fd = _open_rule(grant.path, plan.writable_trees)
            except FileNotFoundError:
                skipped.append(grant.path)
                continue
            except OSError as exc:
                raise ConfinementError(
                    f"Landlock: cannot open {grant.path}: {exc.strerror} (errno {exc.errno})",
                    step="landlock",
                    errno=exc.errno,
                ) from exc
            try:
                is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
                access = grant.dir_access if is_dir else grant.file_access
                if access == 0:
                    continue
                rule = _PathBeneathAttr(access, fd)
                result, err = _call(
                    nr_add,
                    ctypes.c_int(ruleset_fd),
                    ctypes.c_int(LANDLOCK_RULE_PATH_BENEATH),
                    ctypes.byref(rule),
                    ctypes.c_uint32(0),
                )
                if result < 0:
                    raise _fail(f"add_rule {grant.path}", err)
            finally:
                os.close(fd)
        for port in plan.connect_ports:
            net_rule = _NetPortAttr(NET_CONNECT_TCP, port)
            result, err = _call(
                nr_add,
                ctypes.c_int(ruleset_fd),
                ctypes.c_int(LANDLOCK_RULE_NET_PORT),
                ctypes.byref(net_rule),
                ctypes.c_uint32(0),
            )
            if result < 0:
                raise _fail(f"add_rule tcp port {port}", err)
        result, err = _call(nr_restrict, ctypes.c_int(ruleset_fd), ctypes.c_uint32(plan.restrict_flags))
        if result < 0:
            raise _fail("restrict_self", err)
    finally:
        os.close(ruleset_fd)
    return skipped
