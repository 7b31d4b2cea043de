"""A hostile MCP server inside a real confined MCP toolbox: its tool schemas cost that tool only.

The server is a real stdio MCP server (a short Python script speaking JSON-RPC by hand, so that it can send what the
SDK would refuse to), run by the real ``mcp`` toolbox in a real confined worker. Its tools' ``inputSchema`` values
are the ones that ended the whole supervisor (exit 70): ``"$schema"`` that is a list, an integer or ``true``, a
``$ref`` to itself, a remote ``$ref``. At start and again after ``notifications/tools/list_changed``, each bad tool is
a load error naming it, the server's good tools serve, and so does another toolbox.
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

import pytest
import trio

from supervisor._supervisor import Supervisor
from tests._policies import agent, mcp_script_server, system_toolbox, write_policy

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.root

#: ``python hostile.py``: lists ``good`` and five tools with hostile schemas; calling ``relist`` makes the next
#: ``tools/list`` carry a second generation (new hostile schemas, a new good tool) and sends list_changed.
HOSTILE_SERVER = textwrap.dedent("""
    import json, sys
    def send(m):
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", **m}) + "\\n"); sys.stdout.flush()
    obj = {"type": "object", "properties": {"n": {"type": "integer"}}}
    cycle = {"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}}, "$defs": {"x": {"$ref": "#/$defs/x"}}}
    first = {"good": obj, "relist": {"type": "object"}, "cycle_later": cycle,
             "schema_list": {"$schema": [], "type": "object"}, "schema_int": {"$schema": 1},
             "schema_true": {"$schema": True}, "self_ref": {"$ref": "#"}, "remote_ref": {"$ref": "http://x.test/s"}}
    second = {"good": obj, "good_too": obj, "schema_list_2": {"$schema": [1]},
              "loop_2": {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}}
    generation = first
    while True:
        line = sys.stdin.readline()
        if not line:
            sys.exit(0)
        msg = json.loads(line)
        method, mid = msg.get("method"), msg.get("id")
        if method == "initialize":
            send({"id": mid, "result": {"protocolVersion": msg["params"]["protocolVersion"],
                                        "capabilities": {"tools": {"listChanged": True}},
                                        "serverInfo": {"name": "hostile", "version": "1"}}})
        elif method == "tools/list":
            send({"id": mid, "result": {"tools": [{"name": n, "description": n, "inputSchema": s}
                                                  for n, s in generation.items()]}})
        elif method == "tools/call":
            name = msg["params"]["name"]
            if name == "relist":
                generation = second
                send({"method": "notifications/tools/list_changed"})
            send({"id": mid, "result": {"content": [{"type": "text", "text": "ok " + name}]}})
""")


def _policy(root: Path) -> Path:
    script = root / "hostile.py"
    script.write_text(HOSTILE_SERVER)
    script.chmod(0o644)
    server = mcp_script_server("evil", script)
    return write_policy(root, {"tester": agent(mcpServers=[server], builtinToolboxes=[system_toolbox()])})


def _bad_tools(sup: Supervisor) -> dict[str, str]:
    return {e["tool"]: e["message"] for e in sup.load_errors() if e.get("toolbox") == "evil" and "tool" in e}


async def test_hostile_schemas_are_load_errors_of_their_tools_at_start_and_after_a_relist(sandbox_tmp: Path) -> None:
    async with Supervisor.open(_policy(sandbox_tmp)) as sup:
        bad = _bad_tools(sup)
        assert set(bad) == {
            "mcp_evil_schema_list",
            "mcp_evil_schema_int",
            "mcp_evil_schema_true",
            "mcp_evil_self_ref",
            "mcp_evil_remote_ref",
        }, bad
        assert "$schema must be a string" in bad["mcp_evil_schema_list"]
        assert "refers to itself without end" in bad["mcp_evil_self_ref"]
        assert "Unresolvable" in bad["mcp_evil_remote_ref"]
        served = {t.name for t in sup.list_tools()}
        assert {"mcp_evil_good", "mcp_evil_relist", "mcp_evil_cycle_later"} <= served
        assert not served & set(bad)
        good = await sup.call("mcp_evil_good", {"n": 1})
        assert (good.status, good.data) == ("passed", "ok good")
        # A cycle reached only through an argument: the call is refused with the cause, nothing raises.
        looped = await sup.call("mcp_evil_cycle_later", {"a": 1})
        assert looped.status == "error" and "refers to itself without end" in (looped.data or ""), looped.data

        worker = sup.runner("evil").worker
        assert (await sup.call("mcp_evil_relist", {})).status == "passed"
        with trio.fail_after(20):
            while "mcp_evil_good_too" not in {t.name for t in sup.list_tools()}:
                await sup.wait_tools_changed()
        bad = _bad_tools(sup)
        assert set(bad) == {"mcp_evil_schema_list_2", "mcp_evil_loop_2"}, bad
        assert sup.runner("evil").worker is worker and not worker.dead.is_set()  # no restart was needed
        assert (await sup.call("mcp_evil_good_too", {"n": 2})).data == "ok good_too"
        assert (await sup.call("system_system_date", {})).status == "passed"
