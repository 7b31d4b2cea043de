"""An MCP server's executable as the supervisor resolves it (``supervisor/plan/_mcp_executable.py``): the package
tree it belongs to, the path the worker runs, and the refusal of anything a worker could change. Real trees, walked
through directory fds (``sandbox._path_walk``)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

from sandbox import READ, FsRule, UnsafeTreeError
from supervisor.plan._mcp_executable import package_trees, plan_server_files, worker_writable_judge

if TYPE_CHECKING:
    from pathlib import Path

WORKER_UID = 3000000007
JUDGE = worker_writable_judge(lambda uid: uid in (65534, WORKER_UID), lambda gid: gid in (65534, 2000))


def test_the_outermost_node_modules_or_the_venv_is_the_package_tree() -> None:
    venvs = {"/srv/venv"}
    assert package_trees(
        ["/p/node_modules/.bin/x", "/p/node_modules/a/node_modules/b/dist/index.js"], venvs.__contains__
    ) == ["/p/node_modules"]
    assert package_trees(["/srv/venv/bin/server", "/srv/venv/lib/x.py"], venvs.__contains__) == ["/srv/venv"]
    assert package_trees(["/usr/local/bin/tool"], venvs.__contains__) == []  # a lone program: no tree
    assert package_trees(["/node_modules"], venvs.__contains__) == []  # never / (nor a file named so)


def _tree(root: Path) -> Path:
    """``root/proj``: an npm-like install with a ``.bin`` link, all root's (as an install by root is)."""
    pkg = root / "proj" / "node_modules" / "@scope" / "server" / "dist"
    pkg.mkdir(parents=True)
    (pkg / "index.js").write_text("#!/usr/bin/env node\n")
    (pkg / "index.js").chmod(0o755)
    (root / "proj" / "node_modules" / ".bin").mkdir()
    (root / "proj" / "node_modules" / ".bin" / "server").symlink_to("../@scope/server/dist/index.js")
    return root / "proj"


@pytest.mark.root
def test_a_link_only_the_supervisor_accepts_is_run_where_the_granted_tree_shows_it(tmp_path: Path) -> None:
    proj = _tree(tmp_path)
    os.lchown(proj / "node_modules" / ".bin" / "server", 4242, 4242)  # a user's npm install: not root's
    files = plan_server_files(str(proj / "node_modules/.bin/server"), judge=JUDGE, system_paths=["/usr"])
    assert files.run == str(proj / "node_modules/.bin/server")
    assert set(files.rules) == {
        FsRule(str(proj / "node_modules/@scope/server/dist/index.js"), READ),
        FsRule(str(proj / "node_modules"), READ),
    }
    # a user's link outside every granted tree: the worker runs the file it leads to (the link is not shown)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "server").symlink_to(proj / "node_modules/.bin/server")
    os.lchown(tmp_path / "bin" / "server", 4242, 4242)
    files = plan_server_files(str(tmp_path / "bin/server"), judge=JUDGE, system_paths=["/usr"])
    assert files.run == str(proj / "node_modules/@scope/server/dist/index.js")
    assert files.trees == (str(proj / "node_modules"),)


@pytest.mark.root
def test_root_links_are_left_to_the_launcher_and_a_venv_is_granted(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (venv / "bin" / "python").symlink_to("/usr/bin/python3")
    (venv / "bin" / "mcp-server").write_text(f"#!{venv}/bin/python\n")
    files = plan_server_files(str(venv / "bin/mcp-server"), judge=JUDGE, system_paths=["/usr"])
    assert files.run == str(venv / "bin/mcp-server") and files.trees == (str(venv),)
    assert FsRule(str(venv), READ) in files.rules


@pytest.mark.root
@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda p: os.lchown(p / "node_modules" / ".bin", 65534, 65534), "belongs to uid 65534, a worker's"),
        (lambda p: os.lchown(p / "node_modules" / ".bin" / "server", WORKER_UID, 0), f"belongs to uid {WORKER_UID}"),
        (lambda p: os.chmod(p / "node_modules", 0o777), "is writable by every user (mode 0777)"),
        (lambda p: (os.chown(p, 0, 2000), os.chmod(p, 0o775)), "is writable by group 2000, which workers are in"),
        (lambda p: os.chmod(p / "node_modules/@scope/server/dist/index.js", 0o757), "writable by every user"),
    ],
    ids=["bin-folder-of-a-worker", "link-of-a-worker", "world-writable-folder", "shared-group-folder", "the-file"],
)
def test_anything_a_worker_could_change_on_the_way_is_refused_by_name(tmp_path: Path, change: object, why: str) -> None:
    proj = _tree(tmp_path)
    change(proj)  # type: ignore[operator]
    with pytest.raises(UnsafeTreeError, match="a worker could change what this MCP server runs") as caught:
        plan_server_files(str(proj / "node_modules/.bin/server"), judge=JUDGE, system_paths=["/usr"])
    assert why in str(caught.value)


@pytest.mark.root
def test_a_sticky_world_writable_folder_keeps_others_entries_theirs(tmp_path: Path) -> None:
    tmp_path.chmod(0o1777)  # like /tmp: a worker may add entries, never replace root's
    proj = _tree(tmp_path)
    files = plan_server_files(str(proj / "node_modules/.bin/server"), judge=JUDGE, system_paths=[])
    assert files.trees == (str(proj / "node_modules"),)
