"""The real launcher: confined workers checked from inside (probes) and outside (/proc), plus its refusals.

Each test stages the ``sandbox`` package into a ``sandbox_tmp`` directory (the checkout may be unreadable for uid
65534), starts ``python -s -B -m sandbox._launcher`` with only ``PYTHONPATH`` in its environment, writes the plan
frame and runs probes through the built-in entry ``sandbox._launcher:exec_argv``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgpack
import pytest

import sandbox
from sandbox import ConfinementPlan, FsRule, Rlimits, landlock_abi, python_runtime_paths

if TYPE_CHECKING:
    from collections.abc import Iterator

PYTHON = sys.executable  # the venv scripts/setup makes (readable by the sandbox uid)
NOBODY = 65534
SYSTEM_PATHS = ["/usr", "/lib", "/lib64", "/bin", "/etc"]
WAIT_S = 15.0

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(landlock_abi() < 1, reason="the kernel has no Landlock"),
]
needs_abi_4 = pytest.mark.skipif(landlock_abi() < 4, reason="TCP rules need Landlock ABI 4")
needs_abi_6 = pytest.mark.skipif(landlock_abi() < 6, reason="scoping needs Landlock ABI 6")


@dataclasses.dataclass
class Stage:
    """A staged tree: ``pkg`` (PYTHONPATH), ``work`` (owned by 65534), ``outside`` (readable, not in the rules)."""

    root: Path
    pkg: Path
    work: Path
    outside: Path
    open_dir: Path  # mode 0777 outside the rules: only Landlock stops a write

    def plan(self, argv: list[str], **changes: Any) -> ConfinementPlan:
        rules = [FsRule(p) for p in [*python_runtime_paths(), *SYSTEM_PATHS, str(self.pkg)]]
        rules += [FsRule(str(self.work), "write"), FsRule("/dev/null", "write")]
        plan = ConfinementPlan(
            toolbox="probe",
            workdir=str(self.work),
            entry="sandbox._launcher:exec_argv",
            payload={"argv": argv},
            uid=NOBODY,
            gid=NOBODY,
            fs_rules=tuple(rules),
            rlimits=Rlimits(
                address_space_bytes=1 << 30,
                cpu_seconds=30,
                open_files=64,
                file_size_bytes=1 << 20,
                processes=4096,
            ),
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(self.pkg), "HOME": str(self.work)},
        )
        return dataclasses.replace(plan, **changes)


@pytest.fixture
def stage(sandbox_tmp: Path) -> Stage:
    pkg = sandbox_tmp / "pkg"
    shutil.copytree(Path(sandbox.__file__).parent, pkg / "sandbox", ignore=shutil.ignore_patterns("__pycache__"))
    for d in (pkg, *pkg.rglob("*")):
        d.chmod(0o755 if d.is_dir() else 0o644)
    work = sandbox_tmp / "work"
    work.mkdir()
    os.chown(work, NOBODY, NOBODY)
    outside = sandbox_tmp / "outside"
    outside.mkdir()
    outside.chmod(0o755)
    (outside / "secret").write_text("secret")
    (outside / "secret").chmod(0o644)
    open_dir = sandbox_tmp / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    return Stage(sandbox_tmp, pkg, work, outside, open_dir)


def frame(plan: ConfinementPlan | bytes) -> bytes:
    body = plan if isinstance(plan, bytes) else msgpack.packb(plan.to_wire())
    return struct.pack(">I", len(body)) + body


def launcher_argv() -> list[str]:
    return [PYTHON, "-s", "-B", "-m", "sandbox._launcher"]


@pytest.fixture
def start(stage: Stage) -> Iterator[Any]:
    procs: list[subprocess.Popen[bytes]] = []

    def _start(plan: ConfinementPlan | bytes, **popen: Any) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            launcher_argv(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={"PYTHONPATH": str(stage.pkg)},
            cwd="/",
            **popen,
        )
        procs.append(proc)
        assert proc.stdin is not None
        proc.stdin.write(frame(plan))
        proc.stdin.flush()
        return proc

    yield _start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                try:
                    pipe.close()
                except BrokenPipeError:
                    pass


def children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(x) for x in f.read().split()]


def proc_status(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/status") as f:
        return {k: v.strip() for k, _, v in (line.partition(":") for line in f)}


def wait_gone(pids: list[int]) -> None:
    """Wait (pidfd, no polling) until every process in ``pids`` has exited; fail after WAIT_S."""
    fds = [os.pidfd_open(pid) for pid in pids]
    try:
        pending = set(fds)
        while pending:
            ready, _, _ = select.select(list(pending), [], [], WAIT_S)
            assert ready, f"processes still alive: {pids}"
            pending -= set(ready)
    finally:
        for fd in fds:
            os.close(fd)


PROBE = textwrap.dedent(
    """
    import errno, json, os, socket, sys
    from sandbox._netns import interface_is_up

    def attempt(fn):
        try:
            fn()
        except OSError as exc:
            return errno.errorcode.get(exc.errno, str(exc.errno))
        return "ok"

    def connect(port):
        with socket.socket() as s:
            s.settimeout(5)
            s.connect(("127.0.0.1", port))

    def bind():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))

    secret, open_dir, allowed_port, denied_port = sys.argv[1:5]
    out = {
        "status": open("/proc/self/status").read(),
        "ids": [os.getuid(), os.geteuid(), os.getgid(), os.getegid(), os.getgroups()],
        "pid": os.getpid(),
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "umask": os.umask(0),
        "interfaces": [name for _, name in socket.if_nameindex()],
        "lo_up": interface_is_up("lo"),
        "read_outside": attempt(lambda: open(secret).close()),
        "read_inside": attempt(lambda: open("/etc/hostname").close()),
        "write_outside": attempt(lambda: open(os.path.join(open_dir, "x"), "w").close()),
        "write_work": attempt(lambda: open("made-here", "w").close()),
        "connect_allowed_port": attempt(lambda: connect(int(allowed_port))),
        "connect_other_port": attempt(lambda: connect(int(denied_port))),
        "bind": attempt(bind),
    }
    print(json.dumps(out), flush=True)
    sys.stdin.read()
    """
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@needs_abi_4
def test_worker_is_confined_seen_from_inside_and_outside(stage: Stage, start: Any) -> None:
    allowed, denied = free_port(), free_port()
    argv = [PYTHON, "-c", PROBE, str(stage.outside / "secret"), str(stage.open_dir), str(allowed), str(denied)]
    proc = start(stage.plan(argv, tcp_connect_ports=(allowed,)))
    line = proc.stdout.readline()
    assert line, proc.communicate()[1].decode()
    inside = json.loads(line)
    (worker,) = children(proc.pid)

    # outside: namespaces, status and limits of the worker process
    assert os.readlink(f"/proc/{worker}/ns/net") != os.readlink("/proc/self/ns/net")
    assert os.readlink(f"/proc/{worker}/ns/pid") != os.readlink("/proc/self/ns/pid")
    with open(f"/proc/{worker}/net/dev") as f:
        assert [ln.split(":")[0].strip() for ln in f.readlines()[2:]] == ["lo"]
    status = proc_status(worker)
    assert status["NoNewPrivs"] == "1"
    assert int(status["CapEff"], 16) == 0
    assert int(status["CapBnd"], 16) == 0
    assert status["Uid"].split() == [str(NOBODY)] * 4
    assert status["Gid"].split() == [str(NOBODY)] * 4
    with open(f"/proc/{worker}/limits") as f:
        limits = {ln[:26].strip(): ln[26:].split()[:2] for ln in f.readlines()[1:]}
    assert limits["Max address space"] == [str(1 << 30)] * 2
    assert limits["Max cpu time"] == ["30", "31"]
    assert limits["Max open files"] == ["64", "64"]
    assert limits["Max file size"] == [str(1 << 20)] * 2
    assert limits["Max processes"] == ["4096", "4096"]
    assert limits["Max core file size"] == ["0", "0"]

    # inside: what the worker itself sees and may do
    assert "NoNewPrivs:\t1" in inside["status"]
    assert "CapEff:\t0000000000000000" in inside["status"]
    assert inside["ids"] == [NOBODY, NOBODY, NOBODY, NOBODY, []]
    assert inside["pid"] == 1
    assert inside["cwd"] == str(stage.work)
    inside["env"].pop("LC_CTYPE", None)  # the probe's own Python coerces the C locale (PEP 538)
    assert inside["env"] == stage.plan([]).env
    assert inside["umask"] == 0o077
    assert inside["interfaces"] == ["lo"]
    assert inside["lo_up"] is True
    assert inside["read_outside"] == "EACCES"
    assert inside["read_inside"] == "ok"
    assert inside["write_outside"] == "EACCES"
    assert not (stage.open_dir / "x").exists()
    assert inside["write_work"] == "ok"
    assert (stage.work / "made-here").stat().st_uid == NOBODY
    assert inside["connect_allowed_port"] == "ECONNREFUSED"  # allowed by Landlock, nobody listens in the netns
    assert inside["connect_other_port"] == "EACCES"  # refused by Landlock
    assert inside["bind"] == "EACCES"

    proc.stdin.close()
    assert proc.wait(WAIT_S) == 0
    assert proc.stdout.read() == b""


def test_grandchild_dies_when_the_worker_is_killed(stage: Stage, start: Any) -> None:
    proc = start(stage.plan(["/bin/sh", "-c", "sleep 1000 & echo started; wait"]))
    assert proc.stdout.readline() == b"started\n"
    (worker,) = children(proc.pid)
    (grandchild,) = children(worker)
    with open(f"/proc/{grandchild}/comm") as f:
        assert f.read().strip() in {"sh", "sleep"}
    os.kill(worker, signal.SIGKILL)
    wait_gone([grandchild, proc.pid])
    assert proc.wait(WAIT_S) == -signal.SIGKILL  # the launcher mirrors the worker's death
    assert proc.stdout.read() == b""  # EOF: no process of ours holds the pipe


def test_sigterm_to_the_launcher_reaches_the_worker(stage: Stage, start: Any) -> None:
    script = (
        "import signal, sys; signal.signal(signal.SIGTERM, lambda *a: sys.exit(5)); "
        "print('ready', flush=True); signal.pause()"
    )
    proc = start(stage.plan([PYTHON, "-c", script]))
    assert proc.stdout.readline() == b"ready\n"
    proc.terminate()
    assert proc.wait(WAIT_S) == 5


def test_launcher_and_worker_die_when_the_launchers_parent_dies(stage: Stage) -> None:
    plan = stage.plan(["/bin/sh", "-c", "echo ready; exec sleep 1000"])
    middle_code = textwrap.dedent(
        f"""
        import subprocess, sys
        p = subprocess.Popen({launcher_argv()!r}, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             env={{"PYTHONPATH": {str(stage.pkg)!r}}}, cwd="/")
        p.stdin.write(sys.stdin.buffer.read({len(frame(plan))}))
        p.stdin.flush()
        assert p.stdout.readline() == b"ready\\n"
        print(p.pid, flush=True)
        sys.stdin.read()
        """
    )
    middle = subprocess.Popen([PYTHON, "-c", middle_code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        middle.stdin.write(frame(plan))
        middle.stdin.flush()
        launcher = int(middle.stdout.readline())
        (worker,) = children(launcher)
        pidfds = [launcher, worker]
        middle.kill()
        wait_gone(pidfds)
    finally:
        middle.kill()
        middle.communicate()


def _refusal(proc: subprocess.Popen[bytes]) -> str:
    out, err = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 78, err
    assert out == b""
    lines = err.decode().splitlines()
    assert len(lines) == 1, err  # one line, no traceback
    return lines[0]


def test_plan_demanding_a_newer_landlock_abi_exits_78(stage: Stage, start: Any) -> None:
    line = _refusal(start(stage.plan(["/bin/true"], min_landlock_abi=99)))
    assert line == (
        f"agents-supervise launcher: probe: confinement failed: the kernel offers Landlock ABI {landlock_abi()}, "
        "the plan demands at least ABI 99"
    )


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"\xc1garbage", "not msgpack"),
        (msgpack.packb([1, 2]), "expected a map"),
        (msgpack.packb({"toolbox": "x", "workdir": "/", "entry": "m:f", "bogus": 1}), "unexpected keyword"),
        (msgpack.packb({"toolbox": "x", "workdir": "rel", "entry": "m:f", "uid": 1, "gid": 1}), "absolute"),
        (msgpack.packb({"toolbox": "x", "workdir": "/", "entry": "nocolon", "uid": 1, "gid": 1}), "module:function"),
        (
            msgpack.packb(
                {"toolbox": "x", "workdir": "/", "entry": "m:f", "uid": 1, "gid": 1, "new_pidns": False, "view": {}}
            ),
            "a private view needs new_pidns",
        ),
        (
            msgpack.packb(
                {"toolbox": "x", "workdir": "/", "entry": "m:f", "uid": 1, "gid": 1, "view": {"hostname": "a b"}}
            ),
            "view.hostname must be a host name",
        ),
    ],
)
def test_malformed_plan_exits_78_with_a_message(start: Any, body: bytes, reason: str) -> None:
    line = _refusal(start(body))
    assert line.startswith("agents-supervise launcher: ?: confinement failed: malformed plan: ")
    assert reason in line


def test_truncated_frame_exits_78(stage: Stage) -> None:
    proc = subprocess.run(
        launcher_argv(), input=struct.pack(">I", 100) + b"\x80", capture_output=True, env={"PYTHONPATH": str(stage.pkg)}
    )
    assert proc.returncode == 78
    assert proc.stderr.decode().strip().endswith("malformed plan: stdin closed after 1 of 100 bytes")


def test_root_without_a_uid_is_refused(stage: Stage, start: Any) -> None:
    line = _refusal(start(stage.plan(["/bin/true"], uid=None, gid=None)))
    assert line.endswith("refusing to run a worker as root: the plan names no uid")


def test_unloadable_entry_exits_78_and_missing_program_127(stage: Stage, start: Any) -> None:
    line = _refusal(start(stage.plan([], entry="sandbox._nowhere:main")))
    assert "cannot load entry 'sandbox._nowhere:main': ModuleNotFoundError" in line
    proc = start(stage.plan(["/no/such/program"]))
    _, err = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 127
    assert err.decode() == "agents-supervise launcher: exec_argv: /no/such/program: No such file or directory\n"


@needs_abi_6
def test_scoping_refuses_signals_and_abstract_sockets_outside_the_domain(stage: Stage, start: Any) -> None:
    """Without pid and net namespaces, only Landlock scoping (ABI 6) stands between the worker and these."""
    same_uid = subprocess.Popen(["/bin/sleep", "1000"], user=NOBODY, group=NOBODY, extra_groups=[])
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    name = f"\0agents-supervise-test-{os.getpid()}"
    listener.bind(name)
    listener.listen()
    try:
        code = textwrap.dedent(
            """
            import errno, os, socket, sys
            try:
                os.kill(int(sys.argv[1]), 0)
                sig = "ok"
            except OSError as exc:
                sig = errno.errorcode[exc.errno]
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(sys.argv[2].replace("@", "\\0", 1))
                uds = "ok"
            except OSError as exc:
                uds = errno.errorcode[exc.errno]
            print(sig, uds)
            """
        )
        plan = stage.plan([PYTHON, "-c", code, str(same_uid.pid), "@" + name[1:]], new_netns=False, new_pidns=False)
        proc = start(plan)
        out, err = proc.communicate(timeout=WAIT_S)
        assert proc.returncode == 0, err
        assert out.decode().split() == ["EPERM", "EPERM"]
    finally:
        listener.close()
        same_uid.kill()
        same_uid.wait()


def test_non_root_launcher_enters_a_user_namespace_for_its_netns(stage: Stage, start: Any) -> None:
    code = "import os, socket; print(os.getuid(), [n for _, n in socket.if_nameindex()], os.getpid())"
    plan = stage.plan([PYTHON, "-c", code], uid=None, gid=None)
    proc = start(plan, user=NOBODY, group=NOBODY, extra_groups=[])
    out, err = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 0, err
    assert out.decode().split(maxsplit=1) == [str(NOBODY), "['lo'] 1\n"]


def test_exec_argv_refuses_a_payload_without_argv(stage: Stage, start: Any) -> None:
    proc = start(dataclasses.replace(stage.plan([]), payload={}))
    _, err = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 64
    assert b"payload needs 'argv'" in err


@needs_abi_4
def test_bridge_sockets_open_inside_the_namespace_and_are_the_only_way_out(stage: Stage, start: Any) -> None:
    from sandbox._bridge import receive_bridge_nowait

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    code = textwrap.dedent(
        """
        import errno, socket, sys
        with socket.create_connection(("127.0.0.1", 3128), timeout=5) as s:
            s.sendall(b"through the bridge")
        s = socket.socket()
        try:
            s.connect(("127.0.0.1", 80))
            print("ok")
        except OSError as exc:
            print(errno.errorcode[exc.errno])
        """
    )
    plan = stage.plan([PYTHON, "-c", code], bridge=True, bridge_fd=theirs.fileno(), tcp_connect_ports=(3128, 53))
    try:
        proc = start(plan, pass_fds=[theirs.fileno()])
        theirs.close()
        ours.settimeout(WAIT_S)
        bridge = receive_bridge_nowait(ours)
        try:
            bridge.proxy.settimeout(WAIT_S)
            conn, _ = bridge.proxy.accept()
            with conn:
                conn.settimeout(WAIT_S)
                assert conn.recv(100) == b"through the bridge"
        finally:
            bridge.close()
        out, err = proc.communicate(timeout=WAIT_S)
        assert proc.returncode == 0, err
        assert out == b"EACCES\n"
    finally:
        ours.close()
        theirs.close()
