"""Root's file operations on worker-writable trees (``sandbox._dirfd``): links planted where a folder should be are
replaced, never followed; re-owning walks through fds and changes only the previous owner's entries, even while a
real confined process of that owner swaps a folder for a link in a loop (``renameat2(RENAME_EXCHANGE)``)."""

from __future__ import annotations

import os
import stat
import sys
from typing import TYPE_CHECKING

import pytest
import trio

from sandbox import (
    READ,
    WRITE,
    FsRule,
    UnsafeTreeError,
    ensure_dir,
    ensure_path,
    open_anchor,
    open_rule_path,
    python_runtime_paths,
    reown_tree,
)
from supervisor.config._policy import DEFAULT_SYSTEM_PATHS
from supervisor.workers._confined_exec import run_confined

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.root

OLD, NEW = 3_000_000_101, 3_000_000_102


def _owner_mode(path: Path) -> tuple[int, int, int]:
    st = os.lstat(path)
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)


def _victim(root: Path) -> Path:
    victim = root / "victim"
    victim.mkdir()
    (victim / "secret").write_text("root's")
    os.chmod(victim, 0o755)
    return victim


def test_a_link_where_a_folder_should_be_is_replaced_and_its_target_left_alone(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    before = (_owner_mode(victim), _owner_mode(victim / "secret"))
    work = tmp_path / "work"
    work.mkdir()
    os.chown(work, OLD, OLD)
    (work / "tmp").symlink_to(victim)
    (work / "gone").symlink_to(tmp_path / "missing")  # a dangling one
    (work / "fifo").mkdir()
    anchor = open_anchor(str(tmp_path))
    try:
        wfd = ensure_dir(anchor, "work", mode=0o700, uid=OLD, gid=OLD)
        for name in ("tmp", "gone"):
            os.close(ensure_dir(wfd, name, mode=0o700, uid=OLD, gid=OLD))
        os.close(wfd)
    finally:
        os.close(anchor)
    assert (_owner_mode(victim), _owner_mode(victim / "secret")) == before
    for name in ("tmp", "gone"):
        assert not (work / name).is_symlink() and (work / name).is_dir()
        assert _owner_mode(work / name) == (OLD, OLD, 0o700)
    assert not (tmp_path / "missing").exists()  # the dangling link's target was not made either


def test_a_folder_of_another_owner_is_refused_not_taken(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    os.chown(tmp_path / "a", OLD, OLD)
    os.chown(tmp_path / "a" / "b", NEW, NEW)
    anchor = open_anchor(str(tmp_path))
    try:
        with pytest.raises(UnsafeTreeError, match=rf"belongs to uid {NEW}, not to uid {OLD}"):
            ensure_path(anchor, ["a", "b"], mode=0o700, uid=OLD, gid=OLD)
    finally:
        os.close(anchor)
    assert _owner_mode(tmp_path / "a" / "b")[0] == NEW
    with pytest.raises(ValueError, match="single path component"):
        ensure_dir(0, "../x", mode=0o700)


def test_reown_hands_the_previous_owners_entries_over_and_nothing_else(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (work / "sub" / "file").write_text("x")
    (work / "link").symlink_to(victim)
    (work / "planted").write_text("root's, moved in")  # an entry of another owner stays its owner's
    for p in (work, work / "sub", work / "sub" / "file", work / "link"):
        os.lchown(p, OLD, OLD)
    anchor = open_anchor(str(tmp_path))
    try:
        count = reown_tree(anchor, "work", NEW, NEW)
        assert (count.changed, count.left) == (4, 1)
        assert reown_tree(anchor, "work", NEW, NEW).changed == 0  # already its own: nothing walked
        assert reown_tree(anchor, "missing", NEW, NEW).changed == 0
        os.chown(work, 0, 0)
        assert reown_tree(anchor, "work", OLD, OLD).changed == 0  # root's: never handed to a worker
        os.chown(work, NEW, NEW)
    finally:
        os.close(anchor)
    assert {os.lstat(p).st_uid for p in (work, work / "sub", work / "sub" / "file", work / "link")} == {NEW}
    assert os.lstat(work / "planted").st_uid == 0
    assert _owner_mode(victim)[0] == 0 and _owner_mode(victim / "secret")[0] == 0


PAIRS = 16
#: Swaps each ``d<i>`` (a folder) with ``l<i>`` (a link to the victim) in its own tree as fast as it can until
#: ``stop`` exists.
RACER = f"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
top, stop = sys.argv[1], sys.argv[2]
fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
pairs = [(f"d{{i}}".encode(), f"l{{i}}".encode()) for i in range({PAIRS})]
swaps = 0
open(os.path.join(top, "started"), "w").close()
while not os.path.exists(stop):
    for d, link in pairs:
        if libc.renameat2(fd, d, fd, link, 2) == 0:  # RENAME_EXCHANGE
            swaps += 1
print(swaps)
"""


async def test_the_rename_race_changes_nothing_outside_the_tree(sandbox_tmp: Path) -> None:
    victim = _victim(sandbox_tmp)
    (victim / "inner").mkdir()
    for i in range(30):
        (victim / f"f{i}").write_text("root's")
    before = {p: _owner_mode(p) for p in (victim, *victim.iterdir())}
    tree = sandbox_tmp / "tree"
    for i in range(PAIRS):
        (tree / f"d{i}" / "deeper").mkdir(parents=True)
        for j in range(30):
            (tree / f"d{i}" / f"f{j}").write_text("x")
        (tree / f"l{i}").symlink_to(victim)
    for dirpath, dirnames, filenames in os.walk(tree):  # the test's own set-up, no worker running yet
        for name in (dirpath, *(os.path.join(dirpath, n) for n in (*dirnames, *filenames))):
            os.lchown(name, OLD, OLD)
    os.chmod(tree, 0o700)
    control = sandbox_tmp / "control"
    control.mkdir()
    rules = [FsRule(p, READ) for p in (*DEFAULT_SYSTEM_PATHS, *python_runtime_paths()) if os.path.exists(p)]
    rules += [FsRule(str(tree), WRITE), FsRule(str(control), READ)]
    outcome: list[object] = []
    rounds = {"changed": 0}

    async def race() -> None:
        outcome.append(
            await run_confined(
                [sys.executable, "-I", "-c", RACER, str(tree), str(control / "stop")],
                toolbox="racer",
                workdir=str(tree),
                fs_rules=rules,
                env={"PATH": "/usr/bin:/bin"},
                timeout_s=120,
                uid=OLD,
                gid=OLD,
            )
        )

    def reown_back_and_forth() -> None:
        anchor = open_anchor(str(sandbox_tmp))
        try:
            for _ in range(40):
                rounds["changed"] += reown_tree(anchor, "tree", NEW, NEW).changed
                reown_tree(anchor, "tree", OLD, OLD)  # the racer (OLD) can work on its tree again
        finally:
            os.close(anchor)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(race)
        with trio.fail_after(60):
            while not (tree / "started").exists():  # noqa: ASYNC110 - a file the confined racer writes
                await trio.sleep(0.01)
        try:
            await trio.to_thread.run_sync(reown_back_and_forth)
        finally:
            (control / "stop").write_text("")
    result = outcome[0]
    assert result.returncode == 0, result.stderr_text()  # type: ignore[attr-defined]
    assert int(result.stdout) > 0  # type: ignore[attr-defined]  # it did swap meanwhile
    assert rounds["changed"] > 40
    assert {p: _owner_mode(p) for p in before} == before


def test_rule_paths_follow_only_roots_links_outside_the_writable_trees(tmp_path: Path) -> None:
    """``open_rule_path`` (the launcher's Landlock rule opener): root's links are followed like the kernel would
    (absolute, relative, ``..``), another owner's link or one inside a writable tree is refused naming both paths,
    and the fd is the target's."""
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "f").write_text("x")
    (tmp_path / "up").symlink_to("real/../real")
    (tmp_path / "abs").symlink_to(tmp_path / "real")
    fd = open_rule_path(f"{tmp_path}/up/f")
    try:
        assert os.fstat(fd).st_ino == os.stat(tmp_path / "real" / "f").st_ino
    finally:
        os.close(fd)
    os.close(open_rule_path(f"{tmp_path}/abs/f"))
    os.lchown(tmp_path / "abs", 65534, 65534)
    with pytest.raises(UnsafeTreeError, match=f"{tmp_path}/abs is a symbolic link owned by uid 65534, not root"):
        open_rule_path(f"{tmp_path}/abs/f")
    os.close(open_rule_path(f"{tmp_path}/abs/f", root_links_only=False))  # a non-root launcher: owners say nothing
    with pytest.raises(UnsafeTreeError, match=f"{tmp_path}/up is a symbolic link inside {tmp_path}, which the"):
        open_rule_path(f"{tmp_path}/up/f", writable_trees=[str(tmp_path)])
    os.close(open_rule_path(f"{tmp_path}/up/f", writable_trees=[f"{tmp_path}/up"]))  # the tree itself may be a link
    with pytest.raises(FileNotFoundError):
        open_rule_path(f"{tmp_path}/missing/f")
    with pytest.raises(NotADirectoryError):
        open_rule_path(f"{tmp_path}/real/f/g")
    (tmp_path / "loop").symlink_to("loop")
    with pytest.raises(OSError, match="Too many levels"):
        open_rule_path(f"{tmp_path}/loop")
