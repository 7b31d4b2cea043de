"""A uid per worker (``worker_uids``), in real workers: distinct uids with names, and per-user kernel counts (here
queued realtime signals, bounded per user by ``RLIMIT_SIGPENDING``) that one toolbox can no longer use up for
another."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import trio

from supervisor._supervisor import Supervisor
from tests._policies import agent, system_toolbox, write_policy

pytestmark = pytest.mark.root

FIRST = 3_000_000_000

#: Queues realtime signals to itself (blocked, so they stay pending) until the kernel refuses, reports, then holds
#: them until ``gate`` exists. Every pending one counts against its user's RLIMIT_SIGPENDING.
HOARD = """python3 - <<'PY'
import ctypes, os, signal, time
libc = ctypes.CDLL(None, use_errno=True)
sig = signal.SIGRTMIN
signal.pthread_sigmask(signal.SIG_BLOCK, [sig])
held, why = 0, ""
while held < 2_000_000:  # sigqueue, not kill: the kernel drops a kill() quietly instead of refusing it
    if libc.sigqueue(os.getpid(), sig, ctypes.c_void_p(0)) != 0:
        why = os.strerror(ctypes.get_errno())
        break
    held += 1
open("hoarded", "w").write(str(held))
while not os.path.exists("gate"):
    time.sleep(0.01)
print(held, why)
PY"""
ONE = (
    'python3 -c "import ctypes, os, signal; libc = ctypes.CDLL(None, use_errno=True)\n'
    "signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])\n"
    "r = libc.sigqueue(os.getpid(), signal.SIGRTMIN, ctypes.c_void_p(0))\n"
    'print(True) if r == 0 else print(False, os.strerror(ctypes.get_errno()))"'
)


def _policy(root: Path, **policy: Any) -> tuple[Path, dict[str, Path]]:
    projects, toolboxes = {}, []
    for name in ("alpha", "beta"):
        project = root / name
        project.mkdir(exist_ok=True)
        os.chmod(project, 0o777)  # every worker may write: their uids and groups differ
        projects[name] = project
        fsb = {"fsbPredicate": {"tag": "DirectoryRecursive", "contents": str(project)}, "fsbName": name}
        toolboxes.append(system_toolbox(name, capabilities=["execute-command"], FileSandbox=fsb))
    return write_policy(root, {"tester": agent(builtinToolboxes=toolboxes)}, landlock_min_abi=6, **policy), projects


async def _run(sup: Supervisor, toolbox: str, command: str, cwd: Path) -> dict[str, Any]:
    result = await sup.call(f"system_{toolbox}_execute_command", {"command": f"cd {cwd} && {command}"})
    assert result.structured is not None, result.data
    return result.structured


async def test_each_worker_runs_as_a_uid_of_its_own_with_a_name(sandbox_tmp: Path) -> None:
    policy, projects = _policy(sandbox_tmp, worker_uids={"first": FIRST, "count": 1000})
    async with Supervisor.open(policy) as sup:
        seen = {}
        for name in ("alpha", "beta"):
            out = await _run(sup, name, "id -u; id -un; id -g; umask; touch mine; stat -c %u mine", projects[name])
            assert out["exitCode"] == 0, out
            uid, user, gid, umask, owner = out["stdout"].split()
            assert FIRST <= int(uid) < FIRST + 1000 and owner == uid
            assert (user, gid, umask) == (f"agent-{name}", uid, "0002")  # a group of its own
            seen[name] = int(uid)
            workdir = sandbox_tmp / "state" / "work" / "tester" / name
            assert workdir.stat().st_uid == int(uid)
        assert seen["alpha"] != seen["beta"]
    # The host's /etc/passwd is untouched.
    assert "agent-alpha" not in Path("/etc/passwd").read_text()


async def _hoard_and_probe(sup: Supervisor, projects: dict[str, Path]) -> tuple[dict[str, Any], dict[str, Any]]:
    """alpha queues as many signals as its user may have pending and holds them while beta queues one."""
    results: dict[str, Any] = {}
    async with trio.open_nursery() as nursery:

        async def hoard() -> None:
            results["alpha"] = await _run(sup, "alpha", HOARD, projects["alpha"])

        nursery.start_soon(hoard)
        with trio.fail_after(20):
            # a file another process writes: nothing to wait on but the file system
            while not (projects["alpha"] / "hoarded").exists():  # noqa: ASYNC110
                await trio.sleep(0.01)
        results["beta"] = await _run(sup, "beta", ONE, projects["beta"])
        (projects["alpha"] / "gate").write_text("")
    (projects["alpha"] / "hoarded").unlink()
    (projects["alpha"] / "gate").unlink()
    return results["alpha"], results["beta"]


async def test_one_toolbox_cannot_use_up_a_per_user_count_of_another(sandbox_tmp: Path) -> None:
    # With one shared uid the hoarder takes them all and the other toolbox gets none: the problem this solves.
    policy, projects = _policy(sandbox_tmp)
    async with Supervisor.open(policy) as sup:
        alpha, beta = await _hoard_and_probe(sup, projects)
    held, _, why = alpha["stdout"].strip().partition(" ")
    assert int(held) > 1000 and why == "Resource temporarily unavailable", alpha
    assert beta["stdout"] == "False Resource temporarily unavailable\n", beta
    # With a uid per worker the hoarder uses up only its own.
    policy, projects = _policy(sandbox_tmp, worker_uids={"first": FIRST, "count": 1000})
    async with Supervisor.open(policy) as sup:
        alpha, beta = await _hoard_and_probe(sup, projects)
    assert alpha["stdout"].strip().endswith("Resource temporarily unavailable"), alpha
    assert beta["stdout"] == "True\n", beta


async def test_a_worker_whose_uid_changed_gets_its_files_back(sandbox_tmp: Path) -> None:
    policy, _ = _policy(sandbox_tmp)
    async with Supervisor.open(policy) as sup:
        keep = 'cd "$HOME" && mkdir -p keep && echo one > keep/file'  # the work folder
        out = await sup.call("system_alpha_execute_command", {"command": keep})
        assert out.structured["exitCode"] == 0, out.data
    kept = sandbox_tmp / "state" / "work" / "tester" / "alpha" / "keep" / "file"
    assert kept.stat().st_uid == 65534
    policy, _ = _policy(sandbox_tmp, worker_uids={"first": FIRST, "count": 1000})
    async with Supervisor.open(policy) as sup:
        more = 'cd "$HOME" && echo two >> keep/file && cat keep/file'
        out = await sup.call("system_alpha_execute_command", {"command": more})
        assert (out.structured["exitCode"], out.structured["stdout"]) == (0, "one\ntwo\n"), out.data
    assert FIRST <= kept.stat().st_uid < FIRST + 1000


async def test_by_default_one_worker_cannot_chmod_another_workers_folder(sandbox_tmp: Path) -> None:
    """Landlock (up to ABI 7) does not check chmod: only the file modes stand between two workers, and they tell
    two workers apart only when their uids differ. A policy file that does not mention worker_uids gets one per
    worker; with one shared uid and no private view the same chmod goes through (shown first); with the view
    (the default) the other worker's folder does not even exist."""
    import yaml

    beta_work = sandbox_tmp / "state" / "work" / "tester" / "beta"
    attack = f"chmod 000 {beta_work} && echo BREACH"
    policy, projects = _policy(sandbox_tmp, private_view=False)  # the test helper pins worker_uids: null
    async with Supervisor.open(policy) as sup:
        shared = await _run(sup, "alpha", attack, projects["alpha"])
        assert shared["stdout"] == "BREACH\n", shared  # the problem this solves
        broken = await sup.call("system_beta_execute_command", {"command": 'cd "$HOME" && echo hi'})
        assert broken.status == "failed" and "can't cd to" in broken.structured["stderr"], broken.data
    data = yaml.safe_load(policy.read_text())
    del data["private_view"]  # the default: a view per worker, even with one shared uid
    policy.write_text(yaml.safe_dump(data))
    async with Supervisor.open(policy) as sup:  # beta's folder is handed back (mode and owner) at start
        out = await _run(sup, "alpha", attack, projects["alpha"])
        assert out["exitCode"] != 0 and "No such file or directory" in out["stderr"], out
    del data["worker_uids"]  # the default of a policy file; without the view, the modes alone refuse it
    data["private_view"] = False
    policy.write_text(yaml.safe_dump(data))
    async with Supervisor.open(policy) as sup:
        out = await _run(sup, "alpha", attack, projects["alpha"])
        assert out["exitCode"] != 0 and "Operation not permitted" in out["stderr"], out
        ok = await sup.call("system_beta_execute_command", {"command": 'cd "$HOME" && echo hi'})
        assert ok.structured is not None and ok.structured["stdout"] == "hi\n", ok.data


#: From another toolbox's worker: change the times, set and remove user.* xattrs of a file (Landlock up to ABI 7
#: mediates none of these; only the file's owner, group and mode decide).
META_ATTACK = """python3 - "$1" <<'PY'
import os, sys
p = sys.argv[1]
for name, attempt in (("write", lambda: open(p, "a").write("x")), ("utime", lambda: os.utime(p)),
                      ("setxattr", lambda: os.setxattr(p, "user.x", b"1")),
                      ("removexattr", lambda: os.removexattr(p, "user.mark"))):
    try:
        attempt()
        print(name, "BREACH")
    except OSError as exc:
        print(name, exc.errno)
PY"""


async def test_another_toolbox_cannot_touch_times_or_xattrs_of_a_toolboxs_file(sandbox_tmp: Path) -> None:
    """The group channel (every worker in gid 65534 with umask 007) is closed: each worker's group is its own, so
    another toolbox is 'other' to a file a worker made and may not write it, its times or its xattrs."""
    import errno

    project = sandbox_tmp / "project"
    project.mkdir()
    os.chmod(project, 0o777)
    # Both FileSandboxes reach the folder (read-write): Landlock and the private view let beta at alpha's file, so
    # only its owner, group and mode stand in the way.
    fsb = {"fsbPredicate": {"tag": "DirectoryRecursive", "contents": str(project)}, "fsbName": "project"}
    boxes = [system_toolbox(n, capabilities=["execute-command"], FileSandbox=fsb) for n in ("alpha", "beta")]
    policy = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=boxes)},
        landlock_min_abi=6,
        worker_uids={"first": FIRST, "count": 1000},
    )
    projects = {"alpha": project}
    target = project / "made-by-alpha"
    async with Supervisor.open(policy) as sup:
        made = await _run(
            sup,
            "alpha",
            f"echo data > {target.name} && touch -d 2001-02-03 {target.name} && stat -c '%a %u %g' {target.name}",
            projects["alpha"],
        )
        assert made["exitCode"] == 0, made
        mode, uid, gid = made["stdout"].split()
        assert mode == "664" and uid == gid  # its own group: the group bit is no channel
        os.setxattr(target, "user.mark", b"alpha")  # (root sets the mark: a seccomp filter may refuse it to workers)
        before = os.stat(target).st_mtime_ns
        out = await sup.call("system_beta_execute_command", {"command": META_ATTACK.replace('"$1"', str(target))})
        assert out.structured is not None, out.data
        results = dict(line.split() for line in out.structured["stdout"].splitlines())
    refused = {str(errno.EACCES), str(errno.EPERM), str(errno.EOPNOTSUPP)}  # modes; or the seccomp filter (xattrs)
    assert set(results) == {"write", "utime", "setxattr", "removexattr"} and set(results.values()) <= refused, results
    assert results["write"] == results["utime"] == str(errno.EACCES)  # no seccomp rule for these: the modes refuse
    assert os.stat(target).st_mtime_ns == before
    assert os.listxattr(target) == ["user.mark"]
    assert target.read_text() == "data\n"


async def test_a_shared_group_lets_the_toolboxes_it_names_write_one_folder_and_no_other(sandbox_tmp: Path) -> None:
    """The explicit grant that replaces the common group: ``shared_groups`` names a gid and the toolboxes in it;
    the folder belongs to that group (setgid), so what one member creates the other may change, and a toolbox
    outside the group may not, though its FileSandbox reaches the folder just the same."""
    gid = 3_100_000_000
    shared = sandbox_tmp / "shared"
    shared.mkdir()
    os.chown(shared, 0, gid)
    os.chmod(shared, 0o2770)
    fsb = {"fsbPredicate": {"tag": "DirectoryRecursive", "contents": str(shared)}, "fsbName": "shared"}
    boxes = [system_toolbox(n, capabilities=["execute-command"], FileSandbox=fsb) for n in ("alpha", "beta", "gamma")]
    policy = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=boxes)},
        landlock_min_abi=6,
        worker_uids={"first": FIRST, "count": 1000},
        shared_groups=[{"gid": gid, "toolboxes": ["tester/alpha", "beta"]}],
    )
    async with Supervisor.open(policy) as sup:
        made = await _run(sup, "alpha", f"id -G && echo one > f && stat -c '%a %g %G' f && getent group {gid}", shared)
        assert made["exitCode"] == 0, made
        groups, mode_group, entry = made["stdout"].splitlines()
        assert str(gid) in groups.split() and mode_group == f"664 {gid} shared-{gid}"
        assert entry == f"shared-{gid}:x:{gid}:agent-alpha", made  # the view's /etc/group names the shared group
        other = await _run(sup, "beta", "echo two >> f && cat f", shared)
        assert (other["exitCode"], other["stdout"]) == (0, "one\ntwo\n"), other
        outside = await sup.call(
            "system_gamma_execute_command", {"command": f"id -G; echo three >> {shared}/f || echo REFUSED"}
        )
        assert outside.structured is not None, outside.data
        assert str(gid) not in outside.structured["stdout"].splitlines()[0].split()
        assert "REFUSED" in outside.structured["stdout"], outside.structured
    assert (shared / "f").read_text() == "one\ntwo\n"
