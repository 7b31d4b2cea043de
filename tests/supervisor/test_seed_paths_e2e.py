"""Issue 13 item 3: relative paths in tool arguments start at the agent file's folder, in every toolbox that takes a
path (System, Developer, Lua ``fs``), through real confined workers.

The agent file is ``<tmp>/tester.json``; its FileSandboxes are the seed's, with relative paths (``./src``,
``./project``), resolved against that same folder at load. The seed's own calls are made as written:
``list-directory {"path": "./src", ...}`` and ``attach-file ./project/x.png``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import pytest

from supervisor._supervisor import Supervisor
from tests._policies import agent, system_toolbox, write_policy
from tests.sandbox.test_escapes import _png

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

pytestmark = pytest.mark.root

SANDBOX = {
    "fsbPredicate": {
        "tag": "Any",
        "contents": [
            {"tag": "DirectoryRecursive", "contents": "./src"},
            {"tag": "DirectoryRecursive", "contents": "./project"},
        ],
    },
    "fsbMaxFileSize": 52428800,
    "fsbName": "system-sandbox",
}


def _lua(sandbox: dict[str, Any]) -> dict[str, Any]:
    """A Lua toolbox (no tools, no hosts) under ``sandbox``."""
    return {
        "tag": "LuaToolbox",
        "contents": {
            "Name": "lua",
            "Description": "Lua",
            "MaxMemoryMB": 64,
            "MaxExecutionTimeSeconds": 10,
            "AllowedTools": [],
            "AllowedHosts": [],
            "FileSandbox": sandbox,
        },
    }


@pytest.fixture
async def sup(sandbox_tmp: Path) -> AsyncIterator[Supervisor]:
    (sandbox_tmp / "src" / "Utils").mkdir(parents=True)
    (sandbox_tmp / "src" / "Main.hs").write_text("main = pure ()\n")
    (sandbox_tmp / "project").mkdir()
    (sandbox_tmp / "project" / "x.png").write_bytes(_png())
    (sandbox_tmp / "secret.txt").write_text("no\n")
    for p in (sandbox_tmp / "src", sandbox_tmp / "src" / "Utils", sandbox_tmp / "src" / "Main.hs"):
        os.chown(p, 65534, 65534)
    system = system_toolbox(capabilities=["attach-file", "list-directory"], FileSandbox=SANDBOX)
    dev = {
        "tag": "DeveloperToolbox",
        "contents": {"Name": "dev", "Description": "d", "Capabilities": ["read-file-range"], "FileSandbox": SANDBOX},
    }
    lua = _lua(SANDBOX)
    policy = write_policy(sandbox_tmp, {"tester": agent(builtinToolboxes=[system, dev, lua])}, landlock_min_abi=6)
    async with Supervisor.open(policy) as s:
        yield s


async def test_the_seeds_list_directory_of_dot_src(sup: Supervisor, sandbox_tmp: Path) -> None:
    listing = await sup.call(
        "system_system_list_directory",
        {"capability": "list-directory", "path": "./src", "recursive": False, "include_hidden": False},
    )
    assert listing.status == "passed", listing.data
    assert listing.structured["path"] == "./src"
    assert [(e["name"], e["type"]) for e in listing.structured["entries"]] == [
        ("Main.hs", "file"),
        ("Utils", "directory"),
    ]
    assert listing.structured["total"] == 2
    assert listing.meta("resource_id") == f"file:{sandbox_tmp / 'src'}"


async def test_the_seeds_attach_file_of_a_relative_path(sup: Supervisor) -> None:
    attached = await sup.call("system_system_attach_file", {"capability": "attach-file", "filepath": "./project/x.png"})
    assert attached.status == "passed", attached.data
    [image] = attached.attachments
    assert image.media_type == "image/png" and sup.services.calls.attachments.read(image) == _png()


async def test_one_rule_for_system_developer_and_lua(sup: Supervisor, sandbox_tmp: Path) -> None:
    read = await sup.call("developer_dev_read_file_range", {"path": "./src/Main.hs"})
    assert read.status == "passed" and read.structured["path"] == str(sandbox_tmp / "src" / "Main.hs")
    lua = await sup.call("lua_lua_execute", {"script": "return fs.read('./src/Main.hs'), fs.isdir('src/Utils')"})
    assert lua.status == "passed" and lua.structured["values"] == ["main = pure ()\n", True], lua.data
    # The same relative path outside the sandbox is refused by each, showing the path as resolved.
    resolved = f"'{sandbox_tmp}/secret.txt'"
    where = f"Relative paths start at the agent file's folder, {sandbox_tmp}."
    for result in (
        await sup.call("system_system_list_directory", {"path": "./secret.txt"}),
        await sup.call("system_system_attach_file", {"filepath": "secret.txt"}),
        await sup.call("developer_dev_read_file_range", {"path": "./secret.txt"}),
    ):
        assert result.status == "error" and resolved in (result.data or "") and where in (result.data or ""), (
            result.data
        )
    refused = await sup.call("lua_lua_execute", {"script": "return fs.read('./secret.txt')"})
    assert resolved in (refused.data or "") and where in (refused.data or ""), refused.data
    # A path that is allowed but is no directory: the message shows it resolved too.
    not_dir = await sup.call("system_system_list_directory", {"path": "./src/Main.hs"})
    assert not_dir.status == "failed"
    assert f"'./src/Main.hs' (resolved to {sandbox_tmp}/src/Main.hs) is not a directory" in (not_dir.data or "")


async def test_directory_shallow_and_directory_exactly_as_the_seed_means_them(sandbox_tmp: Path) -> None:
    """``DirectoryShallow ./shallow``: "directory contents only (not subdirectories)": listing it and reading its
    files, nothing deeper. ``DirectoryExactly ./dirx``: "exact directory match (contents not included)": listing
    it shows what it holds, reading that is refused. System and Lua list alike."""
    (sandbox_tmp / "shallow" / "sub").mkdir(parents=True)
    (sandbox_tmp / "shallow" / "f.txt").write_text("top\n")
    (sandbox_tmp / "shallow" / "sub" / "g.txt").write_text("deep\n")
    (sandbox_tmp / "dirx").mkdir()
    (sandbox_tmp / "dirx" / "held.txt").write_text("held\n")
    sandbox = {
        "fsbPredicate": {
            "tag": "Any",
            "contents": [
                {"tag": "DirectoryShallow", "contents": "./shallow"},
                {"tag": "DirectoryExactly", "contents": "./dirx"},
            ],
        },
        "fsbName": "dirs",
    }
    system = system_toolbox(capabilities=["attach-file", "list-directory"], FileSandbox=sandbox)
    lua = _lua(sandbox)
    policy = write_policy(sandbox_tmp, {"tester": agent(builtinToolboxes=[system, lua])}, landlock_min_abi=6)
    async with Supervisor.open(policy) as sup:
        shallow = await sup.call("system_system_list_directory", {"path": "./shallow", "recursive": True})
        assert shallow.status == "passed", shallow.data
        assert [(e["name"], e["type"]) for e in shallow.structured["entries"]] == [
            ("f.txt", "file"),
            ("sub", "directory"),  # an entry of it; what is beneath is not
        ]
        read = await sup.call("lua_lua_execute", {"script": "return fs.read('./shallow/f.txt'), fs.list('./shallow')"})
        assert read.structured["values"] == ["top\n", ["f.txt", "sub"]]
        deep = await sup.call("lua_lua_execute", {"script": "return fs.read('./shallow/sub/g.txt')"})
        assert "not allowed by the file sandbox 'dirs'" in (deep.data or ""), deep.data
        dirx = await sup.call("system_system_list_directory", {"path": "./dirx"})
        assert dirx.status == "passed", dirx.data
        assert [e["name"] for e in dirx.structured["entries"]] == ["held.txt"] and dirx.structured["total"] == 1
        listed = await sup.call("lua_lua_execute", {"script": "return fs.list('./dirx')"})
        assert listed.status == "passed", listed.data
        assert listed.structured["values"] == [["held.txt"]]
        contents = await sup.call("system_system_attach_file", {"filepath": "./dirx/held.txt"})
        assert contents.status == "error" and "(rule Any[" in (contents.data or ""), contents.data


#: The seed's generate_chart (seed 004, "Bash tools"), verbatim but for its ``"args": [...]`` placeholder, which is
#: not JSON: ``[]``. It runs ``./generate-chart`` beside it.
GENERATE_CHART = """#!/bin/bash

if [ "$1" == "describe" ]; then
    echo '{
        "slug": "generate_chart",
        "description": "Generates a chart image",
        "args": [],
        "output-media-type": "image/png"
    }'
    exit 0
fi

# Generate and output PNG image to stdout
./generate-chart "$@"
"""


async def test_one_rule_for_relative_paths_commands_and_scripts(sandbox_tmp: Path) -> None:
    """Path arguments and commands start at the agent file's folder (``execute-command "ls ./project"`` lists what
    ``list-directory ./project`` lists; ``working-directory`` says so); a bash tool runs in its own folder, so the
    seed's ``./generate-chart "$@"`` finds the program beside it."""
    (sandbox_tmp / "project").mkdir()
    (sandbox_tmp / "project" / "notes.txt").write_text("n\n")
    (sandbox_tmp / "secret.txt").write_text("no\n")
    tools = sandbox_tmp / "tools"
    tools.mkdir()
    (tools / "generate_chart").write_text(GENERATE_CHART)
    (tools / "generate-chart").write_text(f"#!/bin/sh\nbase64 -d <<'EOF'\n{_b64(_png(3, 2))}\nEOF\n")
    for script in ("generate_chart", "generate-chart"):
        (tools / script).chmod(0o755)
    sandbox = {
        "fsbPredicate": {"tag": "DirectoryRecursive", "contents": "./project"},
        "fsbMaxFileSize": 52428800,
        "fsbName": "system-sandbox",
    }
    system = system_toolbox(
        capabilities=["working-directory", "list-directory", "execute-command"], FileSandbox=sandbox
    )
    policy = write_policy(
        sandbox_tmp, {"tester": agent(toolDirectory="tools", builtinToolboxes=[system])}, landlock_min_abi=6
    )
    async with Supervisor.open(policy) as sup:
        where = await sup.call("system_system_working_directory", {})
        assert where.structured["data"] == {"path": str(sandbox_tmp)}, where.data
        listed = await sup.call("system_system_list_directory", {"path": "./project"})
        assert [e["name"] for e in listed.structured["entries"]] == ["notes.txt"]
        ls = await sup.call("system_system_execute_command", {"command": "ls ./project && pwd"})
        assert ls.status == "passed" and ls.structured["stdout"] == f"notes.txt\n{sandbox_tmp}\n", ls.data
        # the folder is shown at its own path with only what the sandbox grants in it
        outside = await sup.call("system_system_execute_command", {"command": "cat ./secret.txt"})
        assert outside.status == "failed" and "No such file or directory" in outside.structured["stderr"]
        chart = await sup.call("bash_generate_chart", {})
        assert chart.status == "passed", chart
        [image] = chart.attachments
        assert image.media_type == "image/png" and sup.services.calls.attachments.read(image) == _png(3, 2)


def _b64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode()
