"""Every JSON example of seed 004, exercised: configs loaded, tool inputs run through real confined workers, outputs
compared with what the run answers, scripts run as tools, the seed's placeholders filled and said so.

The agent configs and their fragments are loaded by ``tests/supervisor/config/test_seed_examples.py`` (``check`` and
``tools`` in a network lab, their fixtures ``tests/fixtures/seed004/*.json``); every other example is cut verbatim
into ``tests/fixtures/seed004/blocks.json`` (keyed by its lines in the seed) and run here. :data:`CATALOGUE` says,
for each of the seed's examples, what it is and how it is exercised; the first test checks that every JSON example
the seed holds (a block starting with ``{``, a ``describe`` a script prints, a payload piped to a command) is in it.

A seed example naming a place that cannot exist here is run as written and must be refused clearly (the seed's
``/path/to/file``, ``/path/to/image.png``, ``target-session-uuid``, ``"column_name": "filter_value"``), then run
again with that one placeholder filled with the stand-in this test made; an output example is compared by its
keys (and the types of their values) with the answer of the input beside it. Outside the lab, nothing here sends a
packet anywhere but loopback: the MCP server is a local script, the PostgREST example is checked as a request.
"""

from __future__ import annotations

import base64
import json
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from sandbox import check_path, parse_predicate
from supervisor._supervisor import Supervisor
from supervisor.tools import ArgumentValidator, format_validation_errors
from tests._policies import agent, write_policy
from tests.sandbox._netlab import REPO
from tests.sandbox.test_escapes import _png
from tests.supervisor.config.test_seed_examples import SOURCES
from tests.toolboxes.test_postgrest import TODOS, with_items
from toolboxes.openapi import Resolver
from toolboxes.postgrest import build_request, build_tools

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from toolboxes import ToolResult

SEED_FILE = Path(REPO).parent / "shared" / "seeds" / "004_bef637d7703902f1.txt"
FIXTURES = Path(REPO) / "tests" / "fixtures" / "seed004"
BLOCKS: dict[str, str] = json.loads((FIXTURES / "blocks.json").read_text())

#: Every JSON example of seed 004 (its lines) -> what it is, and how it is exercised (here unless another test is
#: named). The first 17 are the agent configs and fragments ``test_seed_examples.py`` loads.
CATALOGUE: dict[str, str] = {
    **{lines: f"config {name}: loaded by check and tools (test_seed_examples.py)" for name, lines in SOURCES.items()},
    "27-40": "bash tool generate_chart, its describe's 'args: [...]' as []: run, ./generate-chart beside it",
    "59-82": "bash tool my-tool (describe with one dashdashspace arg): run",
    "129-129": "MCP tools/list request: what the MCP toolbox sends the seed's filesystem server",
    "132-138": "MCP tools/list response, its 'inputSchema: {...}' filled: what that server answers",
    "141-144": "MCP tools/call: what the toolbox sends for read_file {path: /tmp/foo}",
    "199-215": "PostgREST arguments: the seed config's PATCH tool (as written: its placeholder filter refused)",
    "230-232": "SQLite query: run against the seed's analytics database",
    "358-361": "attach-file input: refused as written (outside the sandbox), then run with the stand-in",
    "367-372": "list-directory input: run",
    "375-382": "list-directory output: compared with the run",
    "385-388": "execute-command input: run",
    "391-397": "execute-command output: compared with the run",
    "400-400": "CommandFilter verdict 'allowed': printed by the filter of the system toolbox",
    "403-403": "CommandFilter verdict 'refused': printed by the filter of the guarded toolbox",
    "424-426": "list-sessions input: run",
    "428-442": "list-sessions output: compared with the run",
    "444-447": "search-sessions input: run (a call carried the words)",
    "449-462": "search-sessions output: compared with the run",
    "464-470": "read-session input: InvalidSessionIdError as written, then run with a listed id",
    "472-481": "read-session output: compared with the run",
    "483-485": "get-session-stats input: run",
    "487-492": "get-session-stats output: compared with the run",
    "494-496": "date input: run",
    "498-507": "date output: compared with the run",
    "541-544": "show-spec input: run",
    "546-552": "read-file-range input: refused as written (/path/to/file), then run on ./src/File.hs",
    "554-562": "read-file-range output: compared with the run",
    "564-573": "read-file-range metadata-only output: compared with the run",
    "575-579": "read-file-range of ./src/File.hs in a session: run as written",
    "581-589": "write-file-range in a session: refused as written (/path/to/file), then staged on ./src/File.hs",
    "591-598": "write-file-range with a snapshot: refused as written (stale), then run with the file's snapshot",
    "600-610": "write-file-range output: compared with the run",
    "612-617": "patch-file input: refused as written (/path/to/file), and on ./src/File.hs for its abbreviated hunks",
    "619-624": "patch-file context-mismatch error: compared with the run",
    "626-633": "patch-file output: compared with the run of a matching patch",
    "635-639": "patch-file context-mismatch error (short form): compared with the run",
    "713-740": "bash tool template (policies/examples/tools/bash/my-tool.bash): run",
    "742-779": "python tool template (policies/examples/tools/python/my-tool.py): run",
    "908-911": "Lua execute input: run",
    "1042-1043": "check-tool-call payload: run with the CLI against a read-file tool",
    "1215-1228": "a tool's JSON Schema: arguments checked against it by the supervisor's validator",
}


def _block(lines: str) -> str:
    return BLOCKS[lines]


def _json(lines: str) -> Any:
    return json.loads(_block(lines))


# ------------------------------------------------------------------------------------------------ the catalogue


def _seed_examples(text: str) -> list[int]:
    """The first line of every JSON example in the seed: a block whose line starts with ``{``, a ``describe`` a
    script prints (``echo '{``, a ``DESCRIBE_EOF`` here-document, a Python ``describe()``), a payload piped in."""
    lines = text.split("\n")
    found: list[int] = []
    in_block = False
    for n, line in enumerate(lines, 1):
        if not line.strip():
            in_block = False
            continue
        if line.startswith("{") and not in_block:
            found.append(n)
            in_block = True
        elif re.search(r"echo '\{|<<'DESCRIBE_EOF'|^def describe\(\):", line):
            found.append(n)
    return found


def test_every_json_example_of_the_seed_is_catalogued_and_its_fixture_verbatim() -> None:
    assert set(BLOCKS) | set(SOURCES.values()) == set(CATALOGUE)
    assert len(CATALOGUE) == 58, len(CATALOGUE)  # 17 configs (14 fragments), 41 inputs, outputs and scripts
    if SEED_FILE.exists():  # beside the project's workspace (a checkout elsewhere: the fixtures are the record)
        text = SEED_FILE.read_text()
        spans = [tuple(int(x) for x in key.split("-")) for key in CATALOGUE]
        missing = [n for n in _seed_examples(text) if not any(a <= n <= b for a, b in spans)]
        assert missing == [], f"seed examples at lines {missing} are neither loaded nor run"
        lines = text.split("\n")
        for key, block in BLOCKS.items():
            first, last = (int(x) for x in key.split("-"))
            assert block == "\n".join(lines[first - 1 : last]) + "\n", key
    # the templates the project ships are the seed's
    assert (Path(REPO) / "policies" / "examples" / "tools" / "bash" / "my-tool.bash").read_text() == _block("713-740")
    assert (Path(REPO) / "policies" / "examples" / "tools" / "python" / "my-tool.py").read_text().rstrip() == (
        _block("742-779").rstrip()
    )


# --------------------------------------------------------------------------------- examples without a worker


def test_the_postgrest_argument_example_is_a_patch_of_the_seeds_config() -> None:
    """The seed's PostgREST config (no AllowedMethods) with a description whose table has the example's columns:
    its arguments are a PATCH; the placeholder filter value is refused saying how to write one."""
    tools = {t.tool: t for t in build_tools(Resolver(with_items(TODOS), "http://localhost:3000/"), "localhost")[0]}
    patch = tools["postgrest_localhost_patch_items"]
    example = _json("199-215")
    errors = ArgumentValidator(patch.input_schema).errors(example)
    assert (
        format_validation_errors(patch.tool, errors)
        .splitlines()[2]
        .startswith("1. filters.column_name: Invalid value 'filter_value': expected operator.value")
    )
    filled = {**example, "filters": {"column_name": "eq.filter_value"}}
    assert ArgumentValidator(patch.input_schema).errors(filled) == []
    request = build_request(patch, filled, "http://localhost:3000")
    assert request.url.endswith(
        "/items?column_name=eq.filter_value&select=id,name,email&order=created_at.desc&limit=10&offset=0"
    )
    assert json.loads(request.content or b"") == {"name": "New Item", "value": 42}


def test_the_seeds_json_schema_checks_arguments() -> None:
    validator = ArgumentValidator(_json("1215-1228"))
    assert validator.errors({"filename": "notes.txt", "lines": 3}) == []
    report = format_validation_errors("read", validator.errors({"lines": "3"}))
    assert "1. filename: Required property missing" in report and "2. lines: Expected integer but got string" in report


def test_the_seeds_predicates_allow_what_they_say(tmp_path: Path) -> None:
    """The predicate examples (loaded in test_seed_examples.py), evaluated by the in-worker check on a stand-in tree."""
    for d in ("src", "test", "my-project/dist", "docs"):
        (tmp_path / d).mkdir(parents=True, exist_ok=True)
    files = {
        "src/Main.hs": 10,
        "src/Big.hs": 2 * 1048576,
        "src/main.py": 10,
        "package.yaml": 1,
        "README.md": 1,
        "other.yaml": 1,
        "my-project/a.txt": 1,
        "my-project/dist/b.js": 1,
        "docs/guide.md": 1,
        "test-1.json": 1,
        "data.json": 1,
    }
    for name, size in files.items():
        (tmp_path / name).write_bytes(b"x" * size)

    def allowed(fixture: str, *paths: str) -> list[bool]:
        data = json.loads((FIXTURES / fixture).read_text())
        predicate = parse_predicate(data["fsbPredicate"], str(tmp_path))
        return [check_path(predicate, str(tmp_path / p), for_write=False).allowed for p in paths]

    assert allowed("predicate-any.json", "src/Main.hs", "package.yaml", "README.md", "other.yaml") == [
        True,
        True,
        True,
        False,
    ]
    assert allowed("predicate-and-three.json", "src/Main.hs", "src/Big.hs", "src/main.py") == [True, False, False]
    assert allowed("predicate-and-not.json", "my-project/a.txt", "my-project/dist/b.js") == [True, False]
    assert allowed("predicate-patterns.json", "docs/guide.md", "test-1.json", "data.json") == [True, True, False]


def test_the_check_tool_call_example(tmp_path: Path) -> None:
    """``echo '{"filepath": "/path/to/file"}' | check-tool-call --tool ./tools/read-file.sh``: the seed's tool takes
    ``filepath`` and ``content``; its payload has the first, so one error names the second (the seed's sample
    output, listing both, is of another payload: tests/supervisor/frontends/test_check_tool_call.py runs ``{}``)."""
    payload = re.search(r"echo '(\{.*\})'", _block("1042-1043"))
    assert payload is not None
    tools = tmp_path / "tools"
    tools.mkdir()
    describe = {
        "slug": "read-file",
        "description": "Read a file",
        "args": [
            {
                "name": n,
                "description": n,
                "type": "string",
                "backing_type": "string",
                "arity": "single",
                "mode": "dashdashspace",
            }
            for n in ("filepath", "content")
        ],
    }
    script = tools / "read-file.sh"
    script.write_text(f"#!/bin/bash\nif [ \"$1\" == describe ]; then echo '{json.dumps(describe)}'; exit 0; fi\ncat\n")
    script.chmod(0o755)
    out = subprocess.run(
        [sys.executable, "-m", "supervisor", "check-tool-call", "--tool", str(script)],
        input=payload.group(1),
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": REPO},
        timeout=120,
    )
    assert out.returncode == 1, out.stderr
    assert out.stdout == (
        "Tool call validation failed for 'read-file' with 1 error:\n\n"
        "1. content: Required property missing\n\n"
        "Please correct these issues and try again.\n"
    )


# -------------------------------------------------------------------------------------- the run, in real workers

MCP_SERVER = textwrap.dedent("""
    import json, sys
    TOOLS = json.loads(sys.argv[1])  # the seed's tools/list response, its placeholder filled
    seen = []
    for line in sys.stdin:
        message = json.loads(line)
        seen.append({k: v for k, v in message.items() if k != "id"})
        method, ident = message.get("method"), message.get("id")
        if ident is None:
            continue
        if method == "initialize":
            result = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                      "serverInfo": {"name": "filesystem", "version": "1"}}
        elif method == "tools/list":
            result = TOOLS["result"]
        elif method == "tools/call":
            result = {"content": [{"type": "text", "text": json.dumps(seen)}]}
        else:
            result = {}
        print(json.dumps({"jsonrpc": "2.0", "id": ident, "result": result}), flush=True)
""")

FILE_HS = "".join(f"line {n}\n" for n in range(1, 51))


def _stand_ins(root: Path) -> dict[str, Any]:
    """The seed's places, stood in for beside the agent file; returns the agent file's contents."""
    src = root / "src"
    for d in (src, root / "test"):
        d.mkdir()
        os.chown(d, 65534, 65534)  # the developer toolbox writes there
    (src / "File.hs").write_text(FILE_HS)
    os.chown(src / "File.hs", 65534, 65534)
    (src / "Main.hs").write_text("main = pure ()\n")
    (src / "chart.png").write_bytes(_png(3, 2))
    (root / "package.yaml").write_text("name: seed\n")
    with sqlite3.connect(root / "analytics.db") as db:
        db.execute("CREATE TABLE users (id INTEGER, name TEXT, active INTEGER)")
        db.executemany("INSERT INTO users VALUES (?, ?, ?)", [(1, "ann", 1), (2, "bob", 0)])
    os.chmod(root / "analytics.db", 0o644)
    for name, verdict in (("approve.sh", _block("400-400")), ("refuse.sh", _block("403-403"))):
        (root / name).write_text(f"#!/bin/sh\ncat > /dev/null\ncat <<'EOF'\n{verdict}EOF\n")
        (root / name).chmod(0o755)
    tools: list[dict[str, Any]] = []
    scripts = {
        "chart": {"generate_chart": _block("27-40").replace('"args": [...]', '"args": []')},
        "mine": {"my-tool": _block("59-82")},
        "template": {"my-tool.bash": _block("713-740")},
        "python": {"my-tool.py": _block("742-779")},
    }
    for folder, files in scripts.items():
        (root / folder).mkdir()
        for name, text in files.items():
            (root / folder / name).write_text(text)
            (root / folder / name).chmod(0o755)
        tools.append({"tag": "FileSystemDirectory", "contents": {"Path": f"./{folder}"}})
    chart = root / "chart" / "generate-chart"
    chart.write_text(f"#!/bin/sh\nbase64 -d <<'EOF'\n{base64.b64encode(_png(3, 2)).decode()}\nEOF\n")
    chart.chmod(0o755)
    response = json.loads(
        _block("132-138").replace("{...}", '{"type": "object", "properties": {"path": {"type": "string"}}}')
    )
    (root / "mcp_server.py").write_text(MCP_SERVER)
    system_caps = [
        "date",
        "operating-system",
        "running-user",
        "hostname",
        "working-directory",
        "attach-file",
        "list-directory",
        "execute-command",
        "list-sessions",
        "search-sessions",
        "read-session",
        "get-session-stats",
    ]
    developer = json.loads((FIXTURES / "developer-toolbox.json").read_text())["builtinToolboxes"][0]
    developer["contents"]["FileSandbox"] = {
        **json.loads((FIXTURES / "developer-file-sandbox.json").read_text())["FileSandbox"],
        "fsbName": "developer-sandbox",
    }
    sqlite = json.loads((FIXTURES / "sqlite-analytics.json").read_text())["builtinToolboxes"][0]
    return agent(
        "seeded",
        bashToolboxes=tools,
        mcpServers=[
            {
                "tag": "McpSimpleBinary",
                "contents": {
                    "name": "filesystem",
                    "executable": sys.executable,
                    "args": [str(root / "mcp_server.py"), json.dumps(response)],
                    # an argument grants nothing: the server's script is granted read-only here
                    "FileSandbox": {"fsbPredicate": {"tag": "FileExactly", "contents": "./mcp_server.py"}},
                },
            }
        ],
        builtinToolboxes=[
            {
                "tag": "SystemToolbox",
                "contents": {
                    "Name": "system",
                    "Description": "System context and session memory",
                    "Capabilities": system_caps,
                    "SessionIntrospectionScope": "subtree",
                    "FileSandbox": {
                        "fsbPredicate": {"tag": "DirectoryRecursive", "contents": "./src"},
                        "fsbName": "system-sandbox",
                    },
                    "CommandFilter": "./approve.sh",
                },
            },
            {
                "tag": "SystemToolbox",
                "contents": {
                    "Name": "guarded",
                    "Description": "commands a filter refuses",
                    "Capabilities": ["execute-command"],
                    "CommandFilter": "./refuse.sh",
                },
            },
            developer,
            sqlite,
            {
                "tag": "LuaToolbox",
                "contents": {
                    "Name": "lua",
                    "Description": "Lua orchestration",
                    "MaxMemoryMB": 256,
                    "MaxExecutionTimeSeconds": 300,
                    "AllowedTools": ["system_system_attach_file"],
                    "AllowedHosts": [],
                    "FileSandbox": {"fsbPredicate": {"tag": "DirectoryRecursive", "contents": "./src"}},
                },
            },
        ],
    )


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    os.makedirs("/tmp/agents-supervise-tests", exist_ok=True)
    import tempfile

    root = Path(tempfile.mkdtemp(dir="/tmp/agents-supervise-tests"))
    os.chmod(root, 0o755)
    return write_policy(root, {"seeded": _stand_ins(root)}, landlock_min_abi=6)


@pytest.fixture
async def sup(seeded: Path) -> AsyncIterator[Supervisor]:
    async with Supervisor.open(seeded) as s:
        yield s


def _shape(value: Any) -> Any:
    """Keys and value types of a JSON value (lists by their first item): what an output example is compared by."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(value[0])] if value else []
    return "number" if isinstance(value, int | float) and not isinstance(value, bool) else type(value).__name__


def _covers(answer: Any, example: Any, where: str = "") -> None:
    """``answer`` has every key of the seed's ``example`` with a value of the same JSON type (it may have more)."""
    want, got = _shape(example), _shape(answer)
    if isinstance(want, dict):
        assert isinstance(got, dict), (where, got)
        for key, value in example.items():
            assert key in answer, f"{where}.{key} missing from {sorted(answer)}"
            _covers(answer[key], value, f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(answer, list), (where, answer)
        if example and answer:
            _covers(answer[0], example[0], f"{where}[0]")
    elif answer is not None:  # a value the seed shows may be null in an answer (a snapshot not taken yet)
        assert got == want, (where, got, want)


def _ok(result: ToolResult) -> Any:
    assert result.status == "passed", result.data
    return result.structured


@pytest.mark.root  # a real supervisor: confined workers
async def test_the_system_examples_run(sup: Supervisor, seeded: Path) -> None:
    root = seeded.parent

    async def call(tool: str, args: Any) -> ToolResult:
        return await sup.call(tool, args, session_id="seed", agent_scope="seeded")

    # date
    _covers(_ok(await call("system_system_date", _json("494-496"))), _json("498-507"))
    # attach-file: /path/to/image.png is outside the sandbox; the stand-in is attached as what it is
    example = _json("358-361")
    refused = await call("system_system_attach_file", example)
    assert refused.status == "error" and "not allowed by the file sandbox 'system-sandbox'" in (refused.data or "")
    attached = await call("system_system_attach_file", {**example, "filepath": "./src/chart.png"})
    [image] = attached.attachments
    assert image.media_type == "image/png" and sup.services.calls.attachments.read(image) == _png(3, 2)
    # list-directory, as written
    listed = _ok(await call("system_system_list_directory", _json("367-372")))
    _covers(listed, _json("375-382"))
    assert listed["path"] == "./src" and {e["name"] for e in listed["entries"]} == {"File.hs", "Main.hs", "chart.png"}
    # execute-command, as written, past the filter that prints the seed's "allowed" verdict; run in the agent's folder
    ran = _ok(await call("system_system_execute_command", _json("385-388")))
    _covers(ran, _json("391-397"))
    assert ran["exitCode"] == 0 and "src" in ran["stdout"]
    # ... and the filter that prints the seed's "refused" verdict refuses, with its note
    guarded = await call("system_guarded_execute_command", _json("385-388"))
    assert guarded.status == "error"
    assert guarded.data == "command refused by the command filter: Command contains dangerous operations"
    words = await call("system_system_execute_command", {"command": "echo 'error handling pattern'"})
    assert words.status == "passed"
    # sessions
    sessions = _ok(await call("system_system_list_sessions", _json("424-426")))
    _covers(sessions, _json("428-442"))
    found = _ok(await call("system_system_search_sessions", _json("444-447")))
    _covers(found, _json("449-462"))
    assert found["results"] and found["scope"] == "subtree"
    read = _json("464-470")
    invalid = await call("system_system_read_session", read)
    assert invalid.status == "error"
    assert "InvalidSessionIdError: 'target-session-uuid' is not a session id" in (invalid.data or "")
    mine = sessions["sessions"][0]["sessionId"]
    answer = _ok(await call("system_system_read_session", {**read, "session_id": mine}))
    _covers(answer, _json("472-481"))
    assert (answer["format"], answer["scope"], answer["access"]) == ("condensed-text", "subtree", "granted")
    _covers(_ok(await call("system_system_get_session_stats", _json("483-485"))), _json("487-492"))
    # the working directory: where relative paths start
    where = _ok(await call("system_system_working_directory", {"capability": "working-directory"}))
    assert where["data"]["path"] == str(root)


@pytest.mark.root  # a real supervisor: confined workers
async def test_the_developer_examples_run(sup: Supervisor, seeded: Path) -> None:
    async def call(tool: str, args: Any) -> ToolResult:
        return await sup.call(tool, args, session_id="dev", agent_scope="seeded")

    spec = await call("developer_dev_show_spec", _json("541-544"))
    assert spec.status == "passed" and "describe" in (spec.data or "")
    # the seed's /path/to/file is outside the developer-sandbox: each refusal names it
    for tool, lines in (("read_file_range", "546-552"), ("write_file_range", "581-589"), ("patch_file", "612-617")):
        refused = await call(f"developer_dev_{tool}", _json(lines))
        assert refused.status == "error" and "the file sandbox 'developer-sandbox'" in (refused.data or ""), lines
    read = _json("546-552")
    ranged = _ok(await call("developer_dev_read_file_range", {**read, "path": "./src/File.hs"}))
    _covers(ranged, _json("554-562"))
    assert ranged["rangesParsed"] == ["1-10", "20-30"] and ranged["totalLineCount"] == 50
    meta = _ok(await call("developer_dev_read_file_range", {**read, "path": "./src/File.hs", "metadata_only": True}))
    _covers(meta, _json("564-573"))
    assert meta["metadataOnly"] is True and meta["content"] == ""
    in_session = _ok(await call("developer_dev_read_file_range", _json("575-579")))  # as written
    snapshot = in_session["snapshotRef"]
    # write-file-range with the seed's placeholder snapshot: refused as stale; with the file's own: written
    write = _json("591-598")
    stale = await call("developer_dev_write_file_range", write)
    assert stale.status != "passed" and "a1b2c3d4..." in (stale.data or "")
    written = _ok(await call("developer_dev_write_file_range", {**write, "expected_snapshot_ref": snapshot}))
    _covers(written, _json("600-610"))
    assert written["linesWritten"] == 1 and written["sessionCommitted"] is True
    staged = _ok(
        await call(
            "developer_dev_write_file_range",
            {**_json("581-589"), "path": "./src/File.hs", "expected_snapshot_ref": written["afterSnapshotRef"]},
        )
    )
    _covers(staged, _json("600-610"))
    assert staged["sessionId"] == "sess-abc" and staged["sessionStatus"] in ("staged", "committed")
    # patch-file: the seed's patch, on the stand-in, is refused for what it is (an abbreviated diff whose hunk headers
    # count lines its body does not hold); a patch whose context does not match gets the seed's error fields
    current = _ok(await call("developer_dev_read_file_range", {"path": "./src/File.hs"}))
    patch = _json("612-617")
    abbreviated = await call(
        "developer_dev_patch_file",
        {**patch, "path": "./src/File.hs", "expected_snapshot_ref": current["snapshotRef"]},
    )
    assert abbreviated.status == "error" and "the header counts 5 old and 6 new lines" in (abbreviated.data or "")
    wrong = "--- a/src/File.hs\n+++ b/src/File.hs\n@@ -10,2 +10,2 @@\n import Foo\n-import Bar\n+import Baz\n"
    mismatch = await call("developer_dev_patch_file", {"path": "./src/File.hs", "patch": wrong})
    assert mismatch.status == "failed", mismatch.data
    _covers(mismatch.structured, _json("619-624"))
    _covers(mismatch.structured, _json("635-639"))
    assert mismatch.structured["error"].startswith("Context mismatch at line")
    lines = current["content"].splitlines()
    second = lines[1].split("\t", 1)[1]
    good = f"--- a/src/File.hs\n+++ b/src/File.hs\n@@ -2,1 +2,1 @@\n-{second}\n+patched\n"
    patched = _ok(await call("developer_dev_patch_file", {"path": "./src/File.hs", "patch": good}))
    _covers(patched, _json("626-633"))
    assert (patched["hunksApplied"], patched["hunksRejected"]) == (1, 0)


@pytest.mark.root  # a real supervisor: confined workers
async def test_the_query_script_and_protocol_examples_run(sup: Supervisor) -> None:
    async def call(tool: str, args: Any) -> ToolResult:
        return await sup.call(tool, args, agent_scope="seeded")

    rows = _ok(await call("sqlite_analytics_query", _json("230-232")))
    assert "ann" in json.dumps(rows) and "bob" not in json.dumps(rows)
    lua = _ok(await call("lua_lua_execute", _json("908-911")))
    assert lua["values"] == ['{"status":"ok"}']
    # the seed's bash tools, run as written (its my-tool prints its first argument, which the protocol makes "run")
    chart = await call("bash_generate_chart", {})
    assert chart.status == "passed" and [a.media_type for a in chart.attachments] == ["image/png"]
    names = {t.name for t in sup.list_tools(agent="seeded")}
    assert {"bash_my_tool", "bash_my_tool_2", "bash_my_tool_3"} <= names  # three scripts of the one slug
    outputs = sorted(
        [
            (await call(name, {} if name != "bash_my_tool" else {"input": "x"})).data or ""
            for name in ("bash_my_tool", "bash_my_tool_2", "bash_my_tool_3")
        ]
    )
    assert outputs == ["Result for: run\n", "Tool my-tool executed\n", "Tool my-tool executed\n"], outputs
    # MCP: the toolbox sends the seed's tools/list and tools/call; the server answers the seed's response
    [tool] = [t for t in sup.list_tools(agent="seeded") if t.name == "mcp_filesystem_read_file"]
    assert tool.description == "Read a file"
    call_example = _json("141-144")
    result = await call("mcp_filesystem_read_file", call_example["params"]["arguments"])
    seen = json.loads(result.data or "[]")
    listed = [m for m in seen if m.get("method") == "tools/list"]
    request = {k: v for k, v in _json("129-129").items() if k != "id"}
    assert listed and all({k: v for k, v in m.items() if k != "params" or v} == request for m in listed), listed
    sent = seen[-1]
    assert sent["method"] == call_example["method"] and sent["params"]["name"] == call_example["params"]["name"]
    assert sent["params"]["arguments"] == {"path": "/tmp/foo"}
