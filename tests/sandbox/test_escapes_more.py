"""More escape attempts from inside a real worker: namespaces, io_uring, keyrings, tracing, kernel interfaces, other
workers' folders and sockets. Same rules as ``test_escapes.py``: a real shell run by ``execute-command`` in the real
sandbox, exit 0 of an attempt is a breach and the test shows what it printed.

Two toolboxes, ``alpha`` and ``beta``, each with its own project folder; ``<tmp>/secret.txt`` is world-readable, so
only the sandbox stands between a worker and it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

from supervisor._supervisor import Supervisor
from tests._policies import agent, system_toolbox, write_policy

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

pytestmark = pytest.mark.root

SECRET = "top-secret-value-2"


@pytest.fixture
async def sup(sandbox_tmp: Path) -> AsyncIterator[Supervisor]:
    (sandbox_tmp / "secret.txt").write_text(SECRET)
    os.chmod(sandbox_tmp / "secret.txt", 0o644)
    toolboxes = []
    for name in ("alpha", "beta"):
        project = sandbox_tmp / name
        project.mkdir()
        os.chown(project, 65534, 65534)
        fsb = {"fsbPredicate": {"tag": "DirectoryRecursive", "contents": str(project)}, "fsbName": name}
        toolboxes.append(system_toolbox(name, capabilities=["execute-command"], FileSandbox=fsb))
    policy = write_policy(sandbox_tmp, {"tester": agent(builtinToolboxes=toolboxes)}, landlock_min_abi=6)
    async with Supervisor.open(policy) as s:
        yield s


async def _run(sup: Supervisor, command: str, toolbox: str = "alpha") -> dict:
    result = await sup.call(f"system_{toolbox}_execute_command", {"command": command})
    assert result.structured is not None, result.data
    return result.structured


async def _assert_refused(sup: Supervisor, command: str, toolbox: str = "alpha") -> dict:
    out = await _run(sup, command, toolbox)
    assert out["exitCode"] != 0, f"BREACH: {command!r} succeeded: stdout={out['stdout']!r} stderr={out['stderr']!r}"
    assert SECRET not in out["stdout"], f"BREACH: secret leaked by {command!r}"
    return out


def _py(body: str) -> str:
    """A shell command running ``body`` with python3 (a heredoc: the worker cannot read our files)."""
    return (
        f"python3 - <<'PYEOF'\nimport ctypes, os, sys\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        f"sc = libc.syscall\nsc.restype = ctypes.c_long\n{body}\nPYEOF"
    )


def _syscall_must_fail(expr: str) -> str:
    return _py(f"r = {expr}\nprint('result', r, os.strerror(ctypes.get_errno()))\nsys.exit(0 if r >= 0 else 1)")


async def test_no_user_namespace_can_be_made(sup: Supervisor) -> None:
    """A user namespace would give the worker every capability inside it, and with them kernel code (nf_tables,
    ...) that most recent privilege escalations went through: the seccomp filter refuses to make one."""
    await _assert_refused(sup, "unshare -U -r true")
    await _assert_refused(sup, "unshare --user --map-current-user --net true")
    for expr in (
        "libc.unshare(0x10000000)",
        "libc.unshare(0x10000000 | 0x40000000)",
        "sc(56, 0x10000000 | 17, 0, 0, 0, 0)",
    ):  # clone(CLONE_NEWUSER | SIGCHLD)
        out = await _assert_refused(sup, _syscall_must_fail(expr) + "\n# the child of a clone that worked exits 0")
        assert "result -1 Operation not permitted" in out["stdout"], (expr, out)
    out = await _assert_refused(sup, _syscall_must_fail("sc(435, ctypes.create_string_buffer(88), 88)"))  # clone3
    assert "result -1 Function not implemented" in out["stdout"], out
    # Processes and threads are still made as usual (clone without the flag; clone3 falls back to clone).
    ok = await _run(
        sup,
        _py(
            "import threading, subprocess\nt = threading.Thread(target=print, args=('thread',))\n"
            "t.start(); t.join()\nprint(subprocess.run(['echo', 'child'], capture_output=True, "
            "text=True).stdout.strip())\n"
            "print('forked', os.waitpid(os.fork() or os._exit(0), 0)[0] > 0)"
        ),
    )
    assert (ok["exitCode"], ok["stdout"]) == (0, "thread\nchild\nforked True\n"), ok


async def test_only_unix_inet_and_netlink_sockets_can_be_made(sup: Supervisor) -> None:
    """Every other socket family is kernel code an exploit can reach (or, on a modular kernel, a module to load)."""
    for family, name in (
        (38, "AF_ALG"),
        (40, "AF_VSOCK"),
        (17, "AF_PACKET"),
        (30, "AF_TIPC"),
        (21, "AF_RDS"),
        (44, "AF_XDP"),
    ):
        out = await _assert_refused(
            sup,
            _py(
                f"import socket\ns = socket.socket({family}, socket.SOCK_STREAM "
                f"if {family} != 17 else socket.SOCK_RAW)\nprint('BREACH {name}')"
            ),
        )
        assert "Address family not supported" in out["stderr"], (name, out)
    for protocol, name in ((15, "NETLINK_KOBJECT_UEVENT"), (16, "NETLINK_GENERIC"), (11, "NETLINK_CONNECTOR")):
        out = await _assert_refused(
            sup, _py(f"import socket\ns = socket.socket(16, 3, {protocol})\nprint('BREACH {name}')")
        )
        assert "Protocol not supported" in out["stderr"], (name, out)
    ok = await _run(
        sup,
        _py(
            "import socket\n"
            "for f, t, p in ((1, 1, 0), (2, 1, 0), (10, 2, 0), (16, 3, 0), (16, 3, 4)):\n"
            "    socket.socket(f, t, p).close()\na, b = socket.socketpair()\n"
            "print(len(socket.getaddrinfo('localhost', 80)) > 0)"
        ),
    )
    assert (ok["exitCode"], ok["stdout"]) == (0, "True\n"), ok


async def test_host_wide_proc_files_no_tool_needs_read_empty(sup: Supervisor) -> None:
    """The private /proc still has the kernel's global files: the ones that show other tenants' activity or the
    kernel's layout are masked; the ones programs read (ps, free, os.cpu_count) are not."""
    out = await _run(
        sup,
        "cat /proc/key-users /proc/keys /proc/interrupts /proc/config.gz /proc/iomem "
        "/proc/timer_list /proc/slabinfo /proc/vmallocinfo /proc/modules 2>/dev/null | wc -c; "
        "find /proc/irq /proc/bus /proc/driver -mindepth 1 | wc -l",
    )
    assert out["stdout"].split() == ["0", "0"], out
    out = await _run(
        sup,
        "head -c 3 /proc/stat; head -c 8 /proc/meminfo; grep -c ^Pid /proc/self/status; ls /proc | grep -c '^[0-9]'",
    )
    assert out["exitCode"] == 0 and out["stdout"].startswith("cpuMemTotal"), out
    assert int(out["stdout"].split()[-1]) >= 2, out  # the worker and the shell, nothing of the host
    # Writing stays refused, masked or not.
    await _assert_refused(sup, "echo 1 > /proc/sysrq-trigger")


async def test_io_uring_and_other_kernel_surfaces_are_refused(sup: Supervisor) -> None:
    for name, expr in (
        ("io_uring_setup", "sc(425, 4, ctypes.create_string_buffer(120))"),
        ("bpf", "sc(321, 0, ctypes.create_string_buffer(128), 128)"),
        ("perf_event_open", "sc(298, ctypes.create_string_buffer(128), 0, -1, -1, 0)"),
        ("userfaultfd", "sc(323, 1)"),  # UFFD_USER_MODE_ONLY: allowed by the sysctl, refused by the filter
        ("syslog", "sc(103, 10, 0, 0)"),  # SYSLOG_ACTION_SIZE_BUFFER
        ("inotify_init1", "libc.inotify_init1(0)"),  # a watch would show names and activity outside the rules
        ("fanotify_init", "sc(300, 0x200, 0)"),  # FAN_REPORT_FID: allowed to a non-root user by the kernel
        ("modify_ldt", "sc(154, 0, ctypes.create_string_buffer(16), 16)"),
        ("x32 keyctl", "sc(0x40000000 + 250, 0, -4, 0)"),
        ("open_by_handle_at", "sc(304, -100, ctypes.create_string_buffer(128), 0)"),
        ("process_vm_readv", f"sc(310, {os.getpid()}, 0, 0, 0, 0, 0)"),
        ("ptrace attach", f"sc(101, 16, {os.getpid()}, 0, 0)"),
        ("ptrace attach own PID 1", "sc(101, 16, 1, 0, 0)"),
    ):
        out = await _assert_refused(sup, _syscall_must_fail(expr))
        assert "result -1" in out["stdout"], (name, out)


async def test_the_uid_keyring_is_no_channel_between_toolboxes(sup: Supervisor) -> None:
    # Every worker runs as uid 65534, and the kernel gives a uid one user keyring shared machine-wide.
    add = _syscall_must_fail("sc(248, b'user', b'agents-supervise-probe', b'from-alpha', 10, -4)")
    out = await _assert_refused(sup, add, "alpha")
    assert "Operation not permitted" in out["stdout"], out
    read = _syscall_must_fail("sc(250, 10, -4, 0, 0)")  # KEYCTL_SEARCH would need a name; READ of @u suffices
    await _assert_refused(sup, read, "beta")


async def test_kernel_tunables_and_security_attributes_are_read_only(sup: Supervisor) -> None:
    for path in (
        "/proc/sys/kernel/core_pattern",
        "/proc/sys/vm/drop_caches",
        "/proc/self/attr/current",
        "/proc/self/attr/exec",
        "/proc/self/oom_score_adj",
        "/proc/self/uid_map",
        "/proc/self/setgroups",
        "/sys/kernel/mm/transparent_hugepage/enabled",
        "/sys/fs/cgroup/pids/cgroup.procs",
        "/proc/sysrq-trigger",
    ):
        await _assert_refused(sup, f"echo 1 > {path}")


async def test_limits_and_privileges_cannot_be_raised(sup: Supervisor) -> None:
    await _assert_refused(
        sup,
        _py(
            "import resource\nresource.setrlimit(resource.RLIMIT_NPROC, "
            "(resource.RLIM_INFINITY, resource.RLIM_INFINITY))"
        ),
    )
    # (RLIMIT_AS is not set where the cgroup bounds memory, docs/CONFINEMENT.md; the file size and open files are)
    for limit in ("RLIMIT_FSIZE", "RLIMIT_NOFILE"):
        out = await _assert_refused(
            sup,
            _py(
                f"import resource\nsoft, hard = resource.getrlimit(resource.{limit})\n"
                f"resource.setrlimit(resource.{limit}, (hard + 4096, hard + 4096))"
            ),
        )
        assert "not allowed to raise maximum limit" in out["stderr"], (limit, out)
    for name, expr in (
        ("clear no_new_privs", "libc.prctl(38, 0, 0, 0, 0)"),
        ("ambient CAP_SYS_ADMIN", "libc.prctl(47, 2, 21, 0, 0)"),
        ("PR_SET_MM", "libc.prctl(35, 6, 0, 0, 0)"),
        ("securebits", "libc.prctl(28, 0x2f, 0, 0, 0)"),
        ("setuid 0", "libc.setuid(0)"),
    ):
        out = await _assert_refused(sup, _syscall_must_fail(expr))
        assert "result -1" in out["stdout"], (name, out)


async def test_tiocsti_has_no_terminal_to_push_into(sup: Supervisor) -> None:
    probe = _py(
        "import fcntl\nfor fd in (0, 1, 2):\n    try:\n        fcntl.ioctl(fd, 0x5412, b'x')\n"
        "        print('pushed into', fd)\n        sys.exit(0)\n"
        "    except OSError as e:\n        print(fd, e)\n"
        "fd = os.open('/dev/tty', os.O_RDWR)\nfcntl.ioctl(fd, 0x5412, b'x')"
    )
    await _assert_refused(sup, probe)


async def test_another_workers_folder_is_out_of_reach(sup: Supervisor, sandbox_tmp: Path) -> None:
    beta_work = sup.runner("beta").spec.plan.workdir
    out = await _run(sup, 'cd "$HOME" && echo beta-private > note.txt && mkdir -p d && echo x > d/y && pwd', "beta")
    assert out["exitCode"] == 0 and out["stdout"].strip() == beta_work, out
    (sandbox_tmp / "beta" / "shared.txt").write_text("beta project")
    for command in (
        f"cat {beta_work}/note.txt",
        f"ls {beta_work}",
        f"echo x > {beta_work}/planted",
        f"cat {sandbox_tmp}/beta/shared.txt",
        f"ln -s {beta_work}/note.txt link && cat link",
        f"cat {beta_work}/../../*/beta/note.txt",
    ):
        out = await _assert_refused(sup, command, "alpha")
        assert "beta-private" not in out["stdout"] and "beta project" not in out["stdout"], (command, out)
    assert not os.path.exists(f"{beta_work}/planted")


async def test_no_host_pathname_socket_under_the_system_paths(sup: Supervisor) -> None:
    # Landlock below ABI 9 does not restrict connect() to pathname unix sockets: what a worker could reach is every
    # socket whose path it can name and whose mode lets uid 65534 in. The well-known ones must not be reachable.
    probe = _py(
        "import socket\nfound = []\nfor p in ('/run/dbus/system_bus_socket', '/var/run/docker.sock', "
        "'/run/docker.sock', '/run/systemd/private', '/run/systemd/journal/socket', '/dev/log', "
        "'/run/nscd/socket', '/var/run/nscd/socket', '/run/postgresql/.s.PGSQL.5432', "
        "'/tmp/.X11-unix/X0', '/run/containerd/containerd.sock'):\n"
        "    s = socket.socket(socket.AF_UNIX)\n    try:\n        s.connect(p)\n        found.append(p)\n"
        "    except OSError as e:\n        print(p, e.strerror)\nprint('reachable', found)\n"
        "sys.exit(0 if found else 1)"
    )
    await _assert_refused(sup, probe)


async def test_a_worker_cannot_offer_a_pathname_socket_to_another(sup: Supervisor) -> None:
    # Landlock below ABI 9 does not restrict connect() to pathname unix sockets and every worker is the same uid, so
    # a socket one worker listened on in its work folder would be reachable by another. No worker may create a
    # socket file anywhere (Landlock's MAKE_SOCK is never granted), so there is none to reach.
    beta_work = sup.runner("beta").spec.plan.workdir
    bind = _py("import socket\ns = socket.socket(socket.AF_UNIX)\ns.bind('svc.sock')\ns.listen(1)\nprint('listening')")
    out = await _assert_refused(sup, bind, "beta")
    assert "Permission denied" in out["stderr"], out
    assert not os.path.exists(f"{beta_work}/svc.sock")
    out = await _assert_refused(
        sup,
        _py("import socket, os\ns = socket.socket(socket.AF_UNIX)\ns.bind(os.environ['TMPDIR'] + '/x.sock')"),
        "alpha",
    )
    assert "Permission denied" in out["stderr"], out


_IPC_CREAT, _IPC_RMID = 0o1000, 0


async def test_sysv_ipc_is_no_channel_between_toolboxes_nor_to_the_host(sup: Supervisor) -> None:
    """SysV shared memory and message queues are not files: Landlock does not see them, and every worker has the
    same uid. Each worker has an IPC namespace of its own, so a key means nothing outside it."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    host_shm = libc.shmget(0x5A5A0002, 4096, _IPC_CREAT | 0o666)  # world-accessible, on the host
    host_msg = libc.msgget(0x5A5A0003, _IPC_CREAT | 0o666)
    assert host_shm >= 0 and host_msg >= 0, os.strerror(ctypes.get_errno())
    try:
        made = await _run(
            sup,
            _py("r = libc.shmget(0x5A5A0001, 4096, 0o1000 | 0o666)\nprint('made', r)\nsys.exit(0 if r >= 0 else 1)"),
            "alpha",
        )
        assert made["exitCode"] == 0, made  # a worker may use SysV IPC within its own namespace
        await _assert_refused(sup, _syscall_must_fail("libc.shmget(0x5A5A0001, 0, 0)"), "beta")
        await _assert_refused(sup, _syscall_must_fail("libc.shmget(0x5A5A0002, 0, 0)"), "alpha")
        await _assert_refused(sup, _syscall_must_fail("libc.msgget(0x5A5A0003, 0)"), "beta")
        assert libc.shmget(0x5A5A0001, 0, 0) == -1  # and the worker's segment is not on the host
    finally:
        libc.shmctl(host_shm, _IPC_RMID, None)
        libc.msgctl(host_msg, _IPC_RMID, None)
