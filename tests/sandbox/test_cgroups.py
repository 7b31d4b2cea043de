"""Cgroups per worker: the pure layout detection and plan (any machine), then real workers in real groups.

The real tests need root and the pids and memory controllers (v2, or v1 as on the machine these were written on);
the probe :func:`sandbox._cgroup_plan.read_layout` says which, and the tests skip with its reason when there is none.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import trio

from sandbox import CgroupLayout, ConfinementError, plan_cgroup, read_layout
from sandbox._cgroup_plan import CGROUP_DIR, detect_layout
from supervisor._errors import PolicyRefused
from supervisor._supervisor import Supervisor
from supervisor.config._loader import load_config
from supervisor.plan._worker_limits import NPROC_BACKSTOP_FACTOR
from supervisor.plan._worker_plan import PlanInputs, plan_worker
from tests._policies import agent, system_toolbox, write_policy
from tests.supervisor.plan._facts import facts_as

V1_MOUNTINFO = """\
30 25 0:26 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755
31 30 0:27 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
32 30 0:28 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
33 30 0:29 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
V1_CGROUP = "8:pids:/\n4:memory:/jobs/abc\n0::/\n"


# --- the pure part ----------------------------------------------------------------------------------------------


def test_v1_groups_go_below_the_supervisors_own_group_in_each_hierarchy() -> None:
    layout, reason = detect_layout(V1_MOUNTINFO, V1_CGROUP, lambda d: "hugetlb\n")
    assert reason == ""
    assert layout == CgroupLayout(
        "v1", f"/sys/fs/cgroup/pids/{CGROUP_DIR}", f"/sys/fs/cgroup/memory/jobs/abc/{CGROUP_DIR}"
    )


def test_v2_is_preferred_when_it_offers_both_controllers() -> None:
    mountinfo = "33 30 0:29 / /sys/fs/cgroup rw,relatime - cgroup2 cgroup2 rw\n"
    layout, _ = detect_layout(
        mountinfo,
        "0::/system.slice/as.service\n",
        lambda d: "cpu memory pids\n" if d == "/sys/fs/cgroup/system.slice/as.service" else None,
    )
    assert layout is not None and layout.version == "v2"
    assert layout.pids_base == layout.memory_base == f"/sys/fs/cgroup/system.slice/as.service/{CGROUP_DIR}"
    plan = plan_cgroup(layout, pids_max=10, memory_bytes=1 << 20)
    assert plan is not None
    inst = plan.instance("tb", "1")
    group = f"/sys/fs/cgroup/system.slice/as.service/{CGROUP_DIR}/tb-1"
    assert inst.dirs == (group,) and inst.procs_files == (f"{group}/cgroup.procs",)
    assert (f"{group}/memory.oom.group", "1", True) in inst.writes
    assert inst.enable[0] == ("/sys/fs/cgroup/system.slice/as.service/cgroup.subtree_control", "+pids +memory")


def test_v2_without_the_controllers_falls_back_to_v1_or_says_why() -> None:
    layout, _ = detect_layout(V1_MOUNTINFO, V1_CGROUP, lambda d: "hugetlb")
    assert layout is not None and layout.version == "v1"
    only_v2 = "33 30 0:29 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
    layout, reason = detect_layout(only_v2, "0::/\n", lambda d: "cpu io")
    assert layout is None
    assert "offers cpu io" in reason and "no cgroup v1 hierarchy with pids and memory" in reason


def test_v1_instance_limits_memory_and_swap_alike_and_names_are_safe() -> None:
    layout, _ = detect_layout(V1_MOUNTINFO, V1_CGROUP, lambda d: None)
    assert layout is not None
    plan = plan_cgroup(layout, pids_max=32, memory_bytes=64 << 20)
    assert plan is not None
    inst = plan.instance("../evil name", "7")
    assert all(os.path.basename(d) == ".._evil_name-7" for d in inst.dirs)
    files = {os.path.basename(f): (v, req) for f, v, req in inst.writes}
    assert files == {
        "pids.max": ("32", True),
        "memory.limit_in_bytes": (str(64 << 20), True),
        "memory.memsw.limit_in_bytes": (str(64 << 20), False),
    }
    assert plan_cgroup(layout, pids_max=None, memory_bytes=None) is None
    with pytest.raises(ConfinementError):
        plan_cgroup(layout, pids_max=0, memory_bytes=None)


V1_CPU_MOUNTINFO = V1_MOUNTINFO + "34 30 0:30 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"


def test_a_cpu_limit_is_a_cfs_quota_per_100ms_period_in_v1_and_v2() -> None:
    layout, _ = detect_layout(V1_CPU_MOUNTINFO, V1_CGROUP + "3:cpu,cpuacct:/jobs\n", lambda d: None)
    assert layout is not None and layout.cpu_base == f"/sys/fs/cgroup/cpu,cpuacct/jobs/{CGROUP_DIR}"
    plan = plan_cgroup(layout, pids_max=None, memory_bytes=None, cpus=0.5)
    assert plan is not None and plan.cpu_quota_us == 50_000 and "cpus=0.5" in plan.describe()
    inst = plan.instance("tb", "1")
    cpu = f"/sys/fs/cgroup/cpu,cpuacct/jobs/{CGROUP_DIR}/tb-1"
    assert inst.dirs == (cpu,)
    assert inst.writes == ((f"{cpu}/cpu.cfs_period_us", "100000", True), (f"{cpu}/cpu.cfs_quota_us", "50000", True))
    v2, _ = detect_layout(
        "33 30 0:29 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
        "0::/s\n",
        lambda d: "cpu memory pids" if d == "/sys/fs/cgroup/s" else None,
    )
    assert v2 is not None and v2.cpu_base == v2.pids_base
    inst = plan_cgroup(v2, pids_max=8, memory_bytes=None, cpus=2).instance("tb", "1")  # type: ignore[union-attr]
    assert (f"{v2.pids_base}/tb-1/cpu.max", "200000 100000", True) in inst.writes
    assert inst.enable[0][1] == "+pids +memory +cpu"


def test_a_cpu_limit_needs_the_controller_and_a_real_share() -> None:
    layout, _ = detect_layout(V1_MOUNTINFO, V1_CGROUP, lambda d: None)  # pids and memory only
    assert layout is not None and layout.cpu_base == ""
    with pytest.raises(ConfinementError, match="no cpu controller"):
        plan_cgroup(layout, pids_max=8, memory_bytes=None, cpus=1)
    cpu_layout, _ = detect_layout(V1_CPU_MOUNTINFO, V1_CGROUP + "3:cpu,cpuacct:/\n", lambda d: None)
    assert cpu_layout is not None
    for bad in (0, 0.001, -1, True):
        with pytest.raises(ConfinementError, match="cpus"):
            plan_cgroup(cpu_layout, pids_max=None, memory_bytes=None, cpus=bad)  # type: ignore[arg-type]


def _config(tmp: Path, **policy: object) -> object:
    return load_config(str(write_policy(tmp, {"tester": agent(builtinToolboxes=[system_toolbox()])}, **policy)))


def _plan(config: object, layout: CgroupLayout | None) -> object:
    (tb,) = config.toolboxes()  # type: ignore[attr-defined]
    facts = facts_as(config, "/st", landlock_abi=7, cgroup_layout=layout, cgroup_problem="no controllers")  # type: ignore[arg-type]
    return plan_worker(config, tb, PlanInputs(facts, "/usr/bin/python3", "/rt"))  # type: ignore[arg-type]


def test_strict_refuses_without_cgroups_permissive_warns(sandbox_tmp: Path) -> None:
    with pytest.raises(PolicyRefused, match=r"need a cgroup of its own.*no controllers"):
        _plan(_config(sandbox_tmp), None)
    spec = _plan(_config(sandbox_tmp, strict=False, landlock_min_abi=0), None)
    assert spec.cgroup is None and any("no cgroup (no controllers)" in w for w in spec.warnings)  # type: ignore
    # Without the two limits nothing needs a cgroup, even under strict.
    spec = _plan(_config(sandbox_tmp, limits={"processes": None, "memory_bytes": None}), None)
    assert spec.cgroup is None  # type: ignore[attr-defined]


def test_the_plan_carries_the_limits_and_nproc_becomes_a_backstop(sandbox_tmp: Path) -> None:
    layout, _ = detect_layout(V1_MOUNTINFO, V1_CGROUP, lambda d: None)
    spec = _plan(_config(sandbox_tmp, limits={"processes": 40, "memory_bytes": "96MiB"}), layout)
    assert spec.cgroup.pids_max == 40 and spec.cgroup.memory_bytes == 96 << 20  # type: ignore[attr-defined]
    assert spec.cgroup.required  # type: ignore[attr-defined]
    assert spec.plan.rlimits.processes == 40 * NPROC_BACKSTOP_FACTOR  # type: ignore[attr-defined]
    assert "pids.max=40" in spec.report["cgroup"]  # type: ignore[attr-defined]


def test_strict_refuses_a_cpu_limit_it_cannot_enforce_permissive_warns(sandbox_tmp: Path) -> None:
    no_cpu, _ = detect_layout(V1_MOUNTINFO, V1_CGROUP, lambda d: None)
    with pytest.raises(PolicyRefused, match=r"limits\.cpus needs the cgroup cpu controller"):
        _plan(_config(sandbox_tmp, limits={"cpus": 1}), no_cpu)
    spec = _plan(_config(sandbox_tmp, strict=False, landlock_min_abi=0, limits={"cpus": 1}), no_cpu)
    assert spec.cgroup.cpu_quota_us is None  # type: ignore[attr-defined]
    assert any("limits.cpus is not enforced" in w for w in spec.warnings)  # type: ignore[attr-defined]
    with_cpu, _ = detect_layout(V1_CPU_MOUNTINFO, V1_CGROUP + "3:cpu,cpuacct:/\n", lambda d: None)
    spec = _plan(_config(sandbox_tmp, limits={"cpus": 0.25}), with_cpu)
    assert spec.cgroup.cpu_quota_us == 25_000 and "cpus=0.25" in spec.report["cgroup"]  # type: ignore[attr-defined]


# --- real workers in real groups ---------------------------------------------------------------------------------

LAYOUT, WHY_NOT = read_layout()
needs_cgroups = pytest.mark.skipif(LAYOUT is None, reason=f"no usable cgroups here: {WHY_NOT}")


def _pids_events_max(group: str) -> int:
    for line in Path(group, "pids.events").read_text().splitlines():
        key, _, value = line.partition(" ")
        if key == "max":
            return int(value)
    raise AssertionError(f"no max in {group}/pids.events")


def _oom_kills(group: str) -> int:
    if Path(group, "memory.events").exists():  # v2
        text = Path(group, "memory.events").read_text()
    else:
        text = Path(group, "memory.oom_control").read_text()
    return int(dict(line.split() for line in text.splitlines()).get("oom_kill", 0))


def _group(sup: Supervisor, toolbox: str, controller: str) -> str:
    worker = sup.runner(toolbox).worker
    assert worker is not None and worker.cgroup is not None
    (group,) = [d for d in worker.cgroup.dirs if f"/{controller}/" in d or len(worker.cgroup.dirs) == 1]
    return group


def _project(root: Path, name: str) -> tuple[Path, dict]:
    project = root / name
    project.mkdir()
    os.chown(project, 65534, 65534)
    return project, {"fsbPredicate": {"tag": "DirectoryRecursive", "contents": str(project)}, "fsbName": name}


FORK_BOMB = """
import os, sys
full, release = sys.argv[1], sys.argv[2]
children, err = 0, None
r, w = os.pipe()
while children < 10000:  # bounded: a breach shows as 10000, never as a hung machine
    try:
        pid = os.fork()
    except OSError as exc:
        err = exc.errno
        break
    if pid == 0:
        os.close(w)
        os.read(r, 1)  # hold the slot until the parent lets go
        os._exit(0)
    children += 1
with open(full, "w") as f:
    f.write(f"{children} {err}")
with open(release) as f:
    f.read()
os.close(w)
print(children, err)
"""


@pytest.mark.root
@needs_cgroups
async def test_a_fork_bomb_hits_its_own_pids_max_while_another_toolbox_keeps_working(sandbox_tmp: Path) -> None:
    bomb_dir, bomb_fsb = _project(sandbox_tmp, "bomb")
    (bomb_dir / "bomb.py").write_text(FORK_BOMB)
    for fifo in ("full", "release"):
        os.mkfifo(bomb_dir / fifo)
        os.chown(bomb_dir / fifo, 65534, 65534)
    _, other_fsb = _project(sandbox_tmp, "other")
    toolboxes = [
        system_toolbox("bomb", capabilities=["execute-command"], FileSandbox=bomb_fsb),
        system_toolbox("other", capabilities=["execute-command"], FileSandbox=other_fsb),
    ]
    policy = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=toolboxes)},
        landlock_min_abi=6,
        toolboxes={"bomb": {"limits": {"processes": 24}}, "other": {"limits": {"processes": 24}}},
    )
    async with Supervisor.open(policy) as sup:
        bomb_group, other_group = _group(sup, "bomb", "pids"), _group(sup, "other", "pids")
        assert Path(bomb_group, "pids.max").read_text().strip() == "24"
        results: dict[str, object] = {}

        async def bomb() -> None:
            results["bomb"] = await sup.call(
                "system_bomb_execute_command",
                {"command": f"python3 {bomb_dir}/bomb.py {bomb_dir}/full {bomb_dir}/release"},
            )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(bomb)
            with trio.fail_after(30):
                full = await trio.to_thread.run_sync(lambda: (bomb_dir / "full").read_text(), abandon_on_cancel=True)
            children, err = full.split()
            # The bomb holds every slot of its group now; the other toolbox starts processes and threads.
            assert int(children) < 24 and err == str(errno.EAGAIN), f"BREACH: the bomb got {children} children"
            assert _pids_events_max(bomb_group) >= 1
            other = await sup.call(
                "system_other_execute_command",
                {
                    "command": 'for i in 1 2 3 4 5 6 7 8; do (echo $i) & done; wait; python3 -c "import threading; '
                    't = [threading.Thread(target=print) for _ in range(8)]; [x.start() for x in t]"'
                    " >/dev/null; echo ok"
                },
            )
            assert other.structured["exitCode"] == 0 and other.structured["stdout"].endswith("ok\n"), other.data
            assert _pids_events_max(other_group) == 0
            await trio.to_thread.run_sync(lambda: (bomb_dir / "release").write_text("go"))
        out = results["bomb"].structured  # type: ignore[attr-defined]
        assert out["exitCode"] == 0 and out["stdout"].startswith(children), out


HOG = "python3 -c \"b = b'x' * (400 << 20); print('BREACH: allocated', len(b))\""


@pytest.mark.root
@needs_cgroups
async def test_a_memory_hog_is_killed_in_its_group_and_the_toolbox_keeps_serving(sandbox_tmp: Path) -> None:
    toolboxes = [
        system_toolbox("hog", capabilities=["execute-command"]),
        system_toolbox("calm", capabilities=["execute-command"]),
    ]
    policy = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=toolboxes)},
        landlock_min_abi=6,
        limits={"address_space_bytes": "2GiB", "memory_bytes": "128MiB"},
    )
    async with Supervisor.open(policy) as sup:
        group = _group(sup, "hog", "memory")
        before = _oom_kills(group)
        calm_before = _oom_kills(_group(sup, "calm", "memory"))
        out = (await sup.call("system_hog_execute_command", {"command": HOG})).structured
        assert out is not None and "BREACH" not in out["stdout"], out
        assert out["exitCode"] in (137, -9), out  # SIGKILL from the OOM killer, not a MemoryError
        assert _oom_kills(group) > before
        assert _oom_kills(_group(sup, "calm", "memory")) == calm_before
        again = await sup.call("system_hog_execute_command", {"command": "echo alive"})
        assert again.structured["stdout"] == "alive\n", again.data


@pytest.mark.root
@needs_cgroups
async def test_the_group_goes_away_with_its_worker_and_a_restart_gets_a_new_one(sandbox_tmp: Path) -> None:
    policy = write_policy(sandbox_tmp, {"tester": agent(builtinToolboxes=[system_toolbox()])}, landlock_min_abi=6)
    async with Supervisor.open(policy) as sup:
        runner = sup.runner("system")
        first = runner.worker
        assert first is not None and first.cgroup is not None
        dirs = first.cgroup.dirs
        assert all(os.path.isdir(d) for d in dirs)
        for d in dirs:  # the launcher and the worker are in the group (the forwarder and PID 1 of its namespace)
            assert first.pid is not None and str(first.pid) in Path(d, "cgroup.procs").read_text().split()
        await first.kill("killed by the test")
        assert not any(os.path.exists(d) for d in dirs)
        result = await sup.call("system_system_date", {})  # waits for the restart
        assert result.status == "passed", result.data
        second = runner.worker
        assert second is not first and second is not None and second.cgroup is not None
        later = second.cgroup.dirs
        assert all(os.path.isdir(d) for d in later) and set(later).isdisjoint(dirs)
    assert not any(os.path.exists(d) for d in later)


@pytest.mark.root
@needs_cgroups
async def test_the_worker_cannot_leave_or_loosen_its_group(sandbox_tmp: Path) -> None:
    policy = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=[system_toolbox(capabilities=["execute-command"])])},
        landlock_min_abi=6,
    )
    async with Supervisor.open(policy) as sup:
        group = _group(sup, "system", "pids")
        parent = os.path.dirname(os.path.dirname(group))
        for command in (
            f"echo $$ > {parent}/cgroup.procs",
            f"echo max > {group}/pids.max",
            f"mkdir {group}/sub",
            "echo $$ > /sys/fs/cgroup/unified/cgroup.procs",
            "unshare -U -r -m -C sh -c 'mount -t cgroup2 none /tmp && echo mounted'",
        ):
            out = (await sup.call("system_system_execute_command", {"command": command})).structured
            assert out["exitCode"] != 0, f"BREACH: {command!r}: {out}"
        inside = (await sup.call("system_system_execute_command", {"command": "cat /proc/self/cgroup"})).structured
        assert os.path.basename(group) in inside["stdout"]
        assert Path(group, "pids.max").read_text().strip() == "64"


def test_stale_groups_are_the_empty_ones_whose_launcher_is_gone() -> None:
    from sandbox import CgroupLayout
    from sandbox._cgroups import stale_groups

    layout = CgroupLayout("v1", "/cg/pids/agents-supervise", "/cg/memory/agents-supervise")
    procs = {
        "/cg/pids/agents-supervise/a-10-x/cgroup.procs": "",
        "/cg/memory/agents-supervise/a-10-x/cgroup.procs": "",
        "/cg/pids/agents-supervise/b-20-y/cgroup.procs": "55\n",  # still has a process
        "/cg/pids/agents-supervise/c-30-z/cgroup.procs": "",
    }  # its launcher is alive: being set up
    found = stale_groups(
        layout, names=["a-10-x", "b-20-y", "c-30-z", "not-a-group"], procs_of=procs.get, alive=lambda pid: pid == 30
    )
    assert found == ["/cg/memory/agents-supervise/a-10-x", "/cg/pids/agents-supervise/a-10-x"]


@pytest.mark.root
@needs_cgroups
async def test_a_supervisor_removes_groups_a_killed_supervisor_left(sandbox_tmp: Path) -> None:
    assert LAYOUT is not None
    dead_pid = 2**22 + 7  # above pid_max: no process has it
    stale = [os.path.join(base, f"system-{dead_pid}-abc123") for base in {LAYOUT.pids_base, LAYOUT.memory_base}]
    for d in stale:
        os.makedirs(d)
    policy = write_policy(sandbox_tmp, {"tester": agent(builtinToolboxes=[system_toolbox()])}, landlock_min_abi=6)
    async with Supervisor.open(policy) as sup:
        assert not any(os.path.exists(d) for d in stale)
        assert (await sup.call("system_system_date", {})).status == "passed"


BURN = (
    'python3 -c "import os, time\nt = time.monotonic()\nwhile time.monotonic() - t < 1.5: pass\n'
    'u = os.times(); print(u.user + u.system)"'
)


def _throttled(group: str) -> int:
    stat = dict(line.split() for line in Path(group, "cpu.stat").read_text().splitlines())
    return int(stat["nr_throttled"])


@pytest.mark.root
@needs_cgroups
@pytest.mark.skipif(LAYOUT is None or not LAYOUT.cpu_base, reason="no cgroup cpu controller here")
async def test_a_cpu_hog_gets_only_its_share_of_the_cpu(sandbox_tmp: Path) -> None:
    policy = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=[system_toolbox("hog", capabilities=["execute-command"])])},
        landlock_min_abi=6,
        limits={"cpus": 0.2},
    )
    async with Supervisor.open(policy) as sup:
        group = _group(sup, "hog", "cpu")
        assert Path(group, "cpu.cfs_quota_us").read_text().strip() == "20000"
        before = _throttled(group)
        out = (await sup.call("system_hog_execute_command", {"command": BURN})).structured
        assert out is not None and out["exitCode"] == 0, out
        used = float(out["stdout"])
        # 1.5 s of wall time at 0.2 CPU: about 0.3 s of CPU (unlimited, a busy loop takes about 1.5 s)
        assert used < 0.6, f"BREACH: the loop got {used:.2f} s of CPU in 1.5 s with a 0.2 CPU limit"
        assert _throttled(group) > before
