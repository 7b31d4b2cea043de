"""Which agent a CLI command acts as: the agent of an ``--agent FILE``, unless a slug names another."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from supervisor.config import load_config
from supervisor.frontends._cli_agents import acting_agent, split_agents
from tests._policies import agent, system_toolbox, write_policy

REPO = Path(__file__).resolve().parents[3]


def _files(root: Path) -> tuple[Path, Path, Path]:
    policy = write_policy(root, {"first": agent("first", builtinToolboxes=[system_toolbox("system", ["date"])])})
    for slug in ("mine", "other"):
        (root / f"{slug}.json").write_text(
            json.dumps(agent(slug, builtinToolboxes=[system_toolbox("system", ["uptime"])]))
        )
    return policy, root / "mine.json", root / "other.json"


def _args(*agents: str, agent_files: tuple[str, ...] = (), serve_agent: str | None = None) -> argparse.Namespace:
    return argparse.Namespace(agent=list(agents), agent_files=list(agent_files), serve_agent=serve_agent)


def test_an_agent_file_names_the_agent_to_act_as(tmp_path: Path) -> None:
    policy, mine, other = _files(tmp_path)
    args = _args(str(mine), agent_files=(str(other),))
    assert split_agents(args) is None
    assert args.agent == [str(mine), str(other)] and args.named_files == [str(mine)]
    config = load_config(str(policy), args.agent)
    assert acting_agent(config, args.named_files) == "mine"  # --agent-file only loads
    assert acting_agent(config, []) is None


def test_two_agent_files_name_no_one_agent(tmp_path: Path) -> None:
    policy, mine, other = _files(tmp_path)
    config = load_config(str(policy), [str(mine), str(other)])
    with pytest.raises(ValueError, match=r"describe 2 agents \(mine, other\).*--agent SLUG.*--agent-file"):
        acting_agent(config, [str(mine), str(other)])


def test_a_slug_wins_over_the_file(tmp_path: Path) -> None:
    _, mine, _ = _files(tmp_path)
    args = _args(str(mine), "first")
    assert split_agents(args) == "first" and args.agent == [str(mine)]  # loaded, not acted as


def test_the_cli_refuses_two_agent_files_before_anything_starts(tmp_path: Path) -> None:
    policy, mine, _ = _files(tmp_path)
    run = [sys.executable, "-m", "supervisor", "tools", "--policy", str(policy), "--json"]
    two = subprocess.run(
        [*run, "--agent", str(mine), "--agent", str(tmp_path / "other.json")],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert two.returncode == 2 and "describe 2 agents (mine, other)" in two.stderr, two.stderr
    assert "Traceback" not in two.stderr
