"""The wheel holds every file the runtime needs (issue 25, item 4): each tracked file of the three packages (the Lua
preludes too, which no ``*.py`` rule catches), and the shipped policies and examples as package data under
``supervisor/shipped/``, executables still executable, the seed's Python tool template too (setuptools copies
``.py`` files as modules, without their mode; ``_build_py.py`` keeps it). Installed with pip into a fresh venv, the
installed template runs as a bash toolbox's tool of the installed supervisor under the shipped ``strict.yaml``.
The wheel is built once for the module. (``tests/newcomer/test_quickstart.py`` installs the project as the README
says into a fresh venv and serves calls from it.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from typing import TYPE_CHECKING

import pytest

from tests._policies import shipped_policy
from tests.newcomer._readme import REPO

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow

#: the seed's Python tool template, as the wheel ships it
TEMPLATE = "supervisor/shipped/policies/examples/tools/python/my-tool.py"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built once for this module as a user builds it (``pip wheel``), from a copy of the
    checkout's files (tracked or not ignored; links kept as links): pip builds in the source folder, and a ``build/``
    left there by an earlier build would hand its files on unchecked."""
    source, folder = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("wheel")
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout
    for name in filter(None, listed.decode().split("\0")):
        if not os.path.lexists(REPO / name):  # deleted, not yet committed
            continue
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name, follow_symlinks=False)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(folder), str(source)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    [built] = folder.glob("agents_supervise-*.whl")
    return built


def _tracked(*folders: str) -> list[str]:
    done = subprocess.run(["git", "ls-files", *folders], cwd=REPO, capture_output=True, text=True, check=True)
    return [line for line in done.stdout.splitlines() if line]


def test_the_wheel_ships_the_runtime_the_policies_and_the_examples(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        infos = {i.filename: i for i in archive.infolist()}
    runtime = [f for f in _tracked("sandbox", "toolboxes", "supervisor") if not f.startswith("supervisor/shipped/")]
    shipped = {f"supervisor/shipped/{f}": f for f in _tracked("policies", "examples")}
    missing = sorted(f for f in [*runtime, *shipped] if f not in infos)
    assert missing == []
    for name, source in shipped.items():
        executable = bool((REPO / source).stat().st_mode & 0o111)
        assert bool((infos[name].external_attr >> 16) & 0o111) == executable, name
    assert "supervisor/shipped/examples/file-agent/extra-tools/word-count" in shipped  # one that must stay runnable
    assert (infos[TEMPLATE].external_attr >> 16) & 0o111, "the Python tool template lost its executable bit"


@pytest.mark.root
def test_the_installed_python_tool_runs_as_a_tool_of_the_installed_supervisor(wheel: Path, sandbox_tmp: Path) -> None:
    """What a pip user does with the seed's Python tool template: install the wheel into a fresh venv (made from
    Debian's Python, readable by the workers' uid), name the installed template as a bash ``SingleTool`` of an
    agent, and call it with the installed ``agents-supervise`` under the shipped ``strict.yaml``."""
    venv = sandbox_tmp / "venv"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the install's code, never the checkout's
    subprocess.run(["/usr/bin/python3", "-m", "venv", str(venv)], check=True, timeout=120, env=env)
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", str(wheel)],
        check=True,
        capture_output=True,
        timeout=900,
        env=env,
    )
    [site] = venv.glob("lib/python3*/site-packages")
    template = site / TEMPLATE
    assert os.access(template, os.X_OK), oct(template.stat().st_mode)
    agent_file = sandbox_tmp / "template-agent.json"
    agent_file.write_text(
        json.dumps({"slug": "template", "bashToolboxes": [{"tag": "SingleTool", "contents": {"Path": str(template)}}]})
    )
    strict = site / "supervisor" / "shipped" / "policies" / "strict.yaml"
    policy = shipped_policy(sandbox_tmp, strict, [agent_file])
    done = subprocess.run(
        [str(venv / "bin" / "agents-supervise"), "call", "--policy", str(policy), "bash_my_tool"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=sandbox_tmp,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Tool my-tool executed" in done.stdout, done.stdout
