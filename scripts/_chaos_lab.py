"""The lab of the reliability harnesses (``scripts/chaos``, ``scripts/soak``): one agent with a toolbox of every
kind, real confined workers, and the call mix that runs on them.

Toolboxes: System (two), Lua, SQLite read-write, Developer (FileSandbox: the lab's project folder), bash tools (a
folder of scripts), skills (a skill folder with a script tool, auto-enabled), an MCP server over stdio, OpenAPI and
PostgREST (against an HTTP server on 127.0.0.1 the lab starts in a process of its own, reached through the
supervisor's egress proxy) and WASM (a component built from WAT at set-up; needs ``wasm-tools`` in the venv).

Every call carries a nonce its answer must echo (:data:`NONCE_RE`), so an answer given to the wrong call is seen.
Writes are checked afterwards: each acknowledged SQLite insert and Developer file must be present.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from labkit import Spec, build_components, describe_json, make_skill, skill_md, write_script  # noqa: E402
from toolboxes import KINDS  # noqa: E402

if TYPE_CHECKING:
    import random
    from collections.abc import Iterator

NOBODY = 65534
NONCE_RE = r"n\d{7}x[0-9a-f]+"

#: The MCP server of the lab: answers ``echo`` with its text.
ECHO_SERVER = textwrap.dedent("""
    import json, sys
    def send(m):
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", **m}) + "\\n"); sys.stdout.flush()
    while True:
        line = sys.stdin.readline()
        if not line:
            sys.exit(0)
        msg = json.loads(line)
        method, mid = msg.get("method"), msg.get("id")
        if method == "initialize":
            send({"id": mid, "result": {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {},
                                        "serverInfo": {"name": "echo", "version": "1"}}})
        elif method == "tools/list":
            send({"id": mid, "result": {"tools": [{"name": "echo", "description": "echo", "inputSchema": {
                "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}]}})
        elif method == "tools/call":
            send({"id": mid, "result": {"content": [{"type": "text", "text": msg["params"]["arguments"]["text"]}]}})
""")

#: The HTTP server of the lab (its own process, so its threads and memory are not the supervisor's): the OpenAPI
#: document at ``/openapi.json`` (GET ``/echo/{text}``), a PostgREST-style Swagger 2.0 document at ``/`` (GET
#: ``/todos`` with a ``title`` row filter); ``/echo/X`` answers ``{"echo": X}``, ``/todos?title=eq.X`` answers
#: ``[{"id": 1, "title": X}]``. Prints its port, then serves until its stdin closes.
API_SERVER = textwrap.dedent("""
    import json, sys, threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from urllib.parse import parse_qs, unquote, urlsplit
    OPENAPI = {"openapi": "3.0.3", "info": {"title": "echo", "version": "1"}, "paths": {"/echo/{text}": {"get": {
        "operationId": "echo", "parameters": [{"name": "text", "in": "path", "required": True,
                                               "schema": {"type": "string"}}],
        "responses": {"200": {"description": "ok"}}}}}}
    SWAGGER = {"swagger": "2.0", "info": {"title": "todos", "version": "1"}, "host": "127.0.0.1", "basePath": "/",
               "paths": {"/todos": {"get": {"parameters": [{"$ref": "#/parameters/rowFilter.todos.title"},
                                                           {"$ref": "#/parameters/limit"}],
                                            "responses": {"200": {"description": "OK"}}}}},
               "parameters": {
                   "rowFilter.todos.title": {"name": "title", "in": "query", "required": False, "type": "string",
                                             "format": "text"},
                   "limit": {"name": "limit", "in": "query", "required": False, "type": "string",
                             "description": "Limiting and Pagination"}},
               "definitions": {"todos": {"type": "object", "properties": {"id": {"type": "integer"},
                                                                         "title": {"type": "string"}}}}}
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        def log_message(self, *args):
            pass
        def do_GET(self):
            url = urlsplit(self.path)
            if url.path == "/openapi.json":
                status, body = 200, OPENAPI
            elif url.path == "/":
                status, body = 200, SWAGGER
            elif url.path.startswith("/echo/"):
                status, body = 200, {"echo": unquote(url.path[len("/echo/"):])}
            elif url.path == "/todos":
                title = parse_qs(url.query).get("title", ["eq."])[0]
                status, body = 200, [{"id": 1, "title": title[3:] if title.startswith("eq.") else title}]
            else:
                status, body = 404, {"message": "no such path"}
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
    class Server(ThreadingHTTPServer):
        def handle_error(self, request, client_address):
            pass  # a worker killed mid-request (the chaos killer) is no news
    server = Server(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(server.server_address[1], flush=True)
    sys.stdin.read()
""")

#: (kind, weight) of the call mix: every toolbox kind, System twice as often.
MIX = [(kind, 2 if kind == "system" else 1) for kind in KINDS]


@dataclass
class Lab:
    """A lab on disk: ``policy`` to open, ``db`` and ``project`` to check writes in, ``api_pid`` (not a worker)."""

    root: Path
    policy: Path
    db: Path
    project: Path
    api_pid: int
    kinds: frozenset[str] = frozenset(k for k, _ in MIX)

    def call(self, rng: random.Random, serial: int, session: str) -> tuple[str, str, dict[str, Any], str]:
        """One call of the mix: ``(kind, tool, arguments, nonce)``."""
        nonce = f"n{serial:07d}x{rng.randrange(1 << 30):x}"
        mix = [(k, w) for k, w in MIX if k in self.kinds]
        kind = rng.choices([k for k, _ in mix], [w for _, w in mix])[0]
        if kind == "system":
            return kind, f"system_sys{rng.randrange(2)}_execute_command", {"command": f"echo {nonce}"}, nonce
        if kind == "lua":
            return kind, "lua_lua_execute", {"script": f"return '{nonce}'"}, nonce
        if kind == "sqlite":
            return (
                kind,
                "sqlite_acks_query",
                {"sql": "INSERT INTO acks (nonce) VALUES (?) RETURNING nonce", "params": [nonce]},
                nonce,
            )
        if kind == "mcp":
            return kind, "mcp_echo_echo", {"text": nonce}, nonce
        if kind == "developer":
            patch = f"--- /dev/null\n+++ b/{nonce}.txt\n@@ -0,0 +1 @@\n+{nonce}\n"
            return kind, "developer_dev_patch_file", {"path": str(self.project / f"{nonce}.txt"), "patch": patch}, nonce
        if kind == "bash":
            return kind, "bash_echo", {"v": nonce}, nonce
        if kind == "skills":
            return kind, "skill_chaos-utils_echo", {"file": nonce}, nonce
        if kind == "openapi":
            return kind, "openapi_api_echo", {"text": nonce}, nonce
        if kind == "postgrest":
            return kind, "postgrest_127_0_0_1_get_todos", {"filters": {"title": f"eq.{nonce}"}}, nonce
        return kind, "wasm_probe_echo", {"q": nonce}, nonce

    def acknowledged_present(self, kind: str, nonces: set[str]) -> set[str]:
        """Which of ``nonces`` (acknowledged writes of ``kind``: sqlite or developer) are present now."""
        if kind == "sqlite":
            with sqlite3.connect(self.db) as conn:
                return nonces & {row[0] for row in conn.execute("SELECT nonce FROM acks")}
        present = set()
        for nonce in nonces:
            with contextlib.suppress(OSError):
                if (self.project / f"{nonce}.txt").read_text() == f"{nonce}\n":
                    present.add(nonce)
        return present


def _own(*paths: Path) -> None:
    for path in paths:
        os.chown(path, NOBODY, NOBODY)


def _toolboxes(root: Path, api_port: int, kinds: frozenset[str]) -> dict[str, Any]:
    """The agent file's toolbox sections, of ``kinds`` only (System is always there: the killer's OOM needs it)."""
    system = [
        {
            "tag": "SystemToolbox",
            "contents": {"Name": f"sys{i}", "Description": "chaos", "Capabilities": ["execute-command", "date"]},
        }
        for i in range(2)
    ]
    lua = {
        "tag": "LuaToolbox",
        "contents": {
            "Name": "lua",
            "Description": "chaos",
            "MaxMemoryMB": 32,
            "MaxExecutionTimeSeconds": 5,
            "AllowedTools": [],
            "AllowedHosts": [],
        },
    }
    sqlite = {
        "tag": "SqliteToolbox",
        "contents": {
            "Name": "acks",
            "Description": "chaos",
            "Versioning": {"tag": "SqliteReadWrite", "path": str(root / "store" / "chaos.db")},
        },
    }
    fsb = {"fsbPredicate": {"tag": "DirectoryRecursive", "contents": str(root / "project")}, "fsbName": "project"}
    dev = {
        "tag": "DeveloperToolbox",
        "contents": {
            "Name": "dev",
            "Description": "chaos",
            "Capabilities": ["read-file-range", "patch-file"],
            "FileSandbox": fsb,
        },
    }
    wasm = {
        "tag": "WasmToolbox",
        "contents": {
            "Name": "probe",
            "Description": "chaos",
            "Path": "./components",
            "MaxMemoryMB": 16,
            "MaxExecutionTimeSeconds": 5,
        },
    }
    api = f"http://127.0.0.1:{api_port}"
    builtin = {"lua": lua, "sqlite": sqlite, "developer": dev, "wasm": wasm}
    sections: dict[str, Any] = {"builtinToolboxes": [*system, *(builtin[k] for k in builtin if k in kinds)]}
    if "mcp" in kinds:
        sections["mcpServers"] = [
            {
                "tag": "McpSimpleBinary",
                "contents": {
                    "name": "echo",
                    "executable": sys.executable,
                    "args": [str(root / "echo.py")],
                    # an argument grants nothing (docs/MCP.md): the server's script is granted read-only here
                    "FileSandbox": {"fsbPredicate": {"tag": "FileExactly", "contents": "./echo.py"}},
                },
            }
        ]
    if "bash" in kinds:
        sections["bashToolboxes"] = [{"tag": "FileSystemDirectory", "contents": {"Path": "./tools"}}]
    if "skills" in kinds:
        sections["skillSources"] = [{"tag": "SkillDirectory", "contents": "./skills"}]
        sections["autoEnableSkills"] = ["chaos-utils"]
    if "openapi" in kinds:
        sections["openApiToolboxes"] = [
            {"tag": "OpenAPIServer", "contents": {"Name": "api", "SpecUrl": f"{api}/openapi.json", "BaseUrl": api}}
        ]
    if "postgrest" in kinds:
        sections["postgrestToolboxes"] = [
            {"tag": "PostgRESTServer", "contents": {"SpecUrl": f"{api}/", "BaseUrl": api}}
        ]
    return sections


def _files(root: Path, kinds: frozenset[str]) -> None:
    """The lab's files: the MCP server, the SQLite store, the Developer project, bash tools, a skill, WASM."""
    os.chmod(root, 0o755)
    (root / "echo.py").write_text(ECHO_SERVER)
    (root / "echo.py").chmod(0o644)
    store = root / "store"
    store.mkdir()
    with sqlite3.connect(store / "chaos.db") as conn:
        conn.execute("CREATE TABLE acks (nonce TEXT PRIMARY KEY)")
    project = root / "project"
    project.mkdir()
    _own(store, store / "chaos.db", project)
    (root / "tools").mkdir()
    arg = {
        "name": "v",
        "description": "",
        "type": "string",
        "backing_type": "string",
        "arity": "single",
        "mode": "positional",
    }
    write_script(root / "tools", "echo", describe_json("echo", [arg]), 'echo "$1"')
    make_skill(root / "skills", "chaos", skill_md("chaos-utils"), scripts={"echo": "echo"})
    if "wasm" in kinds:
        build_components([Spec("echo", summary="echoed the input", behaviour="echo")], root / "components")


@contextlib.contextmanager
def lab(
    root: Path,
    *,
    cooldown_s: float,
    wall_time_s: float = 10,
    sessions: dict[str, Any] | None = None,
    trace: dict[str, Any] | None = None,
    kinds: frozenset[str] | None = None,
    policy_extra: dict[str, Any] | None = None,
) -> Iterator[Lab]:
    """Write the lab into ``root`` (world-traversable; the workers read it), start its HTTP server, yield it.
    ``kinds``: the toolbox kinds of :data:`MIX` to have (default: all); ``policy_extra``: more policy keys (the
    HTTP frontend and its tenants, for ``scripts/chaos http``)."""
    kinds = frozenset(k for k, _ in MIX) if kinds is None else kinds
    _files(root, kinds)
    server = subprocess.Popen(
        [sys.executable, "-c", API_SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        contents = {
            "slug": "chaos",
            "apiKeyId": "k",
            "flavor": "openai",
            "modelUrl": "http://127.0.0.1:9/v1",
            "modelName": "m",
            "announce": "chaos",
            "systemPrompt": ["chaos"],
            **_toolboxes(root, port, kinds),
        }
        (root / "chaos.json").write_text(json.dumps({"tag": "OpenAIAgentDescription", "contents": contents}))
        policy: dict[str, Any] = {
            "agents": ["chaos.json"],
            "state_dir": str(root / "state"),
            "worker_uids": None,
            "landlock_min_abi": 6,
            "limits": {"wall_time_s": wall_time_s, "memory_bytes": "256MiB"},
            "supervision": {"crash_loop_cooldown_s": cooldown_s},
            # the OpenAPI/PostgREST stand-in listens on the host's loopback, which only the policy opens
            "network": {"allow_loopback": True},
        }
        if sessions:
            policy["sessions"] = sessions
        if trace:
            policy["trace"] = trace
        policy.update(policy_extra or {})
        (root / "policy.yaml").write_text(yaml.safe_dump(policy))
        yield Lab(root, root / "policy.yaml", root / "store" / "chaos.db", root / "project", server.pid, kinds)
    finally:
        server.kill()
        server.wait()
