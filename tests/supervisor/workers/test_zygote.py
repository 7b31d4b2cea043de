"""The zygote (``sandbox._zygote``) and its supervisor side (``_zygote_client.py``, ``_spawner.py``), for real.

Two levels: the zygote process driven by :class:`ZygoteSpawner` with one-shot plans (a confined ``sh`` through the
launcher's built-in ``exec_argv`` entry: exit statuses, signals, its fds and threads, the fallback), and whole
supervisors whose workers it forks (a worker cannot reach it, it is killed mid-run and the supervisor keeps
serving, a worker crash leaves it alone). The confinement of zygote-spawned workers as such is checked by the
escape tests (``tests/sandbox/test_escapes*.py``), which run under both spawn modes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import trio

from sandbox import (
    ConfinementPlan,
    FsRule,
    create_cgroup,
    landlock_abi,
    open_procs_files,
    plan_cgroup,
    python_runtime_paths,
    read_layout,
    remove_cgroup,
)
from supervisor._supervisor import Supervisor
from supervisor.workers._launch import launch, launcher_argv, plan_frame
from supervisor.workers._spawner import LauncherSpawner, Spawner, ZygoteSpawner
from tests._policies import agent, system_toolbox, write_policy
from tests._workers import nspid

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(landlock_abi() < 1, reason="the kernel has no Landlock"),
]

NOBODY = 65534
ENV = {"LANG": "C.UTF-8"}
CODE_ROOT = str(Path(__file__).resolve().parents[3])  # the checkout: imported as root, before confinement


def _plan(work: Path, script: str) -> ConfinementPlan:
    rules = [FsRule(p) for p in [*python_runtime_paths(), "/usr", "/lib", "/lib64", "/bin", "/etc"]]
    return ConfinementPlan(
        toolbox="probe",
        workdir=str(work),
        entry="sandbox._launcher:exec_argv",
        payload={"argv": ["/bin/sh", "-c", script]},
        uid=NOBODY,
        gid=NOBODY,
        fs_rules=(*rules, FsRule(str(work), "write"), FsRule("/dev/null", "write")),
        env={"PATH": "/usr/bin:/bin"},
    )


async def _run(spawner: Spawner, plan: ConfinementPlan) -> tuple[int, bytes, bytes]:
    """Spawn ``plan`` through ``spawner``, send its plan, read all output; (status, stdout, stderr)."""
    launched = await launch(launcher_argv(sys.executable, CODE_ROOT), plan, env=ENV, spawner=spawner)
    proc = launched.proc
    out: list[bytes] = []
    err: list[bytes] = []

    async def drain(stream: Any, into: list[bytes]) -> None:
        while chunk := await stream.receive_some(65536):
            into.append(chunk)

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(drain, proc.stdout, out)
            nursery.start_soon(drain, proc.stderr, err)
            await proc.stdin.send_all(plan_frame(launched.plan))
            await proc.stdin.aclose()
            status = await proc.wait()
    await proc.aclose()
    return status, b"".join(out), b"".join(err)


class Notes(list):  # type: ignore[type-arg]
    def __call__(self, event: str, fields: dict[str, Any]) -> None:
        self.append((event, fields))


@pytest.fixture
async def zygote(sandbox_tmp: Path) -> AsyncIterator[tuple[ZygoteSpawner, Notes]]:
    notes = Notes()
    spawner = ZygoteSpawner(sys.executable, CODE_ROOT, env=ENV, modules=["toolboxes._worker"], note=notes)
    async with trio.open_nursery() as nursery:
        await nursery.start(spawner.run)
        assert spawner.serving is not None, notes
        yield spawner, notes
        nursery.cancel_scope.cancel()


def _work(sandbox_tmp: Path) -> Path:
    work = sandbox_tmp / "work"
    work.mkdir(exist_ok=True)
    os.chown(work, NOBODY, NOBODY)
    return work


async def test_a_forked_child_is_confined_and_its_exit_is_reported(zygote: Any, sandbox_tmp: Path) -> None:
    """The child confines itself with the launcher's code (uid, no_new_privs, seccomp, no capabilities, its own PID
    namespace) and the zygote reports its exit code and, for a signal, minus the signal."""
    spawner, _ = zygote
    work = _work(sandbox_tmp)
    status, out, err = await _run(
        spawner, _plan(work, "id -u; grep -E '^(NoNewPrivs|Seccomp|CapEff):' /proc/self/status; echo $$; exit 3")
    )
    assert status == 3, err
    lines = out.decode().split()
    assert lines[0] == str(NOBODY)
    assert "NoNewPrivs:" in lines and lines[lines.index("NoNewPrivs:") + 1] == "1"
    assert lines[lines.index("Seccomp:") + 1] == "2"
    assert lines[lines.index("CapEff:") + 1] == "0000000000000000"
    assert int(lines[-1]) < 10  # the shell runs in a PID namespace of its own
    no_pidns = dataclasses.replace(_plan(work, "kill -TERM $$"), new_pidns=False)  # PID 1 would ignore it
    status, _, err = await _run(spawner, no_pidns)
    assert status == -signal.SIGTERM, err
    launched = await launch(launcher_argv(sys.executable, CODE_ROOT), _plan(work, "sleep 60"), env=ENV, spawner=spawner)
    await launched.proc.stdin.send_all(plan_frame(launched.plan))
    launched.proc.send_signal(signal.SIGKILL)  # the outer process: the PID namespace dies with it
    with trio.fail_after(30):
        assert await launched.proc.wait() == -signal.SIGKILL
    await launched.proc.aclose()


async def test_a_child_has_only_its_own_fds_and_the_zygote_one_thread(zygote: Any, sandbox_tmp: Path) -> None:
    """The fds of the child are its three pipes (the zygote's socket and wakeup pipe are closed before the plan is
    read); the zygote has one thread and its environment is the fixed one, not this process's."""
    spawner, _ = zygote
    work = _work(sandbox_tmp)
    status, out, err = await _run(spawner, _plan(work, "ls /proc/self/fd"))
    assert status == 0, err
    assert sorted(int(fd) for fd in out.split()) == [0, 1, 2, 3]  # 3: the directory ls reads
    pid = spawner.serving.pid  # type: ignore[union-attr]
    assert os.listdir(f"/proc/{pid}/task") == [str(pid)]
    with open(f"/proc/{pid}/environ", "rb") as f:
        assert dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if kv) == {b"LANG": b"C.UTF-8"}


@pytest.fixture
def cgroup() -> Any:
    """A real group of this host (pids, memory, cpu where there), removed afterwards."""
    layout, why = read_layout()
    if layout is None:
        pytest.skip(f"no cgroup layout here: {why}")
    plan = plan_cgroup(layout, pids_max=64, memory_bytes=256 << 20, cpus=1.0)
    assert plan is not None
    instance = plan.instance("test.zygote", f"{os.getpid()}-{secrets.token_hex(6)}")
    create_cgroup(instance)
    yield instance
    assert remove_cgroup(instance) or remove_cgroup(instance)


def _groups_of(text: str) -> set[str]:
    """The groups a ``/proc/<pid>/cgroup`` text names below ``agents-supervise``."""
    return {line.rsplit("/", 1)[1] for line in text.splitlines() if "/agents-supervise/" in line}


async def test_a_child_joins_its_cgroup_before_its_plan_runs_and_finds_the_plan_waiting(
    zygote: Any, sandbox_tmp: Path, cgroup: Any
) -> None:
    """Sent the group's ``cgroup.procs`` fds, the child joins the group itself, before it reads its plan: the first
    program the plan runs (the entry execs it: no toolbox code before) is in the group in every hierarchy. The plan
    was written into its stdin pipe before the spawn request: nothing is left for the supervisor to send."""
    spawner, _ = zygote
    work = _work(sandbox_tmp)
    plan = _plan(work, "cat /proc/self/cgroup")
    fds = open_procs_files(cgroup)
    try:
        launched = await launch(
            launcher_argv(sys.executable, CODE_ROOT),
            plan,
            env=ENV,
            spawner=spawner,
            cgroup_procs=fds,
            prewrite_plan=True,
        )
    finally:
        for fd in fds:
            os.close(fd)
    proc = launched.proc
    assert proc.cgroup_joined
    assert proc.stdin_sent == len(plan_frame(launched.plan)) and launched.unsent_plan() == b""
    await proc.stdin.aclose()  # nothing more goes to it
    out = b""
    with trio.fail_after(30):
        while chunk := await proc.stdout.receive_some(65536):
            out += chunk
        assert await proc.wait() == 0
    await proc.aclose()
    name = os.path.basename(cgroup.dirs[0])
    lines = [line for line in out.decode().splitlines() if "/agents-supervise/" in line]
    assert len(lines) == len(cgroup.dirs) and _groups_of(out.decode()) == {name}, out


async def test_a_child_that_cannot_join_its_cgroup_never_reads_its_plan(zygote: Any, sandbox_tmp: Path) -> None:
    """A ``cgroup.procs`` fd the child cannot write (here: a read-only one) ends it with the launcher's exit status
    for a failed confinement and one line saying why, before it reads its plan (which would print)."""
    spawner, _ = zygote
    work = _work(sandbox_tmp)
    readonly = os.open("/proc/self/cgroup", os.O_RDONLY | os.O_CLOEXEC)
    try:
        launched = await launch(
            launcher_argv(sys.executable, CODE_ROOT),
            _plan(work, "echo RAN"),
            env=ENV,
            spawner=spawner,
            cgroup_procs=[readonly],
            prewrite_plan=True,
        )
    finally:
        os.close(readonly)
    proc = launched.proc
    out, err = b"", b""
    with trio.fail_after(30):
        while chunk := await proc.stdout.receive_some(65536):
            out += chunk
        while chunk := await proc.stderr.receive_some(65536):
            err += chunk
        assert await proc.wait() == 78, err
    await proc.aclose()
    assert out == b""
    assert b"confinement failed: cannot join its cgroup: Bad file descriptor" in err, err


def _nss_modules() -> set[str]:
    """The name-service modules ``/etc/nsswitch.conf`` names for users and groups that exist here as a library."""
    try:
        lines = Path("/etc/nsswitch.conf").read_text().splitlines()
    except OSError:
        return set()
    names = set()
    for line in lines:
        key, _, services = line.partition(":")
        if key.strip() in ("passwd", "group"):
            names |= {w for w in services.split() if not w.startswith("[") and w not in ("files", "compat")}
    return {f"libnss_{n}.so.2" for n in names if any(Path(d, f"libnss_{n}.so.2").exists() for d in _LIB_DIRS)}


_LIB_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib64", "/lib64")


async def test_the_zygote_loads_the_name_service_modules_once_for_its_children(zygote: Any) -> None:
    """The name-service modules a lookup of an unknown uid goes through (a worker's own uid is unknown to the host's
    files) are loaded in the zygote, so its children share them instead of each loading them; it still has one
    thread and no fd but its own."""
    spawner, _ = zygote
    wanted = _nss_modules()
    if not wanted:
        pytest.skip("/etc/nsswitch.conf names no name-service module beyond the C library's own files")
    pid = spawner.serving.pid
    maps = Path(f"/proc/{pid}/maps").read_text()
    assert {m for m in wanted if m in maps} == wanted, wanted
    assert os.listdir(f"/proc/{pid}/task") == [str(pid)]


async def test_a_zygote_that_cannot_start_leaves_the_launcher(sandbox_tmp: Path) -> None:
    """A zygote whose code root is broken (its zygote module imports what is not there) exits at once: one
    ``zygote_fallback`` note says why and spawns still work, by the launcher. (A root that is merely empty would
    not do: an editable install of this project, as CI's venv has, finds ``sandbox`` after the root.)"""
    notes = Notes()
    broken = sandbox_tmp / "broken" / "sandbox"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("")
    (broken / "_zygote.py").write_text("import agents_supervise_no_such_module\n")
    spawner = ZygoteSpawner(sys.executable, str(broken.parent), env=ENV, modules=[], note=notes)
    async with trio.open_nursery() as nursery:
        await nursery.start(spawner.run)
        assert spawner.serving is None
        assert [event for event, _ in notes] == ["zygote_fallback"]
        reason = notes[0][1]["reason"]
        assert "could not start" in reason and "ModuleNotFoundError" in reason, reason
        assert spawner.fallback_reason is not None
        spawner.argv = launcher_argv(sys.executable, CODE_ROOT)  # a command it would serve, were it up
        status, out, _ = await _run(spawner, _plan(_work(sandbox_tmp), "echo launched"))
        assert (status, out) == (0, b"launched\n")
        nursery.cancel_scope.cancel()


async def test_a_zygote_spawn_is_faster_than_a_launcher_spawn(zygote: Any, sandbox_tmp: Path) -> None:
    """Same plan, same run, alternating: the median confined run through the zygote takes less time than through
    a fresh launcher (the figures themselves are the benchmark's, scripts/bench_scale.py)."""
    spawner, _ = zygote
    plan = _plan(_work(sandbox_tmp), "true")
    times: dict[str, list[float]] = {"zygote": [], "launcher": []}
    for _ in range(5):
        for name, which in (("zygote", spawner), ("launcher", LauncherSpawner())):
            begun = time.perf_counter()
            status, _, err = await _run(which, plan)
            times[name].append(time.perf_counter() - begun)
            assert status == 0, err
    assert statistics.median(times["zygote"]) < statistics.median(times["launcher"]), times


# -- whole supervisors --------------------------------------------------------------------------------------------


def _trace(sup: Supervisor) -> list[dict[str, Any]]:
    sup.trace.flush()
    assert sup.compiled.trace_path is not None
    with open(sup.compiled.trace_path) as f:
        return [json.loads(line) for line in f]


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


@pytest.fixture
async def sup(sandbox_tmp: Path) -> AsyncIterator[Supervisor]:
    toolboxes = [system_toolbox(name, capabilities=["execute-command", "date"]) for name in ("one", "two")]
    policy = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=toolboxes)},
        supervision={"spawn": "zygote", "restart_backoff_initial_s": 0.05},
    )
    async with Supervisor.open(policy) as s:
        yield s


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (from the kernel's children lists)."""
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        for task in os.listdir(f"/proc/{p}/task"):
            try:
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
            except FileNotFoundError:
                pass
    return pids


async def test_workers_are_forked_by_the_zygote_and_cannot_reach_it(sup: Supervisor) -> None:
    """Each worker's outer process is a child of the zygote; no process of a worker holds either end of the
    zygote's socket (checked on every fd of every process of its tree, as root), and from inside, the worker's
    shell finds no socket among its fds and no process of the host in its /proc."""
    zygote = sup.services.spawner.serving  # type: ignore[attr-defined]
    assert zygote is not None
    zygote_sockets = {os.readlink(f"/proc/{zygote.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{zygote.pid}/fd")}
    zygote_sockets = {link for link in zygote_sockets if link.startswith("socket:")}
    assert zygote_sockets  # its end of the pair; a worker has no socket at all (no bridge here)
    for runner in sup.runners:
        assert runner.worker is not None and runner.worker.pid is not None
        assert _ppid(runner.worker.pid) == zygote.pid
        for pid in _tree(runner.worker.pid):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                assert not link.startswith("socket:"), (pid, fd, link)
    result = await sup.call(
        "system_one_execute_command",
        {"command": f"ls -l /proc/self/fd; ls -d /proc/[0-9]*; kill -0 {zygote.pid} && echo REACHED"},
    )
    assert result.structured is not None, result.data
    out = result.structured["stdout"]
    assert "socket:" not in out and "REACHED" not in out, out
    assert f"/proc/{zygote.pid}\n" not in out


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(c) for c in f.read().split()]


async def test_a_zygote_worker_is_pid_1_of_its_namespace_with_no_keeper(sup: Supervisor) -> None:
    """The zygote's child is the worker itself, PID 1 of a PID namespace of its own: no outer process stands
    between them (the zygote made the namespace when it forked and went back to its own); the zygote's children
    are exactly the workers, and from inside the worker's shell is PID 1's child, PID 1 being the worker."""
    zygote = sup.services.spawner.serving  # type: ignore[attr-defined]
    assert zygote is not None and zygote.pid is not None
    workers = []
    for runner in sup.runners:
        assert runner.worker is not None and runner.worker.pid is not None
        pid = runner.worker.pid
        workers.append(pid)
        assert _ppid(pid) == zygote.pid
        assert nspid(pid) == [pid, 1]  # PID 1 in its own namespace, no keeper process above it
        assert os.readlink(f"/proc/{pid}/ns/pid") != os.readlink(f"/proc/{zygote.pid}/ns/pid")
    assert sorted(_children(zygote.pid)) == sorted(workers)
    own = os.readlink(f"/proc/{zygote.pid}/ns/pid")
    assert os.readlink(f"/proc/{zygote.pid}/ns/pid_for_children") == own == os.readlink("/proc/self/ns/pid")
    result = await sup.call(
        "system_one_execute_command", {"command": "grep -E '^(Pid|PPid):' /proc/$$/status; cat /proc/self/cgroup"}
    )
    assert result.structured is not None, result.data
    out = result.structured["stdout"]
    fields = dict(line.split(":\t") for line in out.splitlines() if line.startswith(("Pid:", "PPid:")))
    assert fields["Pid"] != "1" and int(fields["PPid"]) >= 1, fields  # the shell runs below the PID-1 worker
    one = sup.runner("one").worker
    assert one is not None and one.cgroup is not None  # the group it joined itself, before its plan was read
    assert _groups_of(out) == {os.path.basename(one.cgroup.dirs[0])}, out


async def test_a_killed_zygote_is_restarted_and_the_supervisor_keeps_serving(sup: Supervisor) -> None:
    """SIGKILL the zygote mid-run: its workers die with it, the supervisor notes the death, starts a new zygote and
    its workers come back (through the new zygote, or the launcher while it starts); calls are served again."""
    spawner: ZygoteSpawner = sup.services.spawner  # type: ignore[assignment]
    first = spawner.serving
    assert first is not None and first.pid is not None
    workers = [runner.worker for runner in sup.runners]
    os.kill(first.pid, signal.SIGKILL)
    with trio.fail_after(30):
        await first.dead.wait()
        for worker in workers:  # killed with the zygote (their parent-death signal)
            assert worker is not None
            await worker.dead.wait()
        result = await sup.call("system_two_execute_command", {"command": "echo alive"})  # waits for the restart
        second = await spawner.settled()
    assert result.structured is not None and result.structured["stdout"] == "alive\n", result.data
    assert second is not None and second is not first and second.pid != first.pid
    events = [r["event"] for r in _trace(sup) if r["event"].startswith("zygote_")]
    assert events[:3] == ["zygote_started", "zygote_died", "zygote_started"], events
    died = next(r for r in _trace(sup) if r["event"] == "zygote_died")
    assert "SIGKILL" in died["reason"] or "signal 9" in died["reason"], died


async def test_a_worker_crash_leaves_the_zygote_alone(sup: Supervisor) -> None:
    """SIGKILL a worker: the same zygote forks its replacement and the other toolbox's worker is untouched."""
    zygote = sup.services.spawner.serving  # type: ignore[attr-defined]
    one, two = sup.runners
    assert one.worker is not None and two.worker is not None
    victim, bystander = one.worker, two.worker.pid
    assert victim.pid is not None
    os.kill(victim.pid, signal.SIGKILL)
    with trio.fail_after(30):
        await victim.dead.wait()
        result = await sup.call("system_one_execute_command", {"command": "echo back"})  # waits for the restart
    assert result.structured is not None and result.structured["stdout"] == "back\n", result.data
    assert sup.services.spawner.serving is zygote  # type: ignore[attr-defined]
    assert one.worker is not victim and one.worker is not None and one.worker.pid is not None
    assert _ppid(one.worker.pid) == zygote.pid
    assert two.worker is not None and two.worker.pid == bystander


async def test_the_launcher_mode_spawns_fresh_interpreters(sandbox_tmp: Path) -> None:
    """``supervision.spawn: launcher``: no zygote, each worker's parent is the supervisor itself."""
    policy = write_policy(
        sandbox_tmp, {"tester": agent(builtinToolboxes=[system_toolbox()])}, supervision={"spawn": "launcher"}
    )
    async with Supervisor.open(policy) as s:
        assert isinstance(s.services.spawner, LauncherSpawner)
        (runner,) = s.runners
        assert runner.worker is not None and runner.worker.pid is not None
        assert _ppid(runner.worker.pid) == os.getpid()
        assert not [r for r in _trace(s) if r["event"].startswith("zygote_")]
        # the launcher keeps its outer process: the worker is its only child, PID 1 of the new namespace
        assert len(nspid(runner.worker.pid)) == 1
        (inner,) = _children(runner.worker.pid)
        assert nspid(inner)[1:] == [1]


def _confinement(pid: int) -> dict[str, Any]:
    """What the kernel shows, from outside, of how the process ``pid`` is confined: its credentials, capabilities,
    no_new_privs and seccomp, its limits, which namespaces differ from this process's, its mounts and its cgroups
    (the group names' unique part left out)."""
    with open(f"/proc/{pid}/status") as f:
        keys = ("NoNewPrivs", "Seccomp", "Seccomp_filters", "Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff")
        keys += ("CapBnd", "CapAmb")
        status = {k: v.strip() for k, _, v in (line.partition(":") for line in f) if k in keys}
    with open(f"/proc/{pid}/limits") as f:
        limits = f.read()
    namespaces = {
        ns: os.readlink(f"/proc/{pid}/ns/{ns}") != os.readlink(f"/proc/self/ns/{ns}")
        for ns in ("net", "pid", "ipc", "mnt", "uts", "user", "cgroup")
    }
    with open(f"/proc/{pid}/mountinfo") as f:
        mounts = sorted((line.split()[4], line.split(" - ")[1].split()[0]) for line in f)
    with open(f"/proc/{pid}/cgroup") as f:
        groups = sorted(line.strip().rsplit("-", 2)[0] for line in f if "agents-supervise" in line)
    return {"status": status, "limits": limits, "namespaces": namespaces, "mounts": mounts, "cgroups": groups}


async def test_a_zygote_worker_is_confined_exactly_as_a_launcher_worker(sandbox_tmp: Path) -> None:
    """The same policy under both spawn modes: the worker (PID 1 of its namespace: the zygote's child, or the
    launcher's) shows the same credentials, capabilities, seccomp filters, limits, namespaces, mounts of its view
    and cgroups, and the same answers from inside."""
    seen: dict[str, Any] = {}
    for mode in ("zygote", "launcher"):
        policy = write_policy(  # the same folders for both: the view's mounts name them
            sandbox_tmp,
            {"tester": agent(builtinToolboxes=[system_toolbox(capabilities=["execute-command", "date"])])},
            supervision={"spawn": mode},
        )
        async with Supervisor.open(policy) as s:
            (runner,) = s.runners
            assert runner.worker is not None and runner.worker.pid is not None
            pid = runner.worker.pid if mode == "zygote" else _children(runner.worker.pid)[0]
            assert nspid(pid)[1:] == [1], mode
            inside = await s.call(
                "system_system_execute_command",
                {"command": "id; ls /; grep -E '^(NoNewPrivs|Seccomp|Cap[A-Za-z]+):' /proc/self/status; ulimit -a"},
            )
            assert inside.structured is not None, inside.data
            seen[mode] = {**_confinement(pid), "inside": inside.structured["stdout"]}
    assert seen["zygote"]["cgroups"], seen["zygote"]  # the policy's limits put each worker in a group
    assert seen["zygote"]["namespaces"] == {
        "net": True,
        "pid": True,
        "ipc": True,
        "mnt": True,
        "uts": True,
        "user": False,
        "cgroup": False,
    }
    assert seen["zygote"] == seen["launcher"]
