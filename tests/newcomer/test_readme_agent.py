"""The README's first command with the README's example agent (issue 25, item 1): ``agents-supervise --policy
policies/strict.yaml --agent my-agent.json``, typed in a clone's folder beside the unchanged shipped policies, serves
MY agent over stdio to the official MCP SDK client: its tools, not the policy's first agent's; the same under
``permissive.yaml``. The command line and the agent file are read from README.md."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from typing import TYPE_CHECKING

import pytest
import trio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.newcomer._readme import REPO, code_block_after, command_line, newcomer_env, private_paths_argv, readme

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.root

STATE_DIR = "/var/lib/agents-supervise"  # the shipped policies' state_dir: a fresh tmpfs for this test


def _clone(root: Path) -> Path:
    """A clone's folder as a newcomer has it: the shipped policies (copied unchanged) and the README's agent file
    saved as my-agent.json."""
    clone = root / "clone"
    shutil.copytree(REPO / "policies", clone / "policies", symlinks=True)
    (clone / "my-agent.json").write_text(code_block_after("this `my-agent.json`", "json"))
    folders = re.search(r"with the folders it names made \(`mkdir ([^`]+)`\)", " ".join(readme().split()))
    assert folders is not None, "README.md no longer says which folders to make"
    subprocess.run(["mkdir", *folders.group(1).split()], cwd=clone, check=True)
    clone.chmod(0o755)
    return clone


@pytest.mark.parametrize("policy", ["strict.yaml", "permissive.yaml"])
async def test_the_readme_command_serves_the_readme_agent(sandbox_tmp: Path, policy: str) -> None:
    command = command_line("agents-supervise --policy policies/strict.yaml --agent my-agent.json")
    argv = shlex.split(command.replace("policies/strict.yaml", f"policies/{policy}"))
    clone = _clone(sandbox_tmp)
    agent = json.loads((clone / "my-agent.json").read_text())["contents"]
    assert (clone / "policies" / policy).read_bytes() == (REPO / "policies" / policy).read_bytes()
    run = private_paths_argv([STATE_DIR], argv)
    params = StdioServerParameters(command=run[0], args=run[1:], env=newcomer_env(), cwd=str(clone))
    with trio.fail_after(180):
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            names = {t.name for t in (await session.list_tools()).tools}
            # my agent's tools (README: date, list-directory, execute-command, and the notes database), not the
            # policy's first agent's (agents/system.json: uptime, hostname, ...)
            assert agent["slug"] == "coder"
            assert names == {
                "system_system_date",
                "system_system_list_directory",
                "system_system_execute_command",
                "sqlite_notes_query",
            }
            result = await session.call_tool("system_system_execute_command", {"command": "id -u; hostname"})
            assert result.is_error is False, result
            out = result.structured_content
            assert out is not None and out["exitCode"] == 0
            uid, hostname = out["stdout"].split()
            assert int(uid) != 0 and hostname == "sandbox"  # a confined worker, not the supervisor's shell
            date = await session.call_tool("system_system_date", {})
            assert date.is_error is False and (date.structured_content or {}).get("capability") == "date"
