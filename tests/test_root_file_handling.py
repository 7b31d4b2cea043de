"""The supervisor changes files on trees a worker can write only through ``sandbox._dirfd`` (dir fds, no link ever
followed). This test reads the trusted package's source: a path-based chown, chmod, mkdir or walk anywhere else
fails it, unless the place is listed below with why no worker can write there."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Calls that act on a path (following links in it) or walk a tree by path.
PATH_CALLS = {
    ("os", n)
    for n in (
        "chown",
        "lchown",
        "chmod",
        "lchmod",
        "makedirs",
        "mkdir",
        "walk",
        "fwalk",
        "rename",
        "replace",
        "removedirs",
        "link",
        "symlink",
        "mkfifo",
    )
}
PATH_CALLS |= {
    ("shutil", n) for n in ("chown", "copytree", "copy", "copy2", "copyfile", "move", "copymode", "copystat")
}

#: (module, call) -> why no worker can write where it acts.
ALLOWED = {
    ("supervisor/workers/_staging.py", "os.walk"): "the runtime folder under the state dir, read-only to workers",
    ("supervisor/workers/_staging.py", "os.makedirs"): "the same runtime folder",
    ("supervisor/workers/_staging.py", "os.chmod"): "the same runtime folder",
    ("supervisor/workers/_staging.py", "shutil.copyfile"): "copies the supervisor's own code into that folder",
    ("supervisor/workers/_staging.py", "os.rename"): "the same runtime folder",
    ("supervisor/_check_tool.py", "os.chmod"): "the fresh mkdtemp folder root made, before anything runs",
    (
        "supervisor/workers/_tool_cache.py",
        "os.makedirs",
    ): "the lazy toolboxes' tool-list cache under the state dir, never granted to a worker",
    ("supervisor/calls/_attachments.py", "os.makedirs"): "the supervisor's attachment store, never granted to a worker",
    (
        "supervisor/sessions/_store_schema.py",
        "os.makedirs",
    ): "the sessions database's folder, never granted to a worker",
    ("supervisor/sessions/_store_schema.py", "os.chmod"): "the sessions database, never granted to a worker",
    ("supervisor/calls/_attachments.py", "os.replace"): "a file of that store",
    ("supervisor/traces/_recorder.py", "os.makedirs"): "the trace file's folder, never granted to a worker",
    ("supervisor/traces/_recorder.py", "os.replace"): "the trace file, rotated in that folder",
    ("supervisor/plan/_skill_clones.py", "os.rename"): "a finished clone into place inside that root-owned parent",
    (
        "supervisor/frontends/_cli_init.py",
        "os.mkdir",
    ): "`init DIR`: the new or empty folder the operator names, before any policy (so any worker) exists; files "
    "in it are made O_EXCL|O_NOFOLLOW",
    ("supervisor/frontends/_cli_init.py", "os.chmod"): "the same new folder and the ones init makes in it",
}


def _path_calls(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and (node.func.value.id, node.func.attr) in PATH_CALLS
            and not {k.arg for k in node.keywords} & {"dir_fd", "src_dir_fd"}
        ):  # relative to a dir fd: fine
            found.add(f"{node.func.value.id}.{node.func.attr}")
    return found


def test_the_supervisor_touches_worker_trees_only_through_dir_fds() -> None:
    offenders = {}
    for path in sorted((ROOT / "supervisor").rglob("*.py")):
        module = str(path.relative_to(ROOT))
        calls = {c for c in _path_calls(path) if (module, c) not in ALLOWED}
        if calls:
            offenders[module] = sorted(calls)
    assert offenders == {}, (
        "path-based file operations as root: use sandbox._dirfd (or, where no worker can "
        "write, list the place in ALLOWED with the reason)"
    )


def test_the_checker_sees_a_path_based_chown(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nos.chown(p, 1, 1)\nos.fchown(fd, 1, 1)\nos.rename(a, b, src_dir_fd=d, dst_dir_fd=d)\n")
    assert _path_calls(bad) == {"os.chown"}


def test_rmtree_is_the_fd_based_one() -> None:
    """``shutil.rmtree`` (used on folders a confined process wrote) walks with dir fds on this platform."""
    assert shutil.rmtree.avoids_symlink_attacks
