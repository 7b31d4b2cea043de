"""Showing a private file at a system path: root writes it in a folder the worker's uid can write, so the path is not
trusted after the create. A racer that swaps the name for a link to a root-only file at the worst moment (right
before the mount) gains nothing: the mount shows the generated content (or, when the racer deleted the file, the step
fails), never the link's target, and the target keeps its mode."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.root

REPO = str(Path(__file__).resolve().parents[2])

_CHILD = r"""
import os, sys
import sandbox._private_files as pf

workdir, target, secret, how = sys.argv[1:5]
real_mount = pf.mount
swapped = []

def racing_mount(source, where, fstype, flags, *, step):
    if not swapped:  # the racer's move, between the write and the mount: the name now leads to a root-only file
        [name] = [n for n in os.listdir(workdir) if n.startswith(".")]
        if how == "rename":
            os.rename(os.path.join(workdir, name), os.path.join(workdir, "moved"))
        else:
            os.unlink(os.path.join(workdir, name))
        os.symlink(secret, os.path.join(workdir, name))
        swapped.append(name)
    real_mount(source, where, fstype, flags, step=step)

pf.enter_private_mounts(step="test")
pf.mount = racing_mount
try:
    pf.show_private_file("generated\n", target, workdir=workdir, step="test")
except pf.ConfinementError as exc:
    print(f"refused: {exc}")
with open(target) as f:
    print(f.read(), end="")
"""


@pytest.mark.parametrize("how", ["rename", "unlink"])
def test_a_name_swapped_before_the_mount_is_not_followed(sandbox_tmp: Path, how: str) -> None:
    workdir = sandbox_tmp / "work"
    workdir.mkdir()
    target = sandbox_tmp / "target"
    target.write_text("original\n")
    secret = sandbox_tmp / "secret"
    secret.write_text("root only\n")
    secret.chmod(0o600)
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(workdir), str(target), str(secret), how],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": REPO},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    if how == "rename":  # the file lives on under another name: the fd's file is what is shown
        assert done.stdout == "generated\n"
    else:  # the file is gone: nothing can be shown, the step fails (that worker does not start)
        assert done.stdout.startswith("refused: ") and done.stdout.endswith("original\n")
    assert "root only" not in done.stdout  # never the link's target
    assert secret.stat().st_mode & 0o777 == 0o600  # no chmod through the link
    assert target.read_text() == "original\n"  # the mount stayed in the child's namespace
    assert ".target" not in " ".join(os.listdir(workdir))  # the name (now the racer's link) was removed
