#!/opt/agents-supervise/venv/bin/python
"""Floors of the spawn and start rows of ``scripts/bench`` (rows 7 and 8): what confining a worker and starting a
zygote cost with nothing of ours around them.

- ``floor_confine.py spawns N`` (needs root), with a worker's real ``ConfinementPlan`` on stdin (the frame the
  launcher reads, ``supervisor/workers/_launch.py:plan_frame``; ``scripts/bench`` takes it from a running
  supervisor): this process (a fresh interpreter with only ``sandbox`` imported) makes every plan beforehand, as
  the launcher would make them (the namespaces, the private view from the plan's rules, the seccomp filters, the
  Landlock ruleset), then N times, as the zygote spawns a worker: makes the worker's cgroup with its limits (when
  the worker's cgroup plan follows the frame on stdin, pickled), forks a bare child born PID 1 of a new PID
  namespace (``unshare(CLONE_NEWPID)`` before the fork, ``setns`` back after), which joins the cgroup, unshares the
  plan's other namespaces (net with ``lo`` up, IPC, UTS, mount), sets its host name, builds and pivots into the
  private view, sets ``no_new_privs``, loads the seccomp filters, restricts itself with Landlock, drops to the
  plan's uid, gid and groups, and writes one byte back; the cgroup is removed once the child is reaped. It prints
  the times from each fork to that byte, in seconds, as a JSON list. Not included: the plan's transfer, the checks
  the launcher makes after each step, rlimits, the toolbox's start and its hello.
- ``floor_confine.py zygote MODULE...``: the zygote's own start, an interpreter started as the supervisor starts
  the zygote (``-I -B``) that imports the launcher's step modules and ``MODULE...`` (the modules the supervisor has
  its zygote preload), freezes them out of the collector's way and says ready; prints the seconds from the start
  to that line.

Row 7's floor for N toolboxes is the zygote's start plus N confinements spread over the cores (:func:`start_floor`).
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

__all__ = ["confine_times", "start_floor", "worker_inputs", "zygote_start"]


def _spawns(count: int) -> list[float]:
    import grp
    import pwd

    from sandbox import (
        READ,
        WRITE,
        FsRule,
        create_cgroup,
        host_mount_points,
        landlock_abi,
        plan_view,
        probe_host,
        remove_cgroup,
        view_files,
    )
    from sandbox._landlock import RESTRICT_SELF_LOG_NEW_EXEC_ON, apply_ruleset, plan_ruleset
    from sandbox._launcher import read_plan
    from sandbox._netns import (
        enter_namespaces,
        plan_namespaces,
        restore_pid_namespace_for_children,
        unshare_pid_namespace_for_children,
    )
    from sandbox._private_files import enter_private_mounts
    from sandbox._privileges import drop_privileges, set_no_new_privs
    from sandbox._seccomp import apply_seccomp, plan_seccomp, plan_seccomp_log
    from sandbox._view import apply_view, set_hostname

    plan = read_plan(0)
    rest = b""
    while chunk := os.read(0, 1 << 16):
        rest += chunk
    cgroup = pickle.loads(rest) if rest else None  # a CgroupPlan, from the benchmark itself
    if plan.view is None or plan.uid is None or plan.gid is None:
        raise SystemExit("floor_confine: the plan has no private view or no uid: not a strict.yaml worker")
    if not plan.new_pidns:
        raise SystemExit("floor_confine: the plan asks for no PID namespace: not a strict.yaml worker")
    # the PID namespace is made by the fork itself (below), the others by the child
    namespaces = plan_namespaces(
        new_netns=plan.new_netns, new_pidns=False, new_ipcns=plan.new_ipcns, new_utsns=True, euid=0
    )

    def name(lookup, ident: int) -> str:  # type: ignore[no-untyped-def]
        try:
            return str(lookup(ident)[0])
        except (KeyError, OSError):
            return ""

    files = view_files(
        uid=plan.uid,
        gid=plan.gid,
        account=plan.account_name or f"agent-{plan.toolbox}"[:32],
        group=name(grp.getgrgid, plan.gid),
        home=plan.workdir,
        hostname=plan.view.hostname,
        resolv_conf=None,
        groups=[(g, name(grp.getgrgid, g)) for g in plan.groups],
    )
    view = plan_view(plan.fs_rules, plan.view, files, probe_host, host_mount_points())
    machine = os.uname().machine
    filters = [(plan_seccomp(machine, xattrs=plan.xattrs), False)]
    if plan.audit_denials:
        filters.append((plan_seccomp_log(machine), True))
    rules = [*plan.fs_rules, FsRule("/proc", READ), FsRule("/tmp", WRITE), FsRule("/dev/shm", WRITE)]
    ruleset = plan_ruleset(
        rules,
        landlock_abi(),
        tcp_connect_ports=plan.tcp_connect_ports,
        scope=True,
        restrict_flags=RESTRICT_SELF_LOG_NEW_EXEC_ON if plan.audit_denials else 0,
    )
    del pwd
    own_pidns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    samples: list[float] = []
    left = []
    for i in range(count):
        r, w = os.pipe()
        start = time.perf_counter()
        instance = cgroup.instance("floor", f"{os.getpid()}-{i}") if cgroup is not None else None
        procs: list[int] = []
        if instance is not None:  # made before the spawn, as the supervisor does; the child joins it itself
            create_cgroup(instance)
            procs = [os.open(path, os.O_WRONLY | os.O_CLOEXEC) for path in instance.procs_files]
        unshare_pid_namespace_for_children()  # the child is born PID 1 of a new PID namespace, as the zygote's
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.close(r)
                for fd in procs:
                    os.write(fd, b"0")
                enter_namespaces(namespaces)
                set_hostname(plan.view.hostname)
                enter_private_mounts(step="view")
                apply_view(view)
                set_no_new_privs()
                for program, log in filters:
                    apply_seccomp(program, machine, log=log)
                apply_ruleset(ruleset)
                drop_privileges(plan.uid, plan.gid, plan.groups)
                os.write(w, b"!")
                code = 0
            except BaseException as exc:
                print(f"floor_confine child: {type(exc).__name__}: {exc}", file=sys.stderr)
            finally:
                os._exit(code)
        restore_pid_namespace_for_children(own_pidns)
        for fd in procs:
            os.close(fd)
        os.close(w)
        got = os.read(r, 1)
        took = time.perf_counter() - start
        os.close(r)
        _, status = os.waitpid(pid, 0)
        if instance is not None and not remove_cgroup(instance):
            left.append(instance)
        if got != b"!" or os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"floor_confine: a confined child failed (exit status {status})")
        samples.append(took)
    for instance in left:  # the kernel releases reaped tasks after a grace period
        for _ in range(50):
            if remove_cgroup(instance):
                break
            time.sleep(0.02)
    return samples


def worker_inputs(sup: Any) -> tuple[bytes, Any, list[str]]:
    """From a running ``Supervisor``: its first worker's plan frame (as the launcher reads it) and cgroup plan, and
    the modules its zygote preloads: what the floors of rows 7-9 start from."""
    from supervisor.workers import preload_modules
    from supervisor.workers._launch import plan_frame

    spec = sup.runners[0].spec
    modules = preload_modules((r.spec.plan.entry, r.spec.kind) for r in sup.runners)
    return plan_frame(spec.plan), spec.cgroup, modules


def confine_times(plan_frame: bytes, count: int, cgroup: object = None) -> list[float]:
    """Run ``floor_confine.py spawns count`` with ``plan_frame`` (and the ``CgroupPlan`` ``cgroup``, unless
    ``None``) on its stdin; the times (seconds)."""
    out = subprocess.run(
        [sys.executable, __file__, "spawns", str(count)],
        input=plan_frame + (pickle.dumps(cgroup) if cgroup is not None else b""),
        capture_output=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    if out.returncode != 0:
        raise RuntimeError(f"floor_confine.py spawns failed: {out.stderr.decode()[-2000:]}")
    return [float(x) for x in json.loads(out.stdout)]


_ZYGOTE = (
    "import sys, gc, importlib; sys.path.insert(0, {root!r}); import sandbox._launcher as l; "
    "[importlib.import_module(m) for m in (*l.STEP_MODULES, *{modules!r})]; gc.freeze(); print('ready', flush=True)"
)


def zygote_start(modules: list[str]) -> float:
    """Seconds from starting an interpreter as the zygote is started until it imported ``modules`` and said ready."""
    start = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-I", "-B", "-c", _ZYGOTE.format(root=str(REPO), modules=tuple(modules))],
        stdout=subprocess.PIPE,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    took = time.perf_counter() - start
    process.wait()
    if line.strip() != b"ready":
        raise RuntimeError("the zygote floor did not start")
    return took


def start_floor(zygote_s: float, confine_s: float, toolboxes: int, cpus: int | None = None) -> float:
    """Row 7's floor: the zygote's start plus ``toolboxes`` confinements of ``confine_s`` each over the cores."""
    return zygote_s + toolboxes * confine_s / (cpus or os.cpu_count() or 1)


def main() -> None:
    if sys.argv[1:2] == ["spawns"]:
        sys.path.insert(0, str(REPO))
        print(json.dumps(_spawns(int(sys.argv[2]))))
    elif sys.argv[1:2] == ["zygote"]:
        print(f"{zygote_start(sys.argv[2:]):.4f}")
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
