"""A small seccomp filter: refuse the system calls no toolbox needs and that cross the worker's walls.

Why each is refused (``EPERM``):

- ``keyctl``, ``add_key``, ``request_key``: workers may share a uid, and the kernel gives each uid one *user
  keyring* (``@u``) shared by all its processes on the machine and outliving them. A key one toolbox adds there, any
  other toolbox reads: a channel between toolboxes that Landlock, the namespaces and the cgroups do not see.
- ``io_uring_setup``/``enter``/``register``: io_uring operations do respect Landlock (an ``OPENAT`` outside the rules
  fails with ``EACCES``), but it is a large kernel surface no toolbox needs; programs such as libuv fall back to plain
  system calls when it is refused.
- ``userfaultfd``, ``perf_event_open``, ``bpf``: kernel surfaces that exploits use (``userfaultfd`` widens races;
  perf and bpf are refused already by the sysctls of a Debian host, this does not depend on them).
- ``syslog``: the kernel's log is the host's (addresses, other tenants' messages); ``dmesg_restrict`` usually
  refuses it already, this does not depend on it.
- ``inotify_init``/``inotify_init1``/``fanotify_init``: Landlock does not check ``inotify_add_watch`` or
  ``fanotify_mark``, only the file modes do, so a watch would show the names and the live activity (create, open,
  write, delete) in any folder the uid may list: the host's ``/tmp`` and ``/etc``, a project folder another
  toolbox shares, ``/usr/bin`` (which programs other workers run). Tools that watch files must poll (the bash and
  skills toolboxes do). On x86-64 also ``modify_ldt`` and ``uselib``, old interfaces with a
  history of holes that nothing current uses.
- ``unshare`` and ``clone`` with ``CLONE_NEWUSER``: a new user namespace gives its creator every capability inside
  it, and with them kernel code that is otherwise root's only: nf_tables and the rest of netfilter in a network
  namespace of its own, other network and file system code. That is where most local privilege escalations of recent
  years were reached from (nf_tables alone: CVE-2022-1015, CVE-2023-32233, CVE-2024-1086). Nothing gained inside
  leaves the namespace (Landlock refuses ``mount``, the worker's network namespace has no route), but the bugs are in
  the kernel, not behind those walls. Docker's default profile refuses the same.
- ``clone3`` answers ``ENOSYS`` (its flags are in memory, where a filter cannot look): the C libraries then use
  ``clone``, whose flags are checked (glibc and musl fall back on ``ENOSYS``; so do Go and Rust).
- ``socket`` and ``socketpair`` of any family but ``AF_UNIX``, ``AF_INET``, ``AF_INET6`` and ``AF_NETLINK`` answer
  ``EAFNOSUPPORT``: a tool needs no other, and each other family is kernel code an exploit can reach (``AF_ALG``,
  ``AF_VSOCK``, ``AF_TIPC``, ...), or on a modular kernel a module the first ``socket()`` of that family loads
  (DCCP, RDS and others have had their holes). Of netlink, only ``NETLINK_ROUTE`` and ``NETLINK_SOCK_DIAG`` may be
  opened (others answer ``EPROTONOSUPPORT``): some are not per network namespace (``NETLINK_KOBJECT_UEVENT`` carries
  the host's device events) and generic netlink is a large surface.

- the extended-attribute calls (``setxattr``, ``getxattr``, ``listxattr``, ``removexattr``, their ``l``/``f``
  forms and the ``*xattrat`` calls of Linux 6.13) answer ``EOPNOTSUPP``, as on a file system without extended
  attributes, unless the plan allows them (the policy's ``toolboxes.<name>.xattrs: true``). Landlock (up to ABI 7)
  does not mediate them, only the file modes do: a worker could set, read and remove ``user.*`` attributes on any
  file its uid or group may write (another tenant's files in a shared folder: a channel of kilobytes per file that
  no Landlock rule sees), and read those of any file it may read. Reading is refused too: it is the other end of
  that channel, and it also shows what other tenants stored. ``EOPNOTSUPP`` is the answer programs already handle
  (``cp -a``, ``ls -l`` checking for ACLs, Python's ``shutil.copystat`` skip attributes on such file systems).

System calls of another ABI (x32 numbers on x86-64, or a foreign audit arch such as i386 via ``int 0x80``) are
refused wholesale: they would otherwise reach the same calls under other numbers.

What it does NOT cover: it is a deny list of a few calls, not an allow list; of arguments it looks only at the
namespace flag above; it leaves every other system call to Landlock, the namespaces, the cgroup and the uid. A tool
that builds a sandbox of its own with user namespaces (Chromium's, bubblewrap) cannot: run it without (Chromium's
``--no-sandbox``), the worker is its sandbox.

:func:`plan_seccomp` builds the BPF program (pure); :func:`apply_seccomp` installs it (needs ``no_new_privs``).
"""

from __future__ import annotations

import ctypes
import os
import struct

from sandbox._errors import ConfinementError
from sandbox._libc import LIBC

__all__ = [
    "CLONE_NEWUSER",
    "NETLINK_PROTOCOLS",
    "REFUSAL_REASONS",
    "REFUSED_SYSCALLS",
    "SOCKET_FAMILIES",
    "XATTR_SYSCALLS",
    "apply_seccomp",
    "plan_seccomp",
    "plan_seccomp_log",
    "syscall_name",
]

REFUSED_SYSCALLS = (
    "keyctl",
    "add_key",
    "request_key",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "userfaultfd",
    "perf_event_open",
    "bpf",
    "syslog",
    "inotify_init",
    "inotify_init1",
    "fanotify_init",
    "modify_ldt",
    "uselib",
)
#: machine -> system call numbers of REFUSED_SYSCALLS (a call a machine does not have is left out)
_REFUSED_NUMBERS = {
    "x86_64": {
        "keyctl": 250,
        "add_key": 248,
        "request_key": 249,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "userfaultfd": 323,
        "perf_event_open": 298,
        "bpf": 321,
        "syslog": 103,
        "inotify_init": 253,
        "inotify_init1": 294,
        "fanotify_init": 300,
        "modify_ldt": 154,
        "uselib": 134,
    },
    "aarch64": {
        "keyctl": 219,
        "add_key": 217,
        "request_key": 218,
        "io_uring_setup": 425,
        "io_uring_enter": 426,
        "io_uring_register": 427,
        "userfaultfd": 282,
        "perf_event_open": 241,
        "bpf": 280,
        "syslog": 116,
        "inotify_init1": 26,
        "fanotify_init": 262,
    },
}
XATTR_SYSCALLS = (
    "setxattr",
    "lsetxattr",
    "fsetxattr",
    "getxattr",
    "lgetxattr",
    "fgetxattr",
    "listxattr",
    "llistxattr",
    "flistxattr",
    "removexattr",
    "lremovexattr",
    "fremovexattr",
    "setxattrat",
    "getxattrat",
    "listxattrat",
    "removexattrat",
)
#: machine -> system call numbers of XATTR_SYSCALLS (the *xattrat calls have one number on every machine since 6.13)
_XATTR_NUMBERS = {
    "x86_64": dict(zip(XATTR_SYSCALLS, (*range(188, 200), 463, 464, 465, 466), strict=True)),
    "aarch64": dict(zip(XATTR_SYSCALLS, (*range(5, 17), 463, 464, 465, 466), strict=True)),
}
#: machine -> (audit arch, first number of another ABI to refuse or 0, (unshare, clone, clone3),
#: (socket, socketpair))
_ARCHES = {
    "x86_64": (0xC000003E, 0x40000000, (272, 56, 435), (41, 53)),
    "aarch64": (0xC00000B7, 0, (97, 220, 435), (198, 199)),
}
CLONE_NEWUSER = 0x10000000
#: AF_UNIX, AF_INET, AF_INET6, AF_NETLINK: the only socket families a worker may create
SOCKET_FAMILIES = (1, 2, 10, 16)
AF_NETLINK = 16
#: NETLINK_ROUTE (addresses and routes: getaddrinfo, getifaddrs, ip) and NETLINK_SOCK_DIAG (ss): the only netlink
#: protocols a worker may open
NETLINK_PROTOCOLS = (0, 4)
_EAFNOSUPPORT = 97
_EOPNOTSUPP = 95
_EPROTONOSUPPORT = 93
_BPF_LD_W_ABS = 0x20
_BPF_JEQ_K = 0x15
_BPF_JGE_K = 0x35
_BPF_JSET_K = 0x45
_BPF_RET_K = 0x06
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_EPERM = 1
_ENOSYS = 38
#: offsets in ``struct seccomp_data``: nr, arch, the low 32 bits of args[0] (every CLONE_* flag, the socket family)
#: and of args[2] (the socket protocol)
_NR, _ARCH, _ARG0_LOW, _ARG2_LOW = 0, 4, 16, 32
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_TSYNC = 1
_SECCOMP_FILTER_FLAG_LOG = 2
#: why each refusal the logging filter reports exists, in words for an agent (the module docstring has the long form)
REFUSAL_REASONS = {
    "keyctl": "the kernel keyrings are shared by every process of a uid: a channel between toolboxes",
    "add_key": "the kernel keyrings are shared by every process of a uid: a channel between toolboxes",
    "request_key": "the kernel keyrings are shared by every process of a uid: a channel between toolboxes",
    "io_uring_setup": "io_uring is a large kernel surface no toolbox needs (programs fall back to plain calls)",
    "io_uring_enter": "io_uring is a large kernel surface no toolbox needs (programs fall back to plain calls)",
    "io_uring_register": "io_uring is a large kernel surface no toolbox needs (programs fall back to plain calls)",
    "userfaultfd": "a kernel surface exploits use to widen races",
    "perf_event_open": "a kernel surface exploits use",
    "bpf": "a kernel surface exploits use",
    "syslog": "the kernel's log is the host's",
    "inotify_init": "file watches would show other workers' activity; poll files instead",
    "inotify_init1": "file watches would show other workers' activity; poll files instead",
    "fanotify_init": "file watches would show other workers' activity; poll files instead",
    "modify_ldt": "an old interface with a history of holes",
    "uselib": "an old interface with a history of holes",
    "unshare": "a new user namespace (CLONE_NEWUSER) reaches kernel code otherwise root's only",
    "clone": "a new user namespace (CLONE_NEWUSER) reaches kernel code otherwise root's only",
    "socket": "only AF_UNIX, AF_INET, AF_INET6 and NETLINK_ROUTE/SOCK_DIAG sockets may be created",
    "socketpair": "only AF_UNIX, AF_INET, AF_INET6 and NETLINK_ROUTE/SOCK_DIAG sockets may be created",
}
_NR_SECCOMP = {"x86_64": 317, "aarch64": 277}


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def _assemble(program: list[tuple[int, str | int, str | int, int] | str]) -> bytes:
    """Instructions ``(code, jt, jf, k)`` whose jumps name labels (or 0 for the next one); a string is a label."""
    labels: dict[str, int] = {}
    index = 0
    for item in program:
        if isinstance(item, str):
            labels[item] = index
        else:
            index += 1
    out: list[bytes] = []
    for item in program:
        if isinstance(item, str):
            continue
        code, jt, jf, k = item
        here = len(out) + 1
        out.append(_insn(code, 0 if jt == 0 else labels[str(jt)] - here, 0 if jf == 0 else labels[str(jf)] - here, k))
    return b"".join(out)


def plan_seccomp(machine: str, *, xattrs: bool = False) -> bytes:
    """The filter for ``machine`` (``platform.machine()``) as raw ``sock_filter`` instructions. Pure.

    ``xattrs``: let the extended-attribute calls through (otherwise they answer ``EOPNOTSUPP``).

    Raises:
        ConfinementError: a machine this module has no system call table for.
    """
    if machine not in _ARCHES:
        raise ConfinementError(f"no seccomp table for {machine}", step="seccomp")
    arch, foreign_abi, (unshare, clone, clone3), (socket, socketpair) = _ARCHES[machine]
    numbers = [_REFUSED_NUMBERS[machine][name] for name in REFUSED_SYSCALLS if name in _REFUSED_NUMBERS[machine]]
    program: list[tuple[int, str | int, str | int, int] | str] = [
        (_BPF_LD_W_ABS, 0, 0, _ARCH),
        (_BPF_JEQ_K, 0, "deny", arch),  # another arch: refused
        (_BPF_LD_W_ABS, 0, 0, _NR),
    ]
    if foreign_abi:
        program.append((_BPF_JGE_K, "deny", 0, foreign_abi))
    program += [(_BPF_JEQ_K, "deny", 0, nr) for nr in numbers]
    if not xattrs:
        program += [(_BPF_JEQ_K, "noxattr", 0, nr) for nr in _XATTR_NUMBERS[machine].values()]
    program += [
        (_BPF_JEQ_K, "nosys", 0, clone3),
        *_argument_checks(unshare, clone, socket, socketpair),
        "nosys",
        (_BPF_RET_K, 0, 0, _RET_ERRNO | _ENOSYS),
        "noxattr",
        (_BPF_RET_K, 0, 0, _RET_ERRNO | _EOPNOTSUPP),
        "deny",
        (_BPF_RET_K, 0, 0, _RET_ERRNO | _EPERM),
    ]
    return _assemble(program)


def _argument_checks(
    unshare: int, clone: int, socket: int, socketpair: int
) -> list[tuple[int, str | int, str | int, int] | str]:
    """The argument checks both filters share, so they cannot drift apart: with the system call number loaded,
    ``unshare``/``clone`` asking for ``CLONE_NEWUSER`` jump to ``"deny"``, ``socket``/``socketpair`` of a family (or
    netlink protocol) outside the allowed lists are refused with their errno, everything else is allowed. The
    caller's program defines the ``"deny"`` label."""
    return [
        (_BPF_JEQ_K, "flags", 0, unshare),
        (_BPF_JEQ_K, "flags", 0, clone),
        (_BPF_JEQ_K, "family", 0, socket),
        (_BPF_JEQ_K, "family", 0, socketpair),
        (_BPF_RET_K, 0, 0, _RET_ALLOW),
        "family",
        (_BPF_LD_W_ABS, 0, 0, _ARG0_LOW),
        (_BPF_JEQ_K, "netlink", 0, AF_NETLINK),
        *[(_BPF_JEQ_K, "allow", 0, family) for family in SOCKET_FAMILIES if family != AF_NETLINK],
        (_BPF_RET_K, 0, 0, _RET_ERRNO | _EAFNOSUPPORT),
        "netlink",
        (_BPF_LD_W_ABS, 0, 0, _ARG2_LOW),
        *[(_BPF_JEQ_K, "allow", 0, protocol) for protocol in NETLINK_PROTOCOLS],
        (_BPF_RET_K, 0, 0, _RET_ERRNO | _EPROTONOSUPPORT),
        "flags",
        (_BPF_LD_W_ABS, 0, 0, _ARG0_LOW),
        (_BPF_JSET_K, "deny", 0, CLONE_NEWUSER),
        "allow",
        (_BPF_RET_K, 0, 0, _RET_ALLOW),
    ]


def plan_seccomp_log(machine: str) -> bytes:
    """A second filter that reports the refusals worth explaining to the kernel's audit (pure).

    It answers exactly what :func:`plan_seccomp` answers for the deny list, ``CLONE_NEWUSER`` and the socket
    families and netlink protocols, and allows everything else. Installed *after* the main filter with
    ``log=True``, it is the one whose answer the kernel takes for those calls (of equal actions the most recent
    filter wins), so each of them becomes an ``AUDIT_SECCOMP`` record naming the system call; the main filter's
    other answers (``clone3``'s ``ENOSYS`` on every fork, the extended attributes' ``EOPNOTSUPP`` on every
    ``ls -l``) come from the main filter, which does not log. It never refuses what the main filter allows.

    Raises:
        ConfinementError: a machine this module has no system call table for.
    """
    if machine not in _ARCHES:
        raise ConfinementError(f"no seccomp table for {machine}", step="seccomp")
    arch, _foreign, (unshare, clone, _clone3), (socket, socketpair) = _ARCHES[machine]
    numbers = [_REFUSED_NUMBERS[machine][name] for name in REFUSED_SYSCALLS if name in _REFUSED_NUMBERS[machine]]
    program: list[tuple[int, str | int, str | int, int] | str] = [
        (_BPF_LD_W_ABS, 0, 0, _ARCH),
        (_BPF_JEQ_K, 0, "allow", arch),  # another arch: the main filter refuses it (and does not log)
        (_BPF_LD_W_ABS, 0, 0, _NR),
        *[(_BPF_JEQ_K, "deny", 0, nr) for nr in numbers],
        *_argument_checks(unshare, clone, socket, socketpair),
        "deny",
        (_BPF_RET_K, 0, 0, _RET_ERRNO | _EPERM),
    ]
    return _assemble(program)


def syscall_name(machine: str, number: int) -> str | None:
    """The name of a system call the filters refuse, from its number on ``machine`` (pure); ``None`` for others."""
    if machine not in _ARCHES:
        return None
    _arch, _foreign, (unshare, clone, clone3), (socket, socketpair) = _ARCHES[machine]
    named = {nr: name for name, nr in _REFUSED_NUMBERS[machine].items()}
    named.update({nr: name for name, nr in _XATTR_NUMBERS[machine].items()})
    named.update({unshare: "unshare", clone: "clone", clone3: "clone3", socket: "socket", socketpair: "socketpair"})
    return named.get(number)


class _SockFprog(ctypes.Structure):
    """``struct sock_fprog``; a class made on import (in the zygote: a child making it paid about 0.4 ms)."""

    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def apply_seccomp(program: bytes, machine: str, *, log: bool = False) -> None:
    """Install ``program`` on every thread of this process. Needs ``no_new_privs`` (or ``CAP_SYS_ADMIN``).

    ``log``: the kernel writes an audit record for each of the filter's refusals (``SECCOMP_FILTER_FLAG_LOG``;
    seen only when the host's audit is enabled).

    Raises:
        ConfinementError: the kernel refused the filter.
    """
    count = len(program) // 8
    buf = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(count, ctypes.addressof(buf))
    result = LIBC.syscall(
        ctypes.c_long(_NR_SECCOMP[machine]),
        ctypes.c_long(_SECCOMP_SET_MODE_FILTER),
        ctypes.c_long(_SECCOMP_FILTER_FLAG_TSYNC | (_SECCOMP_FILTER_FLAG_LOG if log else 0)),
        ctypes.byref(prog),
    )
    if result != 0:
        err = ctypes.get_errno()
        raise ConfinementError(f"seccomp filter refused: {os.strerror(err)}", step="seccomp", errno=err)
