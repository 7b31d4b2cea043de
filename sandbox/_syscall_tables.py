"""The system call tables of the seccomp filter (:mod:`sandbox._seccomp`): numbers per machine, the argument
positions it checks, the socket families and netlink protocols it allows, and why each refusal exists (in words
for an agent; the filter's module docstring has the long form). Data only."""

from __future__ import annotations

__all__ = [
    "AF_NETLINK",
    "ARCHES",
    "CLONE_NEWUSER",
    "MODE_CHECKS",
    "MODE_NUMBERS",
    "NETLINK_PROTOCOLS",
    "NR_SECCOMP",
    "OPEN_CREATES",
    "REFUSAL_REASONS",
    "REFUSED_NUMBERS",
    "REFUSED_SYSCALLS",
    "SETID_BITS",
    "SOCKET_FAMILIES",
    "XATTR_NUMBERS",
    "XATTR_SYSCALLS",
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
REFUSED_NUMBERS = {
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
XATTR_NUMBERS = {
    "x86_64": dict(zip(XATTR_SYSCALLS, (*range(188, 200), 463, 464, 465, 466), strict=True)),
    "aarch64": dict(zip(XATTR_SYSCALLS, (*range(5, 17), 463, 464, 465, 466), strict=True)),
}
#: machine -> (audit arch, first number of another ABI to refuse or 0, (unshare, clone, clone3),
#: (socket, socketpair))
ARCHES = {
    "x86_64": (0xC000003E, 0x40000000, (272, 56, 435), (41, 53)),
    "aarch64": (0xC00000B7, 0, (97, 220, 435), (198, 199)),
}
CLONE_NEWUSER = 0x10000000
#: S_ISUID | S_ISGID: the mode bits refused
SETID_BITS = 0o6000
#: O_CREAT | __O_TMPFILE (the same on x86-64 and the generic table): the flags with which open reads its mode
OPEN_CREATES = 0o100 | 0o20000000
#: machine -> system call -> (index of the mode argument, index of the flags argument or None): the calls whose
#: set-id mode bits the filter refuses (the flags, when given, must ask to create for the mode to count)
MODE_CHECKS: dict[str, dict[str, tuple[int, int | None]]] = {
    "x86_64": {
        "chmod": (1, None),
        "fchmod": (1, None),
        "fchmodat": (2, None),
        "fchmodat2": (2, None),
        "creat": (1, None),
        "mknod": (1, None),
        "mknodat": (2, None),
        "open": (2, 1),
        "openat": (3, 2),
    },
    "aarch64": {
        "fchmod": (1, None),
        "fchmodat": (2, None),
        "fchmodat2": (2, None),
        "mknodat": (2, None),
        "openat": (3, 2),
    },
}
#: machine -> system call numbers of MODE_CHECKS' calls and of openat2 (ENOSYS)
MODE_NUMBERS = {
    "x86_64": {
        "chmod": 90,
        "fchmod": 91,
        "fchmodat": 268,
        "fchmodat2": 452,
        "creat": 85,
        "mknod": 133,
        "mknodat": 259,
        "open": 2,
        "openat": 257,
        "openat2": 437,
    },
    "aarch64": {"fchmod": 52, "fchmodat": 53, "fchmodat2": 452, "mknodat": 33, "openat": 56, "openat2": 437},
}
#: AF_UNIX, AF_INET, AF_INET6, AF_NETLINK: the only socket families a worker may create
SOCKET_FAMILIES = (1, 2, 10, 16)
AF_NETLINK = 16
#: NETLINK_ROUTE (addresses and routes: getaddrinfo, getifaddrs, ip) and NETLINK_SOCK_DIAG (ss): the only netlink
#: protocols a worker may open
NETLINK_PROTOCOLS = (0, 4)
SETID_REASON = (
    "set-uid and set-gid mode bits (06000) are refused in workers: such a file would run as the worker's uid or "
    "group for anyone on the host; use a mode without them (chmod 755)"
)
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
    **{name: SETID_REASON for name in ("chmod", "fchmod", "fchmodat", "fchmodat2", "creat", "mknod", "mknodat")},
    **{name: SETID_REASON for name in ("open", "openat")},
}
NR_SECCOMP = {"x86_64": 317, "aarch64": 277}
