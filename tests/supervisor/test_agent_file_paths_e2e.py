"""The policy is the ceiling of what an agent file reads, from real workers under the shipped strict.yaml (issue 24,
the MCP ``args`` finding): a path an agent file names grants nothing by itself beyond what the agent's FileSandbox or
the policy grants, and the supervisor (root) never resolves such a path through a link a worker could have planted.

The policy is strict.yaml's settings unchanged, naming this test's agent files and state dir (workers share its
``sandbox_uid``, 65534, as ``tests/_policies.shipped_policy`` says). "Another tenant's" file is world-readable, so
only Landlock keeps a worker out of it: what is tested is the grant, not the file's mode.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from supervisor._supervisor import Supervisor
from tests._policies import agent, shipped_policy, system_toolbox

pytestmark = pytest.mark.root

STRICT = Path(__file__).resolve().parents[2] / "policies" / "strict.yaml"

#: An MCP server of the official SDK with one tool that reads the file it is asked for.
READER = textwrap.dedent("""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("reader")

    @server.tool(description="read a file")
    def read(path: str) -> str:
        try:
            with open(path) as f:
                return f.read()
        except OSError as exc:
            return f"refused: {exc.strerror}"

    server.run("stdio")
""")


def _server(root: Path, name: str, args: list[str], sandbox: dict[str, Any]) -> dict[str, Any]:
    script = root / "reader.py"
    if not script.exists():
        script.write_text(READER)
        script.chmod(0o644)
    return {
        "tag": "McpSimpleBinary",
        "contents": {"name": name, "executable": sys.executable, "args": [str(script), *args], "FileSandbox": sandbox},
    }


def _only(*predicates: dict[str, Any]) -> dict[str, Any]:
    return {"fsbPredicate": {"tag": "Any", "contents": list(predicates)}}


def _other_tenants_secret(root: Path) -> Path:
    other = root / "other-tenant"
    other.mkdir(mode=0o755)
    secret = other / "secret.txt"
    secret.write_text("the other tenant's secret")
    secret.chmod(0o644)
    return secret


def _write_agent(root: Path, slug: str, **keys: Any) -> Path:
    path = root / f"{slug}.json"
    path.write_text(json.dumps(agent(slug, **keys)))
    return path


async def test_an_mcp_argument_naming_a_file_outside_the_sandbox_does_not_let_the_server_read_it(
    sandbox_tmp: Path,
) -> None:
    """``"args": [script, "/other-tenant/secret.txt"]`` granted the file to the server before; now it is that
    toolbox's load error naming the keys that would grant it, and a server given the same path inside an option
    (not judged, passed as it is) finds the kernel refusing it."""
    secret = _other_tenants_secret(sandbox_tmp)
    own = _only({"tag": "FileExactly", "contents": "./reader.py"})
    servers = [
        _server(sandbox_tmp, "grab", [str(secret)], own),
        _server(sandbox_tmp, "peek", [f"--path={secret}"], own),
    ]
    agent_file = _write_agent(sandbox_tmp, "tenant", mcpServers=servers)
    policy = shipped_policy(sandbox_tmp, STRICT, [agent_file])
    async with Supervisor.open(policy) as sup:
        errors = {e["toolbox"]: e["message"] for e in sup.load_errors()}
        assert f"its MCP server's argument {str(secret)!r} names a path the server may not read" in errors["grab"]
        assert "toolboxes.tenant/grab.read_paths" in errors["grab"], errors
        assert "$.contents.mcpServers[0].contents.FileSandbox" in errors["grab"], errors
        assert "peek" not in errors and "mcp_grab_read" not in {t.name for t in sup.list_tools()}
        peek = sup.runner("peek", "tenant").spec
        assert all(not str(secret).startswith(r.path) for r in peek.plan.fs_rules if r.path != "/")
        refused = await sup.call("mcp_peek_read", {"path": str(secret)})
        assert refused.data is not None and refused.data.startswith("refused:"), refused.data
        assert "secret" not in refused.data.replace(str(secret), "")
        own_script = await sup.call("mcp_peek_read", {"path": str(sandbox_tmp / "reader.py")})
        assert own_script.data is not None and "MCPServer" in own_script.data  # what its FileSandbox grants


async def test_a_link_a_worker_plants_on_an_arguments_way_does_not_redirect_the_grant(sandbox_tmp: Path) -> None:
    """A shell toolbox (a real worker, uid 65534) may write ``shared/``; another agent's MCP server serves
    ``shared/data`` (its FileSandbox: ``./shared``). The worker makes ``shared/data`` a link to another tenant's
    folder. At the next start the supervisor does not follow the link as root (it used to: ``realpath``, then a
    read grant of the other tenant's folder): the server's toolbox does not load, naming the link."""
    secret = _other_tenants_secret(sandbox_tmp)
    shared = sandbox_tmp / "shared"
    shared.mkdir(mode=0o755)
    os.chown(shared, 65534, 65534)
    sh = system_toolbox(
        "sh",
        capabilities=["execute-command"],
        FileSandbox={"fsbPredicate": {"tag": "DirectoryRecursive", "contents": "./shared"}},
    )
    planter = _write_agent(sandbox_tmp, "planter", builtinToolboxes=[sh])
    sandbox = _only(
        {"tag": "FileExactly", "contents": "./reader.py"}, {"tag": "DirectoryRecursive", "contents": "./shared"}
    )
    reader = _write_agent(
        sandbox_tmp, "reader", mcpServers=[_server(sandbox_tmp, "files", [str(shared / "data")], sandbox)]
    )
    policy = shipped_policy(sandbox_tmp, STRICT, [planter, reader])
    async with Supervisor.open(policy) as sup:
        assert sup.load_errors() == []  # shared/data does not exist yet: nothing to judge
        planted = await sup.call(
            "system_sh_execute_command", {"command": f"ln -s {secret.parent} {shared / 'data'} && echo planted"}
        )
        assert planted.structured is not None and "planted" in planted.structured["stdout"], planted.data
    assert (shared / "data").is_symlink() and os.lstat(shared / "data").st_uid == 65534
    async with Supervisor.open(policy) as sup:
        errors = {e["toolbox"]: e["message"] for e in sup.load_errors()}
        assert f"{shared / 'data'} is a symbolic link owned by uid 65534" in errors["files"], errors
        assert "never followed by the supervisor" in errors["files"]
        assert all(str(secret.parent) not in {r.path for r in s.plan.fs_rules} for s in sup.compiled.specs)
        listed = await sup.call("system_sh_execute_command", {"command": f"cat {shared / 'data' / 'secret.txt'}"})
        assert listed.structured is not None and "secret" not in listed.structured["stdout"]  # the planter neither


async def test_links_a_worker_plants_redirect_no_other_path_an_agent_file_names(sandbox_tmp: Path) -> None:
    """The same worker plants links where another agent file names a FileSandbox folder (``./shared/data``), a bash
    folder (``./shared/tools``) and a sub-agent file (``./shared/sub.json``, to a third agent's file). At the next
    start none is followed as root: the two toolboxes do not load and the sub-agent is left out, each naming the
    link; the victim's other toolbox and every other agent load (one worker's link stops no one else)."""
    secret = _other_tenants_secret(sandbox_tmp)
    other_agent = _write_agent(sandbox_tmp / "other-tenant", "other", builtinToolboxes=[system_toolbox("o")])
    shared = sandbox_tmp / "shared"
    shared.mkdir(mode=0o755)
    os.chown(shared, 65534, 65534)
    sh = system_toolbox(
        "sh",
        capabilities=["execute-command"],
        FileSandbox={"fsbPredicate": {"tag": "DirectoryRecursive", "contents": "./shared"}},
    )
    planter = _write_agent(sandbox_tmp, "planter", builtinToolboxes=[sh])
    victim = _write_agent(
        sandbox_tmp,
        "victim",
        builtinToolboxes=[
            system_toolbox("info", capabilities=["date"]),
            {
                "tag": "DeveloperToolbox",
                "contents": {
                    "Name": "dev",
                    "Description": "reads the data",
                    "Capabilities": ["read-file-range"],
                    "FileSandbox": {"fsbPredicate": {"tag": "DirectoryRecursive", "contents": "./shared/data"}},
                },
            },
        ],
        bashToolboxes=[{"tag": "FileSystemDirectory", "contents": {"Path": "./shared/tools"}}],
        extraAgents=[{"slug": "other", "path": "./shared/sub.json"}],
    )
    policy = shipped_policy(sandbox_tmp, STRICT, [planter])
    async with Supervisor.open(policy) as sup:
        command = f"ln -s {secret.parent} data && ln -s {secret.parent} tools && ln -s {other_agent} sub.json"
        planted = await sup.call("system_sh_execute_command", {"command": f"cd {shared} && {command} && echo ok"})
        assert planted.structured is not None and "ok" in planted.structured["stdout"], planted.data
    policy = shipped_policy(sandbox_tmp, STRICT, [planter, victim])
    async with Supervisor.open(policy) as sup:
        errors = {(e["agent"], e.get("toolbox")): e["message"] for e in sup.load_errors()}
        for toolbox, link in (("dev", "data"), ("tools", "tools")):
            message = errors[("victim", toolbox)]
            assert f"{shared / link} is a symbolic link owned by uid 65534" in message, errors
        assert f"{shared / 'sub.json'} is a symbolic link owned by uid 65534" in errors[("victim", None)], errors
        assert set(errors) == {("victim", "dev"), ("victim", "tools"), ("victim", None)}, errors
        assert "system_info_date" in {t.name for t in sup.list_tools(agent="victim")}
        assert "other" not in {s.agent for s in sup.compiled.specs}
        assert all(str(secret.parent) not in {r.path for r in s.plan.fs_rules} for s in sup.compiled.specs)


def _developer(name: str, folder: str) -> dict[str, Any]:
    return {
        "tag": "DeveloperToolbox",
        "contents": {
            "Name": name,
            "Description": "reads files",
            "Capabilities": ["read-file-range"],
            "FileSandbox": {"fsbPredicate": {"tag": "DirectoryRecursive", "contents": folder}},
        },
    }


def _acme(root: Path) -> tuple[Path, Path, Path]:
    """Tenant acme's agent file in its folder (``ceiling.paths``: that folder) naming toolboxes inside and outside
    it; returns ``(policy, acme's folder, the other tenant's secret)``."""
    secret = _other_tenants_secret(root)
    home = root / "acme"
    (home / "project").mkdir(parents=True)
    (home / "project" / "notes.txt").write_text("acme's notes")
    reader = _server(home, "reader", [], _only({"tag": "FileExactly", "contents": "./reader.py"}))
    stray = _server(root, "stray", [], _only({"tag": "FileExactly", "contents": str(root / "reader.py")}))
    (secret.parent / "db.sqlite").write_bytes(b"")
    database = {"tag": "SqliteReadOnly", "path": str(secret.parent / "db.sqlite")}
    sqlite = {"tag": "SqliteToolbox", "contents": {"Name": "db", "Description": "a database", "Versioning": database}}
    agent_file = _write_agent(
        home,
        "acme",
        builtinToolboxes=[_developer("inside", "./project"), _developer("outside", str(secret.parent)), sqlite],
        mcpServers=[reader, stray],
    )
    tenants = {"acme": {"agents": ["acme"], "ceiling": {"paths": [str(home)]}}}
    return shipped_policy(root, STRICT, [agent_file], tenants=tenants), home, secret


async def test_a_tenants_path_ceiling_bounds_every_path_its_agent_files_name(sandbox_tmp: Path) -> None:
    """``tenants.acme.ceiling.paths: [<acme's folder>]``: a FileSandbox, a database or a server script outside it
    is that toolbox's load error naming the key; what lies inside (and the interpreter the policy grants every
    worker anyway) loads, and a real worker reads there."""
    policy, home, secret = _acme(sandbox_tmp)
    async with Supervisor.open(policy) as sup:
        errors = {e["toolbox"]: e["message"] for e in sup.load_errors()}
        assert set(errors) == {"outside", "db", "stray"}, errors
        key = f"past the policy's ceiling tenants.acme.ceiling.paths ({home})"
        assert f"the agent file names the path {secret.parent} (its FileSandbox, write)" in errors["outside"]
        assert key in errors["outside"] and "add a folder holding it to tenants.acme.ceiling.paths" in errors["outside"]
        assert f"{secret.parent / 'db.sqlite'} (a path it reads), {key}" in errors["db"], errors["db"]
        assert f"{sandbox_tmp / 'reader.py'} (its FileSandbox, read), {key}" in errors["stray"], errors["stray"]
        read = await sup.call("developer_inside_read_file_range", {"path": str(home / "project" / "notes.txt")})
        assert read.status == "passed" and "acme's notes" in (read.data or ""), read.data
        assert "mcp_reader_read" in {t.name for t in sup.list_tools()}  # its interpreter: granted to every worker


def test_check_shows_a_path_ceiling(sandbox_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from supervisor.frontends._cli import main

    policy, home, _ = _acme(sandbox_tmp)
    assert main(["check", "--policy", str(policy)]) == 0
    assert f"acme: paths within {home} (tenants.acme.ceiling.paths)" in capsys.readouterr().out
