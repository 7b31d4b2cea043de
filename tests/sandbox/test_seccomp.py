"""The seccomp filter, run on a small interpreter of classic BPF (the instructions the filter uses), for both
machines it supports. The filter's effect from inside real workers is in ``test_escapes_more.py``."""

from __future__ import annotations

import struct

import pytest

from sandbox import ConfinementError, syscall_name
from sandbox._seccomp import CLONE_NEWUSER, plan_seccomp, plan_seccomp_log

ALLOW, EPERM, ENOSYS, EAFNOSUPPORT, EPROTONOSUPPORT = "allow", "EPERM", "ENOSYS", "EAFNOSUPPORT", "EPROTONOSUPPORT"
EOPNOTSUPP = "EOPNOTSUPP"
ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
#: (keyctl, unshare, clone, clone3, read, socket, socketpair, syslog) per machine
NR = {"x86_64": (250, 272, 56, 435, 0, 41, 53, 103), "aarch64": (219, 97, 220, 435, 63, 198, 199, 116)}
SIGCHLD = 17


def run_filter(
    program: bytes, *, arch: int, nr: int, arg0: int = 0, arg2: int = 0, args: tuple[int, ...] | None = None
) -> str:
    """Run a classic BPF seccomp program on ``struct seccomp_data`` (nr, arch, ip 0, args) and name its verdict.
    ``args``: all six arguments (else ``arg0`` and ``arg2``, the others 0)."""
    full = (*args, *(0,) * (6 - len(args))) if args is not None else (arg0, 0, arg2, 0, 0, 0)
    data = struct.pack("=iIQ6Q", nr, arch, 0, *full)
    insns = [struct.unpack("=HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
    acc, pc = 0, 0
    for _ in range(len(insns)):  # a seccomp program only jumps forward: this many steps always suffice
        code, jt, jf, k = insns[pc]
        pc += 1
        if code == 0x20:  # LD W ABS
            acc = struct.unpack_from("=I", data, k)[0]
        elif code in (0x15, 0x35, 0x45):  # JEQ, JGE, JSET with a constant
            taken = acc == k if code == 0x15 else acc >= k if code == 0x35 else bool(acc & k)
            pc += jt if taken else jf
        elif code == 0x06:  # RET
            if k == 0x7FFF0000:
                return ALLOW
            assert k >> 16 == 0x0005, f"unexpected action {k:#x}"
            return {1: EPERM, 38: ENOSYS, 97: EAFNOSUPPORT, 93: EPROTONOSUPPORT, 95: EOPNOTSUPP}[k & 0xFFFF]
        else:
            raise AssertionError(f"instruction {code:#x} not expected in this filter")
    raise AssertionError("the program ran off its end")


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_filter_refuses_what_it_says_and_lets_the_rest_through(machine: str) -> None:
    program = plan_seccomp(machine)
    keyctl, unshare, clone, clone3, read, socket, socketpair, syslog = NR[machine]

    def verdict(nr: int, arg0: int = 0, arch: int = ARCH[machine], arg2: int = 0) -> str:
        return run_filter(program, arch=arch, nr=nr, arg0=arg0, arg2=arg2)

    assert verdict(read) == ALLOW
    assert verdict(keyctl) == EPERM
    assert verdict(syslog) == EPERM
    for name, nr in {
        "x86_64": (("inotify_init", 253), ("inotify_init1", 294), ("fanotify_init", 300)),
        "aarch64": (("inotify_init1", 26), ("fanotify_init", 262)),
    }[machine]:
        assert verdict(nr) == EPERM, name
    assert verdict(clone3) == ENOSYS  # the C library falls back to clone, whose flags can be checked
    assert verdict(unshare, CLONE_NEWUSER) == EPERM
    assert verdict(unshare, CLONE_NEWUSER | 0x00020000) == EPERM
    assert verdict(unshare, 0x00020000) == ALLOW  # CLONE_NEWNS alone: the kernel asks for CAP_SYS_ADMIN itself
    assert verdict(clone, SIGCHLD) == ALLOW  # fork
    assert verdict(clone, 0x003D0F00) == ALLOW  # pthread_create's flags
    assert verdict(clone, CLONE_NEWUSER | SIGCHLD) == EPERM
    for family in (1, 2, 10, 16):  # unix, inet, inet6, netlink
        assert verdict(socket, family) == ALLOW
        assert verdict(socketpair, family) == ALLOW
    assert verdict(socket, 16, arg2=4) == ALLOW  # NETLINK_SOCK_DIAG
    for protocol in (15, 16, 9, 6, 11):  # kobject uevent, generic, audit, xfrm, connector
        assert verdict(socket, 16, arg2=protocol) == EPROTONOSUPPORT
    for family in (17, 38, 40, 30, 21, 44, 0, 0xFFFF):  # packet, alg, vsock, tipc, rds, xdp, unspec, nonsense
        assert verdict(socket, family) == EAFNOSUPPORT
        assert verdict(socketpair, family) == EAFNOSUPPORT
    assert verdict(read, arch=0x40000003) == EPERM  # i386 through int 0x80
    if machine == "x86_64":
        assert verdict(154) == EPERM  # modify_ldt
        assert verdict(134) == EPERM  # uselib
        assert verdict(0x40000000 + keyctl) == EPERM  # x32
        assert verdict(0x40000000 + read) == EPERM


def test_a_machine_without_a_table_is_refused() -> None:
    with pytest.raises(ConfinementError, match="no seccomp table for riscv64"):
        plan_seccomp("riscv64")


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_xattr_calls_answer_eopnotsupp_unless_the_plan_allows_them(machine: str) -> None:
    """Numbers from the kernel's tables (x86-64 188-199, the generic table 5-16) and the *xattrat calls (463-466)."""
    first = {"x86_64": 188, "aarch64": 5}[machine]
    family = [*range(first, first + 12), 463, 464, 465, 466]
    refusing, allowing = plan_seccomp(machine), plan_seccomp(machine, xattrs=True)
    for nr in family:
        assert run_filter(refusing, arch=ARCH[machine], nr=nr) == EOPNOTSUPP, nr
        assert run_filter(allowing, arch=ARCH[machine], nr=nr) == ALLOW, nr
    # the knob opens nothing else
    keyctl = NR[machine][0]
    assert run_filter(allowing, arch=ARCH[machine], nr=keyctl) == EPERM
    assert run_filter(refusing, arch=ARCH[machine], nr=first + 12) == ALLOW  # the next call (not of the family)


#: machine -> {call: (number, index of the mode argument, index of the flags argument or None)}
MODE_CALLS = {
    "x86_64": {
        "chmod": (90, 1, None),
        "fchmod": (91, 1, None),
        "fchmodat": (268, 2, None),
        "fchmodat2": (452, 2, None),
        "creat": (85, 1, None),
        "mknod": (133, 1, None),
        "mknodat": (259, 2, None),
        "open": (2, 2, 1),
        "openat": (257, 3, 2),
    },
    "aarch64": {
        "fchmod": (52, 1, None),
        "fchmodat": (53, 2, None),
        "fchmodat2": (452, 2, None),
        "mknodat": (33, 2, None),
        "openat": (56, 3, 2),
    },
}
O_CREAT, O_TMPFILE, O_WRONLY = 0o100, 0o20200000, 0o1


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_set_id_mode_bits_are_refused_where_the_kernel_honours_them(machine: str) -> None:
    """Both filters (the main one and the logging one) refuse set-uid and set-gid bits in a mode the kernel would
    apply, and let every other mode through: the sticky bit, 0777, and an ``open`` that does not create (its mode
    argument is ignored by the kernel, and some callers pass garbage there)."""
    for program in (plan_seccomp(machine), plan_seccomp_log(machine)):
        for name, (nr, mode_at, flags_at) in MODE_CALLS[machine].items():

            def verdict(
                mode: int,
                flags: int = O_CREAT | O_WRONLY,
                program: bytes = program,
                nr: int = nr,
                mode_at: int = mode_at,
                flags_at: int | None = flags_at,
            ) -> str:
                args = [0] * 6
                args[mode_at] = mode
                if flags_at is not None:
                    args[flags_at] = flags
                return run_filter(program, arch=ARCH[machine], nr=nr, args=tuple(args))

            for mode in (0o4755, 0o2755, 0o6755, 0o4000, 0o2000, 0o106755, 0xFFFF_FFFF):
                assert verdict(mode) == EPERM, (name, oct(mode))
            for mode in (0o755, 0o777, 0o1777, 0o644, 0, 0o100644):
                assert verdict(mode) == ALLOW, (name, oct(mode))
            if flags_at is not None:
                assert verdict(0o6755, O_TMPFILE | O_WRONLY) == EPERM, name
                assert verdict(0o6755, O_WRONLY) == ALLOW, name  # no O_CREAT: the kernel ignores the mode
                assert verdict(0o6755, 0) == ALLOW, name
        assert syscall_name(machine, MODE_CALLS[machine]["fchmodat"][0]) == "fchmodat"
    # openat2's mode is in memory (struct open_how): it answers ENOSYS and callers fall back to openat
    assert run_filter(plan_seccomp(machine), arch=ARCH[machine], nr=437) == ENOSYS
    # mkdir is not checked: the kernel drops set-id bits from a new folder's mode itself
    mkdirat = {"x86_64": 258, "aarch64": 34}[machine]
    assert run_filter(plan_seccomp(machine), arch=ARCH[machine], nr=mkdirat, args=(0, 0, 0o6777)) == ALLOW
