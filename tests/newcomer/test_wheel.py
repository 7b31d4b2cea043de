"""The wheel holds every file the runtime needs (issue 25, item 4): each tracked file of the three packages (the Lua
preludes too, which no ``*.py`` rule catches), and the shipped policies and examples as package data under
``supervisor/shipped/``, executables still executable. (``tests/newcomer/test_quickstart.py`` installs it into a
fresh venv and serves calls from it.)"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from typing import TYPE_CHECKING

import pytest

from tests.newcomer._readme import REPO

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow


def _tracked(*folders: str) -> list[str]:
    done = subprocess.run(["git", "ls-files", *folders], cwd=REPO, capture_output=True, text=True, check=True)
    return [line for line in done.stdout.splitlines() if line]


def test_the_wheel_ships_the_runtime_the_policies_and_the_examples(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(REPO)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    [wheel] = tmp_path.glob("agents_supervise-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        infos = {i.filename: i for i in archive.infolist()}
    runtime = [f for f in _tracked("sandbox", "toolboxes", "supervisor") if not f.startswith("supervisor/shipped/")]
    shipped = {f"supervisor/shipped/{f}": f for f in _tracked("policies", "examples")}
    missing = sorted(f for f in [*runtime, *shipped] if f not in infos)
    assert missing == []
    for name, source in shipped.items():
        if source.endswith(".py"):  # setuptools copies these as modules, without their mode (init writes none)
            continue
        executable = bool((REPO / source).stat().st_mode & 0o111)
        assert bool((infos[name].external_attr >> 16) & 0o111) == executable, name
    assert "supervisor/shipped/examples/file-agent/extra-tools/word-count" in shipped  # one that must stay runnable
