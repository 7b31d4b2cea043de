"""A small seccomp filter: refuse (``EPERM``) the system calls no toolbox needs and that cross the worker's walls.

Why each is refused:

- ``keyctl``, ``add_key``, ``request_key``: every worker runs as the same uid, and the kernel gives each uid one *user
  keyring* (``@u``) shared by all its processes on the machine and outliving them. A key one toolbox adds there, any
  other toolbox reads: a channel between toolboxes that Landlock, the namespaces and the cgroups do not see.
- ``io_uring_setup``/``enter``/``register``: io_uring operations do respect Landlock (an ``OPENAT`` outside the rules
  fails with ``EACCES``), but it is a large kernel surface no toolbox needs; programs such as libuv fall back to plain
  system calls when it is refused.
- ``userfaultfd``, ``perf_event_open``, ``bpf``: kernel surfaces that exploits use (``userfaultfd`` widens races;
  perf and bpf are refused already by the sysctls of a Debian host, this does not depend on them).

System calls of another ABI (x32 numbers on x86-64, or a foreign audit arch such as i386 via ``int 0x80``) are
refused wholesale: they would otherwise reach the same calls under other numbers.

What it does NOT cover: it is a deny list of a few calls, not an allow list; it does not filter arguments (so
``unshare(CLONE_NEWUSER)`` is allowed: inside, ``mount`` is refused by Landlock and nothing outside is gained), and
it leaves every other system call to Landlock, the namespaces, the cgroup and the uid.

:func:`plan_seccomp` builds the BPF program (pure); :func:`apply_seccomp` installs it (needs ``no_new_privs``).
"""

from __future__ import annotations

import ctypes
import os
import struct

from sandbox._errors import ConfinementError

__all__ = ["REFUSED_SYSCALLS", "apply_seccomp", "plan_seccomp"]

REFUSED_SYSCALLS = ("keyctl", "add_key", "request_key", "io_uring_setup", "io_uring_enter", "io_uring_register",
                    "userfaultfd", "perf_event_open", "bpf")
#: machine -> (audit arch, first number of another ABI to refuse or 0, numbers of REFUSED_SYSCALLS)
_ARCHES = {
    "x86_64": (0xC000003E, 0x40000000, (250, 248, 249, 425, 426, 427, 323, 298, 321)),
    "aarch64": (0xC00000B7, 0, (219, 217, 218, 425, 426, 427, 282, 241, 280)),
}
_BPF_LD_W_ABS = 0x20
_BPF_JEQ_K = 0x15
_BPF_JGE_K = 0x35
_BPF_RET_K = 0x06
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_EPERM = 1
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_TSYNC = 1
_NR_SECCOMP = {"x86_64": 317, "aarch64": 277}


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def plan_seccomp(machine: str) -> bytes:
    """The filter for ``machine`` (``platform.machine()``) as raw ``sock_filter`` instructions. Pure.

    Raises:
        ConfinementError: a machine this module has no system call table for.
    """
    if machine not in _ARCHES:
        raise ConfinementError(f"no seccomp table for {machine}", step="seccomp")
    arch, foreign_abi, numbers = _ARCHES[machine]
    # Layout: [arch check] [load nr] [foreign ABI check] [one JEQ per call] [allow] [deny]
    body: list[bytes] = []
    n = len(numbers)
    jumps = n + (1 if foreign_abi else 0)
    body.append(_insn(_BPF_LD_W_ABS, 0, 0, 4))  # seccomp_data.arch
    body.append(_insn(_BPF_JEQ_K, 0, jumps + 2, arch))  # another arch: to deny
    body.append(_insn(_BPF_LD_W_ABS, 0, 0, 0))  # seccomp_data.nr
    if foreign_abi:
        body.append(_insn(_BPF_JGE_K, n + 1, 0, foreign_abi))
    for i, nr in enumerate(numbers):
        body.append(_insn(_BPF_JEQ_K, n - i, 0, nr))
    body.append(_insn(_BPF_RET_K, 0, 0, _RET_ALLOW))
    body.append(_insn(_BPF_RET_K, 0, 0, _RET_ERRNO | _EPERM))
    return b"".join(body)


def apply_seccomp(program: bytes, machine: str) -> None:
    """Install ``program`` on every thread of this process. Needs ``no_new_privs`` (or ``CAP_SYS_ADMIN``).

    Raises:
        ConfinementError: the kernel refused the filter.
    """
    count = len(program) // 8
    buf = ctypes.create_string_buffer(program, len(program))

    class _Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = _Prog(count, ctypes.addressof(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    result = libc.syscall(ctypes.c_long(_NR_SECCOMP[machine]), ctypes.c_long(_SECCOMP_SET_MODE_FILTER),
                          ctypes.c_long(_SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(prog))
    if result != 0:
        err = ctypes.get_errno()
        raise ConfinementError(f"seccomp filter refused: {os.strerror(err)}", step="seccomp", errno=err)
