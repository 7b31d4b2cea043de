"""npm MCP servers installed the way their READMEs say, run under the shipped ``policies/strict.yaml`` unchanged and
called by the official MCP SDK client (issue 25).

A user runs ``npm install @modelcontextprotocol/server-filesystem`` in a folder of theirs and names
``node_modules/.bin/mcp-server-filesystem`` (a relative symlink into the package, owned by them) as the server's
executable. The install is made once per session from the npm registry (pinned to the versions ``scripts/setup``
put under ``/usr``, so npm's cache answers) into a cached folder; each test copies it and gives the copy to an
operator's uid that is no worker's, as a user's own install is.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from supervisor._supervisor import Supervisor
from tests._policies import agent

pytestmark = pytest.mark.root

REPO = Path(__file__).resolve().parents[2]
STRICT = REPO / "policies" / "strict.yaml"
PACKAGES = ("server-filesystem", "server-everything")
#: where the session's npm install is kept between sessions (world-traversable, root's)
CACHE = Path("/tmp/agents-supervise-tests/npm-mcp-servers")
#: the uid of the user who ran npm: not root, not a worker's (strict.yaml's range starts at 3000000000)
OPERATOR_UID = 4242


def _pinned(package: str) -> str:
    """``@modelcontextprotocol/<package>``, at the version scripts/setup installed globally when there is one."""
    installed = Path("/usr/lib/node_modules/@modelcontextprotocol") / package / "package.json"
    name = f"@modelcontextprotocol/{package}"
    if installed.exists():
        return f"{name}@{json.loads(installed.read_text())['version']}"
    return name


@pytest.fixture(scope="session")
def npm_install() -> Path:
    """A folder where ``npm install`` of both servers ran, as root (made once; reused by later sessions)."""
    if shutil.which("npm") is None:
        pytest.skip("npm is missing: scripts/setup installs node and npm")
    CACHE.parent.mkdir(mode=0o755, exist_ok=True)
    CACHE.mkdir(mode=0o755, exist_ok=True)
    with open(CACHE.parent / "npm-mcp-servers.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = CACHE / "installed"
        wanted = " ".join(_pinned(p) for p in PACKAGES)
        if not done.exists() or done.read_text() != wanted:
            run = subprocess.run(
                ["npm", "install", "--no-audit", "--no-fund", "--prefer-offline", *wanted.split()],
                cwd=CACHE,
                capture_output=True,
                text=True,
                timeout=600,
            )
            if run.returncode != 0:
                pytest.skip(f"npm install {wanted} failed (no registry?): {run.stderr[-500:]}")
            done.write_text(wanted)
    return CACHE


@pytest.fixture
def user_install(npm_install: Path, sandbox_tmp: Path) -> Path:
    """A copy of the install owned by the operator's uid (as a user's own ``npm install`` is), in ``sandbox_tmp``."""
    copy = sandbox_tmp / "mcp-servers"
    shutil.copytree(npm_install, copy, symlinks=True)
    for root, dirs, files in os.walk(copy):
        for name in [*dirs, *files]:
            os.lchown(os.path.join(root, name), OPERATOR_UID, OPERATOR_UID)
    os.lchown(copy, OPERATOR_UID, OPERATOR_UID)
    assert os.lstat(copy / "node_modules" / ".bin" / "mcp-server-filesystem").st_uid == OPERATOR_UID
    return copy


def _agent_file(
    root: Path, servers: dict[str, tuple[str, list[str]]], sandboxes: dict[str, dict[str, object]] | None = None
) -> Path:
    """The agent file ``npm-user.json`` naming ``servers`` (name: executable, args), each with its FileSandbox of
    ``sandboxes`` if any (what the server may read: an argument that names a folder grants nothing by itself)."""
    entries = [
        {
            "tag": "McpSimpleBinary",
            "contents": {
                "name": name,
                "executable": exe,
                "args": args,
                **({"FileSandbox": sandboxes[name]} if name in (sandboxes or {}) else {}),
            },
        }
        for name, (exe, args) in servers.items()
    ]
    path = root / "npm-user.json"
    path.write_text(json.dumps(agent("npm-user", mcpServers=entries)))
    return path


def _project(root: Path) -> Path:
    project = root / "project"
    project.mkdir()
    (project / "notes.txt").write_text("remember the milk")
    return project


async def test_npm_installed_servers_serve_an_sdk_client_under_the_unchanged_strict_policy(
    user_install: Path, sandbox_tmp: Path
) -> None:
    project = _project(sandbox_tmp)
    agent_file = _agent_file(
        sandbox_tmp,
        {
            "files": ("./mcp-servers/node_modules/.bin/mcp-server-filesystem", [str(project)]),
            "everything": ("./mcp-servers/node_modules/.bin/mcp-server-everything", ["stdio"]),
        },
        # the folder the server serves, granted the way an agent file grants paths: read-only, checked by the kernel
        {"files": {"fsbPredicate": {"tag": "DirectoryRecursive", "contents": "./project"}}},
    )
    argv = ["-m", "supervisor", "serve", "--policy", str(STRICT), "--agent", str(agent_file)]
    argv += ["--serve-agent", "npm-user", "--state-dir", str(sandbox_tmp / "state")]
    params = StdioServerParameters(
        command=sys.executable, args=argv, env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=str(REPO)
    )
    with trio.fail_after(120):
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            names = {t.name for t in (await session.list_tools()).tools}
            assert {"mcp_files_read_text_file", "mcp_files_write_file", "mcp_everything_echo"} <= names, names
            read_back = await session.call_tool("mcp_files_read_text_file", {"path": str(project / "notes.txt")})
            assert not read_back.is_error and "remember the milk" in read_back.content[0].text, read_back
            echoed = await session.call_tool("mcp_everything_echo", {"message": "hello from npm"})
            assert not echoed.is_error and "hello from npm" in echoed.content[0].text, echoed
            # the package tree is granted read-only: the server cannot change its own code
            wrote = await session.call_tool("mcp_files_write_file", {"path": str(project / "new.txt"), "content": "x"})
            assert wrote.is_error and not (project / "new.txt").exists()


async def test_the_package_tree_is_granted_to_that_toolbox_alone_and_the_link_is_run(
    user_install: Path, sandbox_tmp: Path
) -> None:
    agent_file = _agent_file(
        sandbox_tmp, {"everything": ("./mcp-servers/node_modules/.bin/mcp-server-everything", ["stdio"])}
    )
    async with Supervisor.open(str(STRICT), agents=[str(agent_file)], state_dir=str(sandbox_tmp / "state")) as sup:
        assert [e for e in sup.load_errors() if e.get("agent") == "npm-user"] == []
        mine = sup.runner("everything", "npm-user").spec
        tree = str(user_install / "node_modules")
        assert ("read", tree) in {(r.mode, r.path) for r in mine.plan.fs_rules}
        # the worker runs the .bin link itself (the program keeps its name), shown inside the granted tree
        assert mine.plan.payload["config"]["executable"] == f"{tree}/.bin/mcp-server-everything"
        others = [s for s in sup.compiled.specs if s.agent != "npm-user"]
        assert others and all(tree not in {r.path for r in s.plan.fs_rules} for s in others)
        assert mine.plan.rlimits.open_files == 1024  # strict.yaml's: server-filesystem opens ~150 files at start


async def test_a_bin_link_a_worker_could_change_is_that_toolboxs_load_error(
    user_install: Path, sandbox_tmp: Path
) -> None:
    """The ``.bin`` folder given to uid 65534 (strict.yaml's sandbox_uid): a worker could swap the link for one to
    what it wants another toolbox to run or be granted. The supervisor refuses to resolve it, naming the folder."""
    os.lchown(user_install / "node_modules" / ".bin", 65534, 65534)
    agent_file = _agent_file(
        sandbox_tmp,
        {"planted": ("./mcp-servers/node_modules/.bin/mcp-server-everything", ["stdio"])},
    )
    async with Supervisor.open(str(STRICT), agents=[str(agent_file)], state_dir=str(sandbox_tmp / "state")) as sup:
        [error] = [e for e in sup.load_errors() if e.get("toolbox") == "planted"]
        bin_dir = user_install / "node_modules" / ".bin"
        assert (
            f"{bin_dir} belongs to uid 65534, a worker's: a worker could change what this MCP server runs"
            in (error["message"])
        ), error
        assert "Install the server where only root or its operator can write" in error["message"]
        assert all(s.toolbox != "planted" for s in sup.compiled.specs)
        assert (await sup.call("system_system_date", {})).status == "passed"  # strict.yaml's own agent serves
