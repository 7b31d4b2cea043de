"""Every JSON agent example of seed 004 loads unchanged with ``agents-supervise check`` and ``tools``.

The examples are in ``tests/fixtures/seed004/`` (the two full agents, ``coder`` and ``file-agent``, ship as
``examples/<slug>/agent.json``), cut verbatim from the seed (line ranges in ``SOURCES``). A full agent
file is written as it is; a fragment (a ``builtinToolboxes`` list, a toolbox entry, a ``FileSandbox``, a predicate,
the skills config) goes, unchanged, into the smallest agent that holds it. Around each agent file the test makes
stand-ins for what it references: folders, the SQLite databases, the bash tool, the sub-agent file, a skill for
``autoEnableSkills``. What cannot be stood in for stays missing and must be a load error or a warning, never a
refusal: ``/usr/bin/mcp-filesystem``, the approval script ``/path/to/approval-script.sh``, and the remote servers
(``api.github.com``, ``api.example.com``, ``github.com``, a PostgREST on ``localhost:3000``). The seed's other
JSON examples (tool inputs and outputs, scripts, verdicts) are run in ``tests/supervisor/test_seed004_examples_e2e.py``,
which also checks that every JSON example of the seed is one of the two modules' fixtures.

``tools`` starts real confined workers, and the OpenAPI, PostgREST and git toolboxes try their hosts: so it runs in
the lab's supervisor network namespace (``tests/sandbox/_netlab.py``), where no name resolves to anything outside
the lab and no packet leaves it. Each example gets a policy of its own (``coder`` and ``file-agent``, both with a
``system`` toolbox, are also served together from one policy: ``tests/supervisor/frontends/test_many_agents.py``).
The policy is the shipped ``permissive.yaml``'s settings: some examples are refused by ``strict.yaml`` by design
(a ``FilePattern`` alone reaches the whole filesystem), which ``check`` says.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from tests._policies import write_policy
from tests.sandbox._netlab import REPO, Lab

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

pytestmark = pytest.mark.root

SEED = Path(REPO) / "tests" / "fixtures" / "seed004"
#: the seed's two full agents ship as the project's examples (examples/<slug>/agent.json), byte for byte
EXAMPLES = Path(REPO) / "examples"
SHIPPED = {"coder.json": EXAMPLES / "coder" / "agent.json", "file-agent.json": EXAMPLES / "file-agent" / "agent.json"}


def seed_file(name: str) -> Path:
    """The file holding the seed's example ``name`` (``SOURCES``): a fixture, or a shipped example."""
    return SHIPPED.get(name, SEED / name)


PERMISSIVE = Path(REPO) / "policies" / "permissive.yaml"
ASK_USER = Path(REPO) / "policies" / "examples" / "kimi" / "tools" / "askuser" / "ask-user.bash"
#: where each fixture was cut from (lines of ../shared/seeds/004_bef637d7703902f1.txt)
SOURCES = {
    "coder.json": "247-276",
    "local_lrmlua.json": "781-845",
    "file-agent.json": "1334-1446",
    "openapi-toolboxes.json": "146-159",
    "postgrest-toolboxes.json": "187-197",
    "sqlite-analytics.json": "217-228",
    "system-toolbox.json": "337-355",
    "system-sessions-entry.json": "405-422",
    "developer-toolbox.json": "509-525",
    "developer-file-sandbox.json": "527-539",
    "predicate-any.json": "295-304",
    "predicate-and-three.json": "306-315",
    "predicate-and-not.json": "317-325",
    "predicate-patterns.json": "327-335",
    "allowed-paths-old.json": "848-850",
    "file-sandbox-new.json": "853-863",
    "skills-config.json": "1004-1015",
}


def _shell(slug: str, **keys: Any) -> dict[str, Any]:
    """The smallest agent file holding a fragment (the seed's required keys, nothing else)."""
    return {
        "tag": "OpenAIAgentDescription",
        "contents": {
            "slug": slug,
            "apiKeyId": "openai",
            "flavor": "openai",
            "modelUrl": "https://api.openai.com/v1",
            "modelName": "gpt-4o",
            "announce": f"holds the seed's {slug} example",
            "systemPrompt": ["You help."],
            **keys,
        },
    }


def _developer(sandbox: dict[str, Any]) -> dict[str, Any]:
    return {
        "tag": "DeveloperToolbox",
        "contents": {
            "Name": "dev",
            "Description": "Development utilities",
            "Capabilities": ["read-file-range"],
            "FileSandbox": sandbox,
        },
    }


#: fixture -> (agent file contents from the fragment, tools that must be listed)
AGENTS: dict[str, tuple[Callable[[Any], Any], set[str]]] = {
    "coder.json": (lambda f: f, {"developer_dev_read_file_range", "lua_lua_execute", "system_system_attach_file"}),
    "local_lrmlua.json": (
        lambda f: f,
        {"bash_ask_user", "lua_lua_execute", "sqlite_shared_working_memory_query", "io_prompt_agent_local_lrmlua"},
    ),
    "file-agent.json": (
        lambda f: f,
        {
            "sqlite_analytics_query",
            "system_system_execute_command",
            "developer_dev_patch_file",
            "lua_lua_execute",
            "skill_enable_core-utils",
            "io_prompt_agent_helper",
            "bash_extra_tool",
        },
    ),
    "openapi-toolboxes.json": (lambda f: _shell("api", **f), set()),
    "postgrest-toolboxes.json": (lambda f: _shell("pg", **f), set()),
    "sqlite-analytics.json": (lambda f: _shell("analyst", **f), {"sqlite_analytics_query"}),
    "system-toolbox.json": (lambda f: _shell("sys", **f), {"system_system_date", "system_system_list_directory"}),
    "system-sessions-entry.json": (
        lambda f: _shell("memory", builtinToolboxes=[f]),
        {"system_system_list_sessions", "system_system_get_session_stats"},
    ),
    "developer-toolbox.json": (lambda f: _shell("dev", **f), {"developer_dev_show_spec", "developer_dev_patch_file"}),
    "developer-file-sandbox.json": (
        lambda f: _shell("devsb", builtinToolboxes=[_developer(f["FileSandbox"])]),
        {"developer_dev_read_file_range"},
    ),
    "predicate-any.json": (lambda f: _shell("p1", builtinToolboxes=[_developer(f)]), {"developer_dev_read_file_range"}),
    "predicate-and-three.json": (
        lambda f: _shell("p2", builtinToolboxes=[_developer(f)]),
        {"developer_dev_read_file_range"},
    ),
    "predicate-and-not.json": (
        lambda f: _shell("p3", builtinToolboxes=[_developer(f)]),
        {"developer_dev_read_file_range"},
    ),
    "predicate-patterns.json": (
        lambda f: _shell("p4", builtinToolboxes=[_developer(f)]),
        {"developer_dev_read_file_range"},
    ),
    "allowed-paths-old.json": (
        lambda f: _shell(
            "old",
            builtinToolboxes=[
                {
                    "tag": "LuaToolbox",
                    "contents": {
                        "Name": "lua",
                        "Description": "Lua",
                        "MaxMemoryMB": 64,
                        "MaxExecutionTimeSeconds": 5,
                        "AllowedTools": [],
                        "AllowedHosts": [],
                        **f,
                    },
                }
            ],
        ),
        {"lua_lua_execute"},
    ),
    "file-sandbox-new.json": (
        lambda f: _shell(
            "new",
            builtinToolboxes=[
                {
                    "tag": "LuaToolbox",
                    "contents": {
                        "Name": "lua",
                        "Description": "Lua",
                        "MaxMemoryMB": 64,
                        "MaxExecutionTimeSeconds": 5,
                        "AllowedTools": [],
                        "AllowedHosts": [],
                        **f,
                    },
                }
            ],
        ),
        {"lua_lua_execute"},
    ),
    "skills-config.json": (lambda f: _shell("skilled", **f), {"skill_list", "skill_enable_core-utils"}),
}

EXTRA_TOOL = """#!/bin/bash
if [ "$1" = describe ]; then
  echo '{"slug": "extra-tool", "description": "a stand-in", "args": [],'
  echo ' "empty-result": {"tag": "AddMessage", "contents": "-"}}'
  exit 0
fi
echo ran
"""


def _stand_ins(folder: Path) -> None:
    """What the examples reference, relative to their agent file."""
    for d in (
        "src",
        "test",
        "project",
        "repro-cases",
        "data",
        "scripts",
        "my-project/dist",
        "tools",
        "extra-tools",
        "output",
    ):
        (folder / d).mkdir(parents=True, exist_ok=True)
    (folder / "src" / "Main.hs").write_text("main = pure ()\n")
    for f in ("package.yaml", "README.md"):
        (folder / f).write_text("stand-in\n")
    skill = folder / "skills" / "core-utils"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: core-utils\ndescription: stand-in skill\n---\nUse it.\n")
    (folder / "tools" / "askuser").mkdir()
    shutil.copy(ASK_USER, folder / "tools" / "askuser" / "ask-user.bash")
    (folder / "extra-tools" / "extra-tool").write_text(EXTRA_TOOL)
    (folder / "extra-tools" / "extra-tool").chmod(0o755)
    for db in ("analytics.db", "dev-memory.db"):
        with sqlite3.connect(folder / db) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS t (x)")
        os.chmod(folder / db, 0o644)
    (folder / "helper.json").write_text(json.dumps(_shell("helper")))
    (folder / "kimi-10.lrmlua.json").write_text(json.dumps(_shell("local_lrmlua")))
    for dirpath, _, _ in os.walk(folder):
        os.chmod(dirpath, 0o755)


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    os.makedirs("/tmp/agents-supervise-tests", exist_ok=True)
    root = Path(tempfile.mkdtemp(dir="/tmp/agents-supervise-tests"))
    os.chmod(root, 0o755)
    lab = Lab(root)
    try:
        yield lab
    finally:
        lab.close()
        shutil.rmtree(root, ignore_errors=True)


def _supervisor(lab: Lab, *command: str) -> subprocess.CompletedProcess[str]:
    """``python -m supervisor COMMAND`` in the lab's supervisor network namespace (see test_network_e2e.py)."""
    return subprocess.run(
        [
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            'mount --bind "$0" /etc/resolv.conf && net="$1" && shift && exec nsenter --net="$net" "$@"',
            f"/etc/netns/{lab.sup}/resolv.conf",
            f"/run/netns/{lab.sup}",
            sys.executable,
            "-m",
            "supervisor",
            *command,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": REPO, "GITHUB_TOKEN": "stand-in-token", "API_TOKEN": "stand-in-token"},
    )  # file-agent's ${GITHUB_TOKEN}, the OpenAPI example's ${API_TOKEN}


def test_the_fixtures_are_the_seeds_text() -> None:
    seed = Path(REPO).parent / "shared" / "seeds" / "004_bef637d7703902f1.txt"
    # blocks.json: the seed's other examples, run by test_seed004_examples_e2e.py
    assert set(SOURCES) == ({p.name for p in SEED.iterdir()} - {"blocks.json"}) | set(SHIPPED) == set(AGENTS)
    if not seed.exists():  # a checkout outside the project's workspace: the fixtures are the record
        return
    lines = seed.read_text().split("\n")
    for name, span in SOURCES.items():
        first, last = (int(n) for n in span.split("-"))
        assert seed_file(name).read_text() == "\n".join(lines[first - 1 : last]) + "\n", name


#: The seed's placeholders that are not JSON, and what stands in for them (``"mcpServers": [...]``: none).
PLACEHOLDERS = {"[...]": "[]"}


def _filled(text: str) -> str:
    for placeholder, value in PLACEHOLDERS.items():
        text = text.replace(placeholder, value)
    return text


def _prepare(example: str, root: Path) -> Path:
    """The example's agent file among its stand-ins, and a policy of its own; returns the policy."""
    build, _ = AGENTS[example]
    folder = root / "agent"
    folder.mkdir(parents=True)
    _stand_ins(folder)
    data = json.loads(_filled(seed_file(example).read_text()))
    agent_file = folder / "agent.json"
    contents = build(data)
    if contents is data:
        shutil.copy(seed_file(example), agent_file)  # byte for byte
    else:
        agent_file.write_text(json.dumps(contents, indent=2))
    settings = {k: v for k, v in yaml.safe_load(PERMISSIVE.read_text()).items() if k not in ("agents", "state_dir")}
    policy = write_policy(root, {}, **settings)
    policy.write_text(policy.read_text().replace("agents: []", f"agents: [{agent_file}]"))
    return policy


@pytest.fixture(scope="module")
def outcomes(
    lab: Lab,
) -> Iterator[dict[str, tuple[Path, subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]]]:
    """``check`` and ``tools --json`` of every example, four examples at a time (each in its own folder)."""
    from concurrent.futures import ThreadPoolExecutor

    os.makedirs("/tmp/agents-supervise-tests", exist_ok=True)
    base = Path(tempfile.mkdtemp(dir="/tmp/agents-supervise-tests"))
    os.chmod(base, 0o755)

    def run(example: str) -> tuple[Path, subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
        root = base / example.removesuffix(".json")
        policy = _prepare(example, root)
        return (
            policy,
            _supervisor(lab, "check", "--policy", str(policy)),
            _supervisor(lab, "tools", "--policy", str(policy), "--json"),
        )

    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            yield dict(zip(AGENTS, pool.map(run, AGENTS), strict=True))
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.parametrize("example", list(AGENTS))
def test_each_seed_example_loads_with_check_and_tools(example: str, outcomes: dict[str, Any]) -> None:
    _, expected = AGENTS[example]
    policy, check, tools = outcomes[example]
    assert check.returncode == 0, check.stderr
    assert "Traceback" not in check.stdout + check.stderr
    assert check.stdout.startswith(f"policy {policy}")
    assert tools.returncode == 0, tools.stderr
    assert "Traceback" not in tools.stderr
    listed = json.loads(tools.stdout)
    names = {t["name"] for t in listed["tools"]}
    assert expected <= names, (sorted(names), listed["load_errors"])
    if example == "allowed-paths-old.json":  # the removed key: a warning in check and tools, saying what to write
        assert "'allowedPaths' was removed and is ignored" in check.stdout
        assert "'allowedPaths' was removed and is ignored" in tools.stderr
        assert any("allowedPaths" in w for w in listed["warnings"])
