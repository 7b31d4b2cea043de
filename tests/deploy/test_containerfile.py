"""The image's Containerfile, tested as far as this machine can: no container engine runs here (there is no Docker
or Podman, and base images cannot be fetched), so the image itself is never built. What is checked: its stages
parse and every ``COPY --from`` names an earlier stage, every file it copies from the checkout exists, the runtime
stage has no compiler and gets Node.js and npm (npm MCP servers) and the venv from the other stages, and the build
stage's own install step, run as written in a fresh folder holding exactly what the stage copies, makes a venv that
has the shipped policies (``init`` writes them) and the Lua preludes."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONTAINERFILE = REPO / "deploy" / "Containerfile"
VENV = "/opt/agents-supervise/venv"


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def copies(self) -> list[tuple[str | None, list[str], str]]:
        """(``--from`` stage or ``None``, sources, destination) of each COPY."""
        out = []
        for op, rest in self.instructions:
            if op == "COPY":
                words = shlex.split(rest)
                source = next((w.split("=", 1)[1] for w in words if w.startswith("--from=")), None)
                paths = [w for w in words if not w.startswith("--")]
                out.append((source, paths[:-1], paths[-1]))
        return out

    def runs(self) -> list[str]:
        return [rest for op, rest in self.instructions if op == "RUN"]


def _stages() -> list[Stage]:
    text = CONTAINERFILE.read_text().replace("\\\n", " ")
    stages: list[Stage] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        op, _, rest = line.partition(" ")
        if op == "FROM":
            words = rest.split()
            stages.append(Stage(words[0], words[2] if len(words) == 3 and words[1].upper() == "AS" else None))
        else:
            assert stages, f"{op} before any FROM"
            stages[-1].instructions.append((op, " ".join(rest.split())))
    return stages


def test_the_stages_parse_and_refer_to_each_other() -> None:
    stages = _stages()
    assert [s.name for s in stages] == ["build", "node", None]
    for i, stage in enumerate(stages):
        for source, paths, _ in stage.copies():
            if source is not None:
                assert source in [s.name for s in stages[:i]], f"COPY --from={source} names no earlier stage"
            else:
                for path in paths:
                    assert (REPO / path).exists(), f"{path} is copied but not in the checkout"


def test_the_runtime_stage_has_no_compiler_and_runs_node() -> None:
    runtime = _stages()[-1]
    installs = " ".join(r for r in runtime.runs() if "apt-get install" in r)
    assert "python3 " in installs and "git" in installs
    assert not any(w in installs.split() for w in ("gcc", "python3-dev", "libcap-dev", "build-essential"))
    copied = {(source, dest) for source, _, dest in runtime.copies()}
    assert ("node", "/usr/local/bin/node") in copied
    assert ("node", "/usr/local/lib/node_modules/npm") in copied
    assert ("build", VENV) in copied
    assert any("npm-cli.js /usr/local/bin/npm" in r for r in runtime.runs())


@pytest.mark.slow
def test_the_build_stages_install_step_makes_a_working_venv(tmp_path: Path) -> None:
    build = _stages()[0]
    context = tmp_path / "image"
    for source, paths, dest in build.copies():  # exactly what the stage copies, where it copies it
        assert source is None
        target = context / dest.lstrip("/")
        for path in paths:
            origin = REPO / path
            if origin.is_dir():
                shutil.copytree(origin, target if len(paths) == 1 else target / path, symlinks=True)
            else:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy(origin, target / Path(path).name)
    [install] = [r for r in build.runs() if "pip install" in r]
    venv = tmp_path / "venv"
    command = install.replace(VENV, str(venv)).replace("/src", str(context / "src"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = "/usr/bin:/bin"  # the image's python3 is Debian's
    done = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    init = subprocess.run(
        [str(venv / "bin" / "agents-supervise"), "init", str(tmp_path / "init")],
        env=env,
        cwd="/",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert init.returncode == 0, init.stderr
    assert (tmp_path / "init" / "coder" / "agent.json").exists()
    preludes = list(venv.glob("lib/python3*/site-packages/toolboxes/lua/_prelude.lua"))
    assert len(preludes) == 1
