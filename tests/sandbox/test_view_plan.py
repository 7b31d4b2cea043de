"""The private view's planner (pure, no root): what a worker's root holds for given rules and a given host tree.

The host tree is a table (``probe``), so each case states exactly what the host has; the real view is built and
attacked from inside real workers in ``test_view.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sandbox import FsRule, PathInfo, ViewError, ViewSpec, plan_view, view_files
from sandbox._accounts import plan_view_accounts
from sandbox._view_plan import NO_NETWORK_RESOLV_CONF, ViewPlan

if TYPE_CHECKING:
    from pathlib import Path

HOST = {
    "/usr": PathInfo("dir"),
    "/usr/bin": PathInfo("dir"),
    "/usr/lib": PathInfo("dir"),
    "/usr/lib64": PathInfo("dir"),
    "/usr/share": PathInfo("dir"),
    "/usr/share/zoneinfo": PathInfo("dir"),
    "/usr/share/zoneinfo/UTC": PathInfo("file"),
    "/bin": PathInfo("symlink", "usr/bin"),
    "/lib64": PathInfo("symlink", "usr/lib64"),
    "/etc": PathInfo("dir"),
    "/etc/passwd": PathInfo("file"),
    "/etc/hosts": PathInfo("file"),
    "/etc/resolv.conf": PathInfo("symlink", "../run/resolv.conf"),
    "/run": PathInfo("dir"),
    "/run/resolv.conf": PathInfo("file"),
    "/etc/localtime": PathInfo("symlink", "/usr/share/zoneinfo/UTC"),
    "/etc/ld.so.cache": PathInfo("file"),
    "/dev": PathInfo("dir"),
    "/dev/null": PathInfo("device"),
    "/dev/urandom": PathInfo("device"),
    "/dev/shm": PathInfo("dir"),
    "/proc": PathInfo("dir"),
    "/proc/self": PathInfo("symlink", "1"),
    "/proc/1": PathInfo("dir"),
    "/tmp": PathInfo("dir"),
    "/tmp/t": PathInfo("dir"),
    "/tmp/t/data": PathInfo("dir"),
    "/tmp/t/data/out": PathInfo("dir"),
    "/tmp/t/data/ro": PathInfo("dir"),
    "/tmp/t/sock": PathInfo("other"),
    "/var": PathInfo("dir"),
    "/var/lib": PathInfo("dir"),
    "/var/lib/as": PathInfo("dir"),
    "/var/lib/as/work": PathInfo("dir"),
    "/var/lib/as/work/a": PathInfo("dir"),
    "/var/lib/as/work/a/tb": PathInfo("dir"),
    "/loop": PathInfo("symlink", "loop"),
    "/var/lib/as/work/a/tb/planted": PathInfo("symlink", "/etc/ld.so.cache"),
}
FILES = view_files(
    uid=3000000001,
    gid=3000000001,
    account="agent-tb",
    home="/var/lib/as/work/a/tb",
    hostname="sandbox",
    resolv_conf=None,
)


def probe(path: str) -> PathInfo:
    return HOST.get(path, PathInfo("missing"))


def view(*rules: FsRule, files: dict[str, str] | None = None, spec: ViewSpec | None = None) -> ViewPlan:
    return plan_view(rules, spec or ViewSpec(), FILES if files is None else files, probe)


def ops(plan: ViewPlan, kind: str) -> dict[str, object]:
    return {op.path: op for op in plan.ops if op.op == kind}


def test_each_rule_is_bound_at_its_own_canonical_path_with_its_mode() -> None:
    plan = view(FsRule("/usr"), FsRule("/var/lib/as/work/a/tb", "write"), FsRule("/etc/ld.so.cache"))
    binds = ops(plan, "bind")
    assert set(binds) == {"/usr", "/var/lib/as/work/a/tb", "/etc/ld.so.cache"}
    assert not binds["/usr"].writable and binds["/var/lib/as/work/a/tb"].writable
    assert binds["/etc/ld.so.cache"].kind == "file"
    # Folders on the way exist in the view's tmpfs (nothing else of /var/lib/as: no other agent, no trace, no DB).
    assert {"/var", "/var/lib", "/var/lib/as", "/var/lib/as/work", "/var/lib/as/work/a"} <= set(ops(plan, "dir"))
    assert "/home" not in {op.path for op in plan.ops} and "/root" not in {op.path for op in plan.ops}


def test_symlinks_on_the_way_are_recreated_and_their_targets_bound() -> None:
    plan = view(FsRule("/usr"), FsRule("/bin"), FsRule("/lib64"), FsRule("/etc/localtime"))
    links = {path: op.source for path, op in ops(plan, "symlink").items()}
    assert links["/bin"] == "usr/bin" and links["/lib64"] == "usr/lib64"
    assert links["/etc/localtime"] == "/usr/share/zoneinfo/UTC"
    assert set(ops(plan, "bind")) == {"/usr"}  # every target lies in /usr: nothing more is bound


def test_a_rule_inside_a_bind_adds_nothing_unless_it_widens_the_mode() -> None:
    plan = view(FsRule("/tmp/t/data"), FsRule("/tmp/t/data/ro"), FsRule("/tmp/t/data/out", "write"))
    binds = ops(plan, "bind")
    assert set(binds) == {"/tmp/t/data", "/tmp/t/data/out"}
    assert binds["/tmp/t/data/out"].writable and not binds["/tmp/t/data"].writable
    # No folder is made inside a bind (it would be the host's): the mount point is the host's own.
    assert "/tmp/t/data/out" not in ops(plan, "dir")
    # A read rule beneath a write bind stays writable (Landlock's rights are a union along the path).
    plan = view(FsRule("/tmp/t/data", "write"), FsRule("/tmp/t/data/ro"))
    assert set(ops(plan, "bind")) == {"/tmp/t/data"}


def test_tmp_dev_and_proc_are_the_views_own() -> None:
    plan = view(
        FsRule("/tmp"),
        FsRule("/dev/null", "write"),
        FsRule("/dev/urandom"),
        FsRule("/dev/shm", "write"),
        FsRule("/proc/self"),
        FsRule("/proc"),
        FsRule("/tmp/t/data"),
        FsRule("/tmp/t/sock"),
        spec=ViewSpec(tmp_bytes=1 << 20, shm_bytes=2 << 20),
    )
    tmpfs = ops(plan, "tmpfs")
    assert (tmpfs["/tmp"].size, tmpfs["/dev/shm"].size, tmpfs["/tmp"].mode) == (1 << 20, 2 << 20, 0o1777)
    assert "/dev" in tmpfs and "/proc" in ops(plan, "proc")
    binds = ops(plan, "bind")
    assert set(binds) == {"/dev/null", "/dev/urandom", "/tmp/t/data"}  # the host's /tmp, /dev/shm, /proc: never
    assert binds["/dev/null"].kind == "device" and binds["/dev/null"].writable
    assert ops(plan, "symlink")["/dev/fd"].source == "/proc/self/fd"
    # A bind beneath /tmp is mounted after the fresh tmpfs, in it.
    order = [(op.op, op.path) for op in plan.ops]
    assert order.index(("tmpfs", "/tmp")) < order.index(("dir", "/tmp/t")) < order.index(("bind", "/tmp/t/data"))


def test_generated_files_replace_the_hosts() -> None:
    plan = view(FsRule("/etc/passwd"), FsRule("/etc/resolv.conf"), FsRule("/etc/hosts"))
    files = ops(plan, "file")
    assert not ops(plan, "bind")  # none of the host's /etc files is bound
    assert files["/etc/passwd"].content == FILES["/etc/passwd"] and not files["/etc/passwd"].overlay
    assert files["/etc/resolv.conf"].content == NO_NETWORK_RESOLV_CONF
    assert "/run" not in {op.path for op in plan.ops}  # the link to the host's resolver file is not followed


def test_generated_files_go_over_the_hosts_when_etc_is_bound() -> None:
    plan = view(FsRule("/etc"))
    assert set(ops(plan, "bind")) == {"/etc"}
    files = ops(plan, "file")
    assert files["/etc/passwd"].overlay and files["/etc/hosts"].overlay
    assert "/etc/hostname" not in files  # the host has none there: nothing to cover, nothing made in its folder
    assert "/etc/resolv.conf" not in files  # a link out of the bind: the host's target is not in the view at all


def test_a_link_planted_in_a_writable_tree_is_never_followed() -> None:
    """A FileExactly nested in the worker's own folder, swapped for a link to a host file between two starts."""
    plan = view(FsRule("/var/lib/as/work/a/tb", "write"), FsRule("/var/lib/as/work/a/tb/planted"))
    assert set(ops(plan, "bind")) == {"/var/lib/as/work/a/tb"}  # /etc/ld.so.cache is not brought into the view
    plan = view(FsRule("/var/lib/as/work/a/tb"), FsRule("/var/lib/as/work/a/tb/planted"))  # read-only: host-made
    assert "/etc/ld.so.cache" in ops(plan, "bind")


def test_missing_looping_and_socket_rules_add_nothing() -> None:
    plan = view(FsRule("/nope"), FsRule("/loop"), FsRule("/tmp/t/sock"), FsRule("/usr/missing/x"))
    assert not ops(plan, "bind")


@pytest.mark.parametrize("path", ["/", "/usr/.."])
def test_a_rule_on_the_whole_filesystem_cannot_be_a_view(path: str) -> None:
    with pytest.raises(ViewError, match=r"whole filesystem|resolves to '/'"):
        view(FsRule(path))


def test_describe_lists_every_mount_and_the_host_name() -> None:
    plan = view(FsRule("/usr"), FsRule("/var/lib/as/work/a/tb", "write"), spec=ViewSpec(hostname="sandbox"))
    lines = plan.describe()
    assert "/usr: read-only bind of the host's" in lines
    assert "/var/lib/as/work/a/tb: read-write bind of the host's" in lines
    assert "/tmp: fresh tmpfs of 64 MiB" in lines and lines[-1] == "host name: sandbox"
    assert set(plan.mount_points()) == {"/dev", "/dev/shm", "/tmp", "/proc", "/usr", "/var/lib/as/work/a/tb"}


def test_the_views_accounts_name_only_root_and_the_worker() -> None:
    files = plan_view_accounts(uid=3000000001, gid=3000000002, name="agent-x:\nroot", home="/w")
    assert files.passwd == (
        "root:x:0:0:root:/root:/usr/sbin/nologin\n"
        "agent-xroot:x:3000000001:3000000002:agents-supervise worker:/w:/usr/sbin/nologin\n"
    )
    assert files.group == "root:x:0:\nagent-xroot:x:3000000002:\n"
    named = plan_view_accounts(uid=65534, gid=65534, name="nobody", home="/w", group_name="nogroup")
    assert named.group == "root:x:0:\nnogroup:x:65534:\n"
    shared = plan_view_accounts(
        uid=3000000001,
        gid=3000000001,
        name="agent-x",
        home="/w",
        groups=[(3100000000, ""), (2000, "staff:x"), (3000000001, "own"), (2001, "root")],
    )
    assert shared.group == (
        "root:x:0:\nagent-x:x:3000000001:\nstaffx:x:2000:agent-x\nshared-2001:x:2001:agent-x\n"
        "shared-3100000000:x:3100000000:agent-x\n"
    )  # host names kept, clashes renamed
    hosts = view_files(uid=1, gid=1, account="a", home="/w", hostname="bad name;x", resolv_conf="nameserver 1\n")
    assert hosts["/etc/hostname"] == "badnamex\n" and hosts["/etc/resolv.conf"] == "nameserver 1\n"
    assert hosts["/etc/hosts"].startswith("127.0.0.1\tlocalhost\n")


def test_system_paths_and_devices_get_inodes_of_their_own_other_grants_stay_plain_binds() -> None:
    """Private (an overlay of the worker's own): read-only binds within the spec's system paths (through their
    links: ``/bin`` names ``/usr/bin``) and every device node. Plain: write grants and other read-only grants (a
    FileSandbox's data, whose writers' changes and SQLite locks must be seen live)."""
    spec = ViewSpec(system_paths=("/bin", "/usr", "/etc/ld.so.cache", "/tmp/t/data/out"))
    plan = plan_view(
        [
            FsRule("/usr"),
            FsRule("/etc/ld.so.cache"),
            FsRule("/dev/null", "write"),
            FsRule("/dev/urandom"),
            FsRule("/tmp/t/data/ro"),
            FsRule("/tmp/t/data/out", "write"),
            FsRule("/var/lib/as/work/a/tb"),
        ],
        spec,
        FILES,
        probe,
    )
    private = {op.path: op.private for op in plan.ops if op.op == "bind"}
    assert private == {
        "/usr": True,
        "/etc/ld.so.cache": True,
        "/dev/null": True,
        "/dev/urandom": True,
        "/tmp/t/data/ro": False,
        "/tmp/t/data/out": False,
        "/var/lib/as/work/a/tb": False,
    }
    assert "/usr: read-only bind of the host's, inodes of its own (overlay)" in plan.describe()
    assert "/dev/null: read-write bind of the host's (device), inodes of its own (overlay)" in plan.describe()


def test_an_overlay_that_would_hide_a_mount_is_a_plain_bind() -> None:
    """An overlay shows one file system: a folder with a mount point beneath it, or a file that is a mount point
    itself (a container's bind-mounted file), keeps the plain bind (and its shared inodes)."""
    spec = ViewSpec(system_paths=("/usr", "/etc/ld.so.cache", "/dev/null"))
    rules = [FsRule("/usr"), FsRule("/etc/ld.so.cache"), FsRule("/dev/null")]
    mounts = {"/", "/usr/share", "/etc/ld.so.cache", "/dev", "/proc"}
    private = {op.path: op.private for op in plan_view(rules, spec, FILES, probe, mounts).ops if op.op == "bind"}
    assert private == {"/usr": False, "/etc/ld.so.cache": False, "/dev/null": True}


def test_without_root_a_file_in_a_folder_with_mounts_beneath_is_a_plain_bind() -> None:
    """A launcher that is not root builds the view in a user namespace of its own, where the host's mounts are
    locked and the kernel cannot overlay a folder with a mount beneath it ("overlayfs: failed to clone
    lowerpath"): ``/dev/null``, overlaid through ``/dev`` (which holds ``/dev/pts``), is then a plain bind; a file
    whose folder has no mount beneath keeps its own inodes."""
    spec = ViewSpec(system_paths=("/etc/ld.so.cache", "/dev/null"))
    rules = [FsRule("/etc/ld.so.cache"), FsRule("/dev/null")]
    mounts = {"/", "/dev", "/dev/pts", "/dev/shm", "/proc"}

    def private(*, locked: bool) -> dict[str, bool]:
        plan = plan_view(rules, spec, FILES, probe, mounts, locked=locked)
        assert plan.locked is locked
        return {op.path: op.private for op in plan.ops if op.op == "bind"}

    assert private(locked=False) == {"/etc/ld.so.cache": True, "/dev/null": True}
    assert private(locked=True) == {"/etc/ld.so.cache": True, "/dev/null": False}


def test_host_mount_points_unescape_mountinfo(tmp_path: Path) -> None:
    """The mount points of a mountinfo text, its octal escapes (a space is ``\\040``) turned back into characters."""
    from sandbox import host_mount_points

    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        "22 1 0:21 / / rw - ext4 /dev/vda rw\n"
        "23 22 0:22 / /mnt/my\\040disk rw - ext4 /dev/vdb rw\n"
        "24 22 0:23 / /srv/tab\\011and\\134slash rw - tmpfs none rw\n"
    )
    assert host_mount_points(str(mountinfo)) == {"/", "/mnt/my disk", "/srv/tab\tand\\slash"}
