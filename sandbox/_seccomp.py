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

- set-uid and set-gid mode bits (``S_ISUID``, ``S_ISGID``, ``06000``) answer ``EPERM`` where the kernel would honour
  them: ``chmod``, ``fchmod``, ``fchmodat`` and ``fchmodat2`` (the mode argument), ``creat``, ``open`` and ``openat``
  when they create (``O_CREAT`` or ``O_TMPFILE`` in the flags: the kernel reads the mode only then), ``mknod`` and
  ``mknodat``. A worker's uid and its ``shared_groups`` are real ids of the host: a 6755 file a member leaves in a
  shared folder would run as that worker's uid and group for anyone on the host who executes it outside a view (the
  view's binds are ``nosuid``, the host's file systems are not). ``mkdir``/``mkdirat`` are not checked: the kernel
  drops those bits from their mode (a new folder gets set-gid only from a set-gid parent, which the operator made).
  ``openat2`` answers ``ENOSYS``: its mode is inside a ``struct open_how`` a filter cannot read; the C libraries
  never use it for ``open``, and the programs that do (for ``RESOLVE_*``) fall back to ``openat`` on ``ENOSYS``.
  The sticky bit and every other mode stay allowed.

System calls of another ABI (x32 numbers on x86-64, or a foreign audit arch such as i386 via ``int 0x80``) are
refused wholesale: they would otherwise reach the same calls under other numbers.

What it does NOT cover: it is a deny list of a few calls, not an allow list; of arguments it looks only at the
namespace flag above, the socket family and the set-id mode bits; it leaves every other system call to Landlock, the
namespaces, the cgroup and the uid. A tool that builds a sandbox of its own with user namespaces (Chromium's,
bubblewrap) cannot: run it without (Chromium's ``--no-sandbox``), the worker is its sandbox.

:func:`plan_seccomp` builds the BPF program (pure); :func:`apply_seccomp` installs it (needs ``no_new_privs``).
"""

from __future__ import annotations

import ctypes
import os
import struct

from sandbox._errors import ConfinementError
from sandbox._libc import LIBC
from sandbox._syscall_tables import (
    AF_NETLINK,
    ARCHES,
    CLONE_NEWUSER,
    MODE_CHECKS,
    MODE_NUMBERS,
    NETLINK_PROTOCOLS,
    NR_SECCOMP,
    OPEN_CREATES,
    REFUSAL_REASONS,
    REFUSED_NUMBERS,
    REFUSED_SYSCALLS,
    SETID_BITS,
    SOCKET_FAMILIES,
    XATTR_NUMBERS,
    XATTR_SYSCALLS,
)

__all__ = [
    "CLONE_NEWUSER",
    "MODE_CHECKS",
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


def _arg_low(index: int) -> int:
    """The offset of the low 32 bits of ``args[index]`` in ``struct seccomp_data`` (a mode, flags: 32 bits)."""
    return _ARG0_LOW + 8 * index


_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_TSYNC = 1
_SECCOMP_FILTER_FLAG_LOG = 2


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
    if machine not in ARCHES:
        raise ConfinementError(f"no seccomp table for {machine}", step="seccomp")
    arch, foreign_abi, (unshare, clone, clone3), (socket, socketpair) = ARCHES[machine]
    numbers = [REFUSED_NUMBERS[machine][name] for name in REFUSED_SYSCALLS if name in REFUSED_NUMBERS[machine]]
    program: list[tuple[int, str | int, str | int, int] | str] = [
        (_BPF_LD_W_ABS, 0, 0, _ARCH),
        (_BPF_JEQ_K, 0, "deny", arch),  # another arch: refused
        (_BPF_LD_W_ABS, 0, 0, _NR),
    ]
    if foreign_abi:
        program.append((_BPF_JGE_K, "deny", 0, foreign_abi))
    program += [(_BPF_JEQ_K, "deny", 0, nr) for nr in numbers]
    if not xattrs:
        program += [(_BPF_JEQ_K, "noxattr", 0, nr) for nr in XATTR_NUMBERS[machine].values()]
    program += [
        (_BPF_JEQ_K, "nosys", 0, clone3),
        (_BPF_JEQ_K, "nosys", 0, MODE_NUMBERS[machine]["openat2"]),
        *_argument_checks(machine, unshare, clone, socket, socketpair),
        "nosys",
        (_BPF_RET_K, 0, 0, _RET_ERRNO | _ENOSYS),
        "noxattr",
        (_BPF_RET_K, 0, 0, _RET_ERRNO | _EOPNOTSUPP),
        "deny",
        (_BPF_RET_K, 0, 0, _RET_ERRNO | _EPERM),
    ]
    return _assemble(program)


def _argument_checks(
    machine: str, unshare: int, clone: int, socket: int, socketpair: int
) -> list[tuple[int, str | int, str | int, int] | str]:
    """The argument checks both filters share, so they cannot drift apart: with the system call number loaded,
    ``unshare``/``clone`` asking for ``CLONE_NEWUSER`` jump to ``"deny"``, ``socket``/``socketpair`` of a family (or
    netlink protocol) outside the allowed lists are refused with their errno, the calls of :data:`MODE_CHECKS` with
    set-id mode bits (``open``/``openat`` only when they create) jump to ``"deny"``, everything else is allowed.
    The caller's program defines the ``"deny"`` label."""
    numbers = MODE_NUMBERS[machine]
    modes = MODE_CHECKS[machine]
    shapes = sorted(set(modes.values()), key=lambda shape: (shape[0], -1 if shape[1] is None else shape[1]))

    def label(shape: tuple[int, int | None]) -> str:
        return f"mode{shape[0]}" if shape[1] is None else f"mode{shape[0]}flags{shape[1]}"

    program: list[tuple[int, str | int, str | int, int] | str] = [
        (_BPF_JEQ_K, "flags", 0, unshare),
        (_BPF_JEQ_K, "flags", 0, clone),
        (_BPF_JEQ_K, "family", 0, socket),
        (_BPF_JEQ_K, "family", 0, socketpair),
        *[(_BPF_JEQ_K, label(shape), 0, numbers[name]) for name, shape in modes.items()],
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
        (_BPF_RET_K, 0, 0, _RET_ALLOW),
    ]
    for mode_arg, flags_arg in shapes:
        program.append(label((mode_arg, flags_arg)))
        if flags_arg is not None:  # the mode counts only when the call creates
            program += [(_BPF_LD_W_ABS, 0, 0, _arg_low(flags_arg)), (_BPF_JSET_K, 0, "allow", OPEN_CREATES)]
        program += [(_BPF_LD_W_ABS, 0, 0, _arg_low(mode_arg)), (_BPF_JSET_K, "deny", 0, SETID_BITS)]
        program.append((_BPF_RET_K, 0, 0, _RET_ALLOW))
    return [*program, "allow", (_BPF_RET_K, 0, 0, _RET_ALLOW)]


def plan_seccomp_log(machine: str) -> bytes:
    """A second filter that reports the refusals worth explaining to the kernel's audit (pure).

    It answers exactly what :func:`plan_seccomp` answers for the deny list, ``CLONE_NEWUSER``, the socket
    families and netlink protocols and the set-id mode bits, and allows everything else. Installed *after* the main
    filter with ``log=True``, it is the one whose answer the kernel takes for those calls (of equal actions the most
    recent filter wins), so each of them becomes an ``AUDIT_SECCOMP`` record naming the system call; the main filter's
    other answers (``clone3``'s ``ENOSYS`` on every fork, the extended attributes' ``EOPNOTSUPP`` on every
    ``ls -l``) come from the main filter, which does not log. It never refuses what the main filter allows.

    Raises:
        ConfinementError: a machine this module has no system call table for.
    """
    if machine not in ARCHES:
        raise ConfinementError(f"no seccomp table for {machine}", step="seccomp")
    arch, _foreign, (unshare, clone, _clone3), (socket, socketpair) = ARCHES[machine]
    numbers = [REFUSED_NUMBERS[machine][name] for name in REFUSED_SYSCALLS if name in REFUSED_NUMBERS[machine]]
    program: list[tuple[int, str | int, str | int, int] | str] = [
        (_BPF_LD_W_ABS, 0, 0, _ARCH),
        (_BPF_JEQ_K, 0, "allow", arch),  # another arch: the main filter refuses it (and does not log)
        (_BPF_LD_W_ABS, 0, 0, _NR),
        *[(_BPF_JEQ_K, "deny", 0, nr) for nr in numbers],
        *_argument_checks(machine, unshare, clone, socket, socketpair),
        "deny",
        (_BPF_RET_K, 0, 0, _RET_ERRNO | _EPERM),
    ]
    return _assemble(program)


def syscall_name(machine: str, number: int) -> str | None:
    """The name of a system call the filters refuse, from its number on ``machine`` (pure); ``None`` for others."""
    if machine not in ARCHES:
        return None
    _arch, _foreign, (unshare, clone, clone3), (socket, socketpair) = ARCHES[machine]
    named = {nr: name for name, nr in REFUSED_NUMBERS[machine].items()}
    named.update({nr: name for name, nr in XATTR_NUMBERS[machine].items()})
    named.update({unshare: "unshare", clone: "clone", clone3: "clone3", socket: "socket", socketpair: "socketpair"})
    named.update({nr: name for name, nr in MODE_NUMBERS[machine].items()})
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
        ctypes.c_long(NR_SECCOMP[machine]),
        ctypes.c_long(_SECCOMP_SET_MODE_FILTER),
        ctypes.c_long(_SECCOMP_FILTER_FLAG_TSYNC | (_SECCOMP_FILTER_FLAG_LOG if log else 0)),
        ctypes.byref(prog),
    )
    if result != 0:
        err = ctypes.get_errno()
        raise ConfinementError(f"seccomp filter refused: {os.strerror(err)}", step="seccomp", errno=err)
