"""A hostile MCP client on a real ``agents-supervise`` process's stdin: every bad line gets a JSON-RPC error or is
ignored, and the server keeps serving (checked with a ``ping`` and a real tool call after each attack)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from tests._policies import agent, system_toolbox, write_policy
from tests.supervisor.frontends.test_frontends import _RawMcp

pytestmark = pytest.mark.root


@pytest.fixture
def policy(sandbox_tmp: Path) -> Path:
    toolbox = system_toolbox(capabilities=["date", "execute-command"])
    return write_policy(
        sandbox_tmp, {"tester": agent(builtinToolboxes=[toolbox])}, sessions={"max_concurrent_calls": 4}
    )


def _raw(mcp: _RawMcp, data: bytes) -> None:
    assert mcp.proc.stdin is not None
    mcp.proc.stdin.write(data)
    mcp.proc.stdin.flush()


async def _still_serves(mcp: _RawMcp, marker: str) -> None:
    mcp.send(
        {
            "jsonrpc": "2.0",
            "id": marker,
            "method": "tools/call",
            "params": {"name": "system_system_date", "arguments": {}},
        }
    )
    while (reply := await mcp.receive()).get("id") != marker:
        assert "error" in reply or "result" in reply
    assert reply["result"]["isError"] is False


LINES = {
    "100k deep array": (b"[" * 100_000 + b"]" * 100_000, -32700, "nested too deeply"),
    "100k deep object": (b'{"a":' * 100_000 + b"1" + b"}" * 100_000, -32700, "nested too deeply"),
    "invalid UTF-8": (b'{"jsonrpc":"2.0","id":1,"method":"\xff\xfe"}', -32700, "parse error"),
    "batch": (b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]', -32600, "expected a JSON-RPC object"),
    "id is a list": (
        b'{"jsonrpc":"2.0","id":[1],"method":"tools/call","params":{"name":"x"}}',
        -32600,
        "string or a number",
    ),
    "id is an object": (b'{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}', -32600, "string or a number"),
    "id is true": (b'{"jsonrpc":"2.0","id":true,"method":"ping"}', -32600, "string or a number"),
    "id is NaN": (b'{"jsonrpc":"2.0","id":NaN,"method":"ping"}', -32600, "string or a number"),
    "id is infinite": (b'{"jsonrpc":"2.0","id":1e400,"method":"ping"}', -32600, "string or a number"),
    "params a list": (b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":[1]}', -32602, "params"),
    "_meta turn id a number": (
        b'{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"system_system_date","_meta":{"turnId":5}}}',
        -32602,
        "_meta.turnId must be a string, not int",
    ),
}


async def test_bad_lines_get_errors_and_the_server_keeps_serving(policy: Path) -> None:
    mcp = _RawMcp(policy)
    try:
        with trio.fail_after(60):
            await mcp.initialize()
            for what, (line, code, text) in LINES.items():
                _raw(mcp, line + b"\n")
                reply = await mcp.receive()
                assert reply["error"]["code"] == code, (what, reply)
                assert text in reply["error"]["message"], (what, reply)
                await _still_serves(mcp, what)
            # Notifications with bad params, cancels of unknown or unhashable ids: ignored, no reply.
            for params in ([1], {"requestId": [1]}, {"requestId": {"a": 1}}, {"requestId": 999}, "x", None):
                mcp.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params})
            _raw(mcp, b'{"jsonrpc":"2.0","result":{}}\n{"jsonrpc":"2.0","method":"nope","params":5}\n')
            await _still_serves(mcp, "after notifications")
    finally:
        mcp.close()
    assert mcp.proc.returncode is not None


async def test_a_100_mb_line_is_refused_once_and_bounded(policy: Path) -> None:
    mcp = _RawMcp(policy)
    try:
        with trio.fail_after(60):
            await mcp.initialize()
            chunk = b"x" * (1 << 20)

            def flood() -> None:
                for _ in range(100):
                    _raw(mcp, chunk)
                _raw(mcp, b"\n")

            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.to_thread.run_sync, flood)
                reply = await mcp.receive()
            assert reply["error"]["code"] == -32600 and "message too large" in reply["error"]["message"]
            await _still_serves(mcp, "after the long line")  # the rest of the long line was dropped, unanswered
    finally:
        mcp.close()


async def test_huge_deep_and_concurrent_calls(policy: Path) -> None:
    mcp = _RawMcp(policy)
    try:
        with trio.fail_after(60):
            await mcp.initialize()
            deep: object = 1
            for _ in range(500):
                deep = [deep]
            mcp.send(
                {
                    "jsonrpc": "2.0",
                    "id": "deep",
                    "method": "tools/call",
                    "params": {"name": "system_system_execute_command", "arguments": {"command": deep}},
                }
            )
            reply = await mcp.receive()
            assert reply["id"] == "deep" and reply["result"]["isError"]
            assert "nested more than 100 deep" in reply["result"]["content"][0]["text"]
            mcp.send(
                {
                    "jsonrpc": "2.0",
                    "id": "huge",
                    "method": "tools/call",
                    "params": {"name": "system_system_execute_command", "arguments": {"command": "x" * (20 << 20)}},
                }
            )
            reply = await mcp.receive()
            assert reply["id"] == "huge" and "more than the limit of 16777216" in reply["result"]["content"][0]["text"]
            # 2000 calls at once: 4 run (the session's limit), the others are refused at once; an id repeats right
            # after its first use, while that call certainly still runs. The 4 that run block until the test
            # cancels them, so no amount of load lets a fifth start.
            lines = [
                json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": i,
                        "method": "tools/call",
                        "params": {"name": "system_system_execute_command", "arguments": {"command": "sleep 600"}},
                    }
                )
                for i in range(2000)
            ]
            burst = ("\n".join([lines[0], *lines]) + "\n").encode()
            async with trio.open_nursery() as nursery:  # read while writing: the server reads no faster than that
                nursery.start_soon(trio.to_thread.run_sync, _raw, mcp, burst)
                replies = [await mcp.receive() for _ in range(1997)]
            errors = [r for r in replies if "error" in r]
            assert len(errors) == 1 and "already running" in errors[0]["error"]["message"]
            refused = [r for r in replies if "result" in r and "limit 4" in r["result"]["content"][0]["text"]]
            assert len(refused) == 1996
            running = set(range(2000)) - {r["id"] for r in refused}
            assert len(running) == 4
            for call_id in running:  # cancelled calls get no response (MCP); their workers stop them
                mcp.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": call_id}})
            while True:  # their slots are free once the worker has stopped them; until then a call is refused
                mcp.send(
                    {
                        "jsonrpc": "2.0",
                        "id": "after",
                        "method": "tools/call",
                        "params": {"name": "system_system_date", "arguments": {}},
                    }
                )
                reply = await mcp.receive()
                assert reply["id"] == "after"  # nothing else answers: the cancelled calls did not
                if "limit 4" not in reply["result"]["content"][0]["text"]:
                    break
            await _still_serves(mcp, "after the burst")
    finally:
        mcp.close()


async def test_python_api_arguments_that_are_not_json_are_refused(policy: Path) -> None:
    from supervisor._supervisor import Supervisor

    async with Supervisor.open(policy) as sup:
        for args, why in (
            ({"command": b"id"}, "bytes"),
            ({"command": {"a"}}, "set"),
            ({"command": float("nan")}, "JSON cannot represent"),
            ({1: "x"}, "map key"),
        ):
            result = await sup.call("system_system_execute_command", args)
            assert result.status == "error" and why in (result.data or ""), result.data
        nul = await sup.call("system_system_execute_command", {"command": "echo a\x00b"})
        assert nul.status in ("error", "failed") and "Traceback" not in (nul.data or ""), nul.data
        assert (await sup.call("system_system_date", {})).status == "passed"


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.slow
async def test_a_client_that_never_reads_is_slowed_down_not_buffered(policy: Path) -> None:
    """Requests are read only while fewer than MAX_IN_FLIGHT are being handled or answered: a client that floods
    without reading the replies ends up blocked on its own writes, and the server's memory stays bounded (without
    this, 40 MB of pings made the server grow by gigabytes)."""
    mcp = _RawMcp(policy)
    try:
        with trio.fail_after(60):
            await mcp.initialize()
            before = _rss_kib(mcp.proc.pid)
            flood = b"".join(
                json.dumps({"jsonrpc": "2.0", "id": f"{i:06d}" + "x" * 2000, "method": "ping"}).encode() + b"\n"
                for i in range(20_000)
            )
            async with trio.open_nursery() as nursery:
                done = trio.Event()

                async def write() -> None:
                    await trio.to_thread.run_sync(_raw, mcp, flood, abandon_on_cancel=True)
                    done.set()

                nursery.start_soon(write)
                with trio.move_on_after(3):  # the flood would be read within this if nothing held it back
                    await done.wait()
                assert not done.is_set(), "the server read the whole flood without anyone reading its replies"
                assert _rss_kib(mcp.proc.pid) - before < 30_000, "the server buffered the flood"
                replies = 0
                while not done.is_set() or replies < 20_000:  # reading the replies lets the writer finish
                    reply = await mcp.receive()
                    replies += reply["id"].endswith("x")
            await _still_serves(mcp, "after the flood")
    finally:
        mcp.close()


async def test_a_tool_name_with_a_lone_surrogate_gets_the_usual_refusal(policy: Path) -> None:
    mcp = _RawMcp(policy)
    try:
        with trio.fail_after(30):
            await mcp.initialize()
            _raw(mcp, b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"a\\ud800b","arguments":{}}}\n')
            reply = await mcp.receive()  # valid JSON: the surrogate comes back escaped
            assert reply["id"] == 7 and reply["result"]["isError"] is True
            assert "Tool not found" in reply["result"]["content"][0]["text"]
            await _still_serves(mcp, "after the surrogate")
    finally:
        mcp.close()
