"""The private filesystem view, attacked from inside real workers (issue 12, defect 9).

Two agents: ``tester`` with ``alpha`` (a shell through execute-command, a FileSandbox project) and ``named`` (the
``hostname`` capability), and ``other`` with ``gamma``. The host has a 0777 unix socket listening in its own /tmp
and a file next to it, a world-readable file next to alpha's project, and a file owned by alpha's uid that the
policy grants read-only. Exit 0 of an attempt is a breach; each test prints what the worker saw.
"""

from __future__ import annotations

import os
import secrets
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from sandbox._procfs import MASKED_DIRS, MASKED_FILES
from sandbox._view_plan import NO_NETWORK_RESOLV_CONF
from supervisor._supervisor import Supervisor
from supervisor.config._policy import DEFAULT_SYSTEM_PATHS
from tests._policies import agent, system_toolbox, write_policy

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

pytestmark = pytest.mark.root

SECRET = "view-secret-value"


@pytest.fixture
def host_socket() -> Iterator[Path]:
    """A pathname socket in the host's /tmp that anyone may connect to (mode 0777), and a file beside it."""
    tag = secrets.token_hex(6)
    path = Path(f"/tmp/agents-supervise-view-{tag}.sock")
    beside = Path(f"/tmp/agents-supervise-view-{tag}.txt")
    beside.write_text(SECRET)
    beside.chmod(0o644)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    path.chmod(0o777)
    server.listen(8)
    try:
        yield path
    finally:
        server.close()
        path.unlink(missing_ok=True)
        beside.unlink(missing_ok=True)


def _policy(root: Path, **policy: Any) -> Path:
    project = root / "alpha"
    project.mkdir()
    os.chown(project, 65534, 65534)
    (root / "secret.txt").write_text(SECRET)
    os.chmod(root / "secret.txt", 0o644)
    mine = root / "granted-read-only.txt"
    mine.write_text("read only\n")
    os.chown(mine, 65534, 65534)  # owned by the worker's uid: only the read-only mount stops chmod and utimensat
    os.chmod(mine, 0o644)
    fsb = {"fsbPredicate": {"tag": "DirectoryRecursive", "contents": str(project)}, "fsbName": "alpha"}
    tester = agent(
        "tester",
        builtinToolboxes=[
            system_toolbox("alpha", capabilities=["execute-command"], FileSandbox=fsb),
            system_toolbox("named", capabilities=["hostname", "execute-command"]),
        ],
    )
    other = agent("other", builtinToolboxes=[system_toolbox("gamma", capabilities=["execute-command"])])
    return write_policy(
        root,
        {"tester": tester, "other": other},
        landlock_min_abi=6,
        system_paths=[*DEFAULT_SYSTEM_PATHS, str(mine)],
        **policy,
    )


@pytest.fixture
async def sup(sandbox_tmp: Path, host_socket: Path) -> AsyncIterator[Supervisor]:
    async with Supervisor.open(_policy(sandbox_tmp)) as s:
        await s.call("system_gamma_execute_command", {"command": "true"})  # the other agent's worker is running
        yield s


async def _run(sup: Supervisor, command: str, toolbox: str = "alpha") -> dict[str, Any]:
    result = await sup.call(f"system_{toolbox}_execute_command", {"command": command})
    assert result.structured is not None, result.data
    return result.structured


async def _refused(sup: Supervisor, command: str, toolbox: str = "alpha") -> dict[str, Any]:
    out = await _run(sup, command, toolbox)
    assert out["exitCode"] != 0, f"BREACH: {command!r}: stdout={out['stdout']!r} stderr={out['stderr']!r}"
    assert SECRET not in out["stdout"]
    return out


async def test_the_hosts_tmp_its_socket_and_its_files_are_not_there(sup: Supervisor, host_socket: Path) -> None:
    connect = (
        f"python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('{host_socket}'); "
        "print('BREACH connected')\""
    )
    out = await _refused(sup, connect)
    assert "FileNotFoundError" in out["stderr"], out
    beside = str(host_socket).replace(".sock", ".txt")
    out = await _refused(sup, f"[ -e {beside} ] || [ -e {host_socket} ] || ls /tmp | grep -q agents-supervise-view-")
    # The worker's /tmp is its own, writable, and empty of the host's files.
    ok = await _run(sup, "echo mine > /tmp/own && cat /tmp/own && stat -f -c %T /tmp && df -k /tmp | tail -1")
    assert ok["exitCode"] == 0 and ok["stdout"].startswith("mine\ntmpfs\n"), ok
    assert int(ok["stdout"].split("\n")[2].split()[1]) <= 64 * 1024, ok  # size-bounded


async def test_host_paths_and_other_tenants_do_not_exist(sup: Supervisor, sandbox_tmp: Path) -> None:
    state = sandbox_tmp / "state"
    assert (state / "trace.jsonl").exists() and (state / "work" / "other" / "gamma").is_dir()
    for path in (
        "/root",
        "/etc/shadow",
        "/home",
        "/run",
        "/var/run",
        "/sys",
        state / "trace.jsonl",
        state / "sessions.sqlite3",
        state / "work" / "other" / "gamma",
        state / "work" / "tester" / "named",
        sandbox_tmp / "secret.txt",
        "/mnt",
    ):
        out = await _refused(sup, f"stat {path}")
        assert "No such file or directory" in out["stderr"], (path, out)
    # What the worker is granted is at the host's own paths.
    workdir = state / "work" / "tester" / "alpha"
    # a command runs in the agent file's folder (shown at its own path, holding only what is granted in it);
    # HOME is the work folder
    ok = await _run(sup, f'pwd; echo "$HOME"; cd {sandbox_tmp / "alpha"} && echo hi > f && cat f')
    assert ok["stdout"] == f"{sandbox_tmp}\n{workdir}\nhi\n", ok
    assert (sandbox_tmp / "alpha" / "f").read_text() == "hi\n"


async def test_etc_names_only_the_workers_account(sup: Supervisor) -> None:
    out = await _run(sup, "cat /etc/passwd; echo --; cat /etc/group; echo --; id -un; cat /etc/hosts")
    passwd, group, rest = out["stdout"].split("--\n")
    names = [line.split(":")[0] for line in passwd.splitlines()]
    assert names == ["root", "nobody"], out  # the shared test uid keeps its host name; no other host account
    assert passwd.splitlines()[1].split(":")[2:4] == ["65534", "65534"]
    assert [line.split(":")[0] for line in group.splitlines()] == ["root", "nogroup"], out
    assert rest.startswith("nobody\n127.0.0.1\tlocalhost\n") and socket.gethostname() not in rest.split("\n", 1)[1]
    host_names = {line.split(":")[0] for line in Path("/etc/passwd").read_text().splitlines() if line}
    assert len(host_names) > 2  # the host has more accounts than the worker sees
    # No network: no name server at all, and nothing of the host's resolver configuration.
    out = await _run(sup, "cat /etc/resolv.conf")
    assert out["stdout"] == NO_NETWORK_RESOLV_CONF and Path("/etc/resolv.conf").read_text() != out["stdout"], out


async def test_hostname_is_neutral_unless_the_capability_is_granted(sup: Supervisor) -> None:
    real = socket.gethostname()
    assert real != "sandbox"
    out = await _run(sup, "hostname; cat /proc/sys/kernel/hostname; uname -n")
    assert out["stdout"] == "sandbox\n" * 3, out
    named = await sup.call("system_named_hostname", {})
    assert named.structured["data"]["hostname"] == real, named.data
    out = await _run(sup, "hostname", "named")
    assert out["stdout"] == f"{real}\n", out
    await _refused(sup, "hostname evil")  # its own UTS namespace, and no privilege to rename it


async def test_mountinfo_shows_only_the_views_mounts(sup: Supervisor) -> None:
    out = await _run(sup, "cat /proc/self/mountinfo")
    assert out["exitCode"] == 0, out
    points = {line.split()[4] for line in out["stdout"].splitlines()}
    granted = {rule.path for rule in sup.runner("alpha").spec.plan.fs_rules}
    own = {"/", "/tmp", "/dev", "/dev/shm"}
    strays = {p for p in points - own - granted if not p.startswith("/proc")}
    assert not strays, strays
    host = {line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()}
    assert not (points & host) - own - {"/proc"}, points & host  # no mount of the host is listed
    for path in ("/sys", "/run/netns", "/dev/pts"):
        assert path not in points


async def test_proc_cmdline_and_boot_id_are_masked(sup: Supervisor) -> None:
    assert Path("/proc/cmdline").read_text() and Path("/proc/sys/kernel/random/boot_id").read_text()
    out = await _run(sup, "cat /proc/cmdline /proc/sys/kernel/random/boot_id | wc -c")
    assert out["stdout"] == "0\n", out


async def test_every_host_wide_proc_file_reads_empty_and_every_masked_folder_is_empty(sup: Supervisor) -> None:
    """Each of ``MASKED_FILES`` this kernel has reads empty in the view's ``/proc`` and each of ``MASKED_DIRS`` is an
    empty folder nothing can be made in (all of them clones of one read-only tmpfs)."""
    files = [name for name in MASKED_FILES if Path("/proc", name).is_file()]
    dirs = [name for name in MASKED_DIRS if Path("/proc", name).is_dir() and not Path("/proc", name).is_symlink()]
    assert files and dirs
    script = "; ".join(
        [*(f"echo {n} $(head -c 64 /proc/{n} 2>/dev/null | wc -c)" for n in files)]
        + [f"echo {n} $(ls -A /proc/{n} | wc -l) $(touch /proc/{n}/x 2>/dev/null && echo WROTE)" for n in dirs]
    )
    out = await _run(sup, script)
    seen = dict(line.split(" ", 1) for line in out["stdout"].splitlines())
    assert {n: seen.get(n) for n in files} == dict.fromkeys(files, "0"), out
    assert {n: seen.get(n) for n in dirs} == dict.fromkeys(dirs, "0"), out


async def test_a_read_only_grant_cannot_be_touched_or_chmodded(sup: Supervisor, sandbox_tmp: Path) -> None:
    """The file is the worker uid's own (mode 0644): Landlock up to ABI 7 does not check utimensat or chmod, so only
    the read-only bind refuses them."""
    path = sandbox_tmp / "granted-read-only.txt"
    before = path.stat()
    for attack in (
        f"touch {path}",
        f"touch -d '2001-01-01' {path}",
        f"chmod 666 {path}",
        f"python3 -c \"import os; os.utime('{path}', None)\"",
    ):
        out = await _refused(sup, attack)
        assert "Read-only file system" in out["stderr"], (attack, out)
    after = path.stat()
    assert (after.st_mtime_ns, after.st_mode) == (before.st_mtime_ns, before.st_mode)
    ok = await _run(sup, f"cat {path}")
    assert ok["stdout"] == "read only\n", ok


async def test_private_view_false_really_shows_the_hosts_tree(sandbox_tmp: Path, host_socket: Path) -> None:
    """The knob turns the view off: the same probes then see the host (and Landlock alone refuses the socket's
    neighbour file, not its existence)."""
    async with Supervisor.open(_policy(sandbox_tmp, private_view=False)) as sup:
        out = await _run(sup, f"[ -e {host_socket} ] && [ -d /root ] && hostname && wc -l < /etc/passwd")
        assert out["exitCode"] == 0, out
        host_lines = len(Path("/etc/passwd").read_text().splitlines())
        assert out["stdout"] == f"{socket.gethostname()}\n{host_lines}\n", out
        path = sandbox_tmp / "granted-read-only.txt"
        chmod = await _run(sup, f"chmod 600 {path} && echo changed")
        assert chmod["stdout"] == "changed\n", chmod  # what the read-only bind stops


async def test_a_policy_granting_all_of_etc_still_shows_only_the_workers_account(sandbox_tmp: Path) -> None:
    """permissive.yaml grants /etc whole: the generated files are mounted over the host's, read-only."""
    policy = write_policy(
        sandbox_tmp,
        {"tester": agent("tester", builtinToolboxes=[system_toolbox("alpha", capabilities=["execute-command"])])},
        system_paths=[*DEFAULT_SYSTEM_PATHS, "/etc"],
    )
    async with Supervisor.open(policy) as sup:
        out = await _run(
            sup,
            "cut -d: -f1 /etc/passwd; cat /etc/hostname; ls /etc/os-release; "
            "grep -c ' /etc/passwd ' /proc/self/mountinfo",
        )
        assert out["stdout"] == "root\nnobody\nsandbox\n/etc/os-release\n1\n", out
        await _refused(sup, "echo x >> /etc/passwd")


@pytest.mark.parametrize("private_view", [True, False])
async def test_a_link_planted_in_a_writable_folder_fails_the_next_start(sandbox_tmp: Path, private_view: bool) -> None:
    """A read grant nested in the worker's writable FileSandbox, swapped for a link to a host file between two
    starts. Landlock's rule would follow it if its path were opened plainly; the launcher opens rule paths one
    component at a time and follows only root's links outside writable trees, so that worker's start fails with a
    load error naming the rule and the link, with the view (which also never binds the target) and without it
    (where Landlock is the only fence). The rule is a system path, so every worker's start fails the same way."""
    project = sandbox_tmp / "alpha"
    nested = project / "nested.txt"
    policy = _policy(sandbox_tmp, private_view=private_view)
    nested.write_text("granted\n")
    nested.chmod(0o644)
    data = yaml.safe_load(policy.read_text())
    data["system_paths"].append(str(nested))
    policy.write_text(yaml.safe_dump(data))
    async with Supervisor.open(policy) as sup:
        out = await _run(sup, f"cat {nested} && rm {nested} && ln -s {sandbox_tmp / 'secret.txt'} {nested}")
        assert out["stdout"] == "granted\n" and out["exitCode"] == 0, out
    assert nested.is_symlink()
    async with Supervisor.open(policy) as sup:
        errors = {e["toolbox"]: e["message"] for e in sup.load_errors()}
        assert set(errors) == {"alpha", "named", "gamma"}, errors
        refused = f"rule path refused: {nested}: {nested} is a symbolic link "
        assert f"{refused}owned by uid 65534, not root" in errors["gamma"], errors
        assert "Grant the target's own path instead" in errors["gamma"]
        assert refused in errors["alpha"], errors  # the owner, or the writable tree it lies in
        result = await sup.call("system_alpha_execute_command", {"command": f"cat {nested}"})
        assert result.status == "error" and SECRET not in (result.data or ""), result
