#!/opt/agents-supervise/venv/bin/python
"""How long the way of one call is on our side: the functions and files of the project one MCP ``tools/call`` of a
bash tool runs in the supervisor process, counted, not timed (issue 26: "81 functions in 23 files").

The supervisor is opened on ``policies/strict.yaml`` with one bash toolbox (``echo.sh``, as ``bench_bash.py``), an
MCP stdio session (:class:`~supervisor.frontends._mcp_stdio.McpStdioServer`, the real one) is served over an
in-memory stream pair, initialized, and warmed with one call; then ``sys.setprofile`` records every Python function
of ``supervisor/``, ``sandbox/`` and ``toolboxes/`` entered in this process from the moment the request line is
written until its answer line is read (the worker is another process: not counted). Prints the count of distinct
functions and files, and with ``--list`` each ``file:function``.

Usage: ``call_path.py [--list]`` (as root: the worker is confined as in production).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import trio
import trio.testing

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO))

from _bench_common import bench_folder, remove_bench_folders  # noqa: E402
from bench_bash import setup  # noqa: E402

from supervisor import Supervisor  # noqa: E402
from supervisor.frontends._mcp_stdio import McpStdioServer  # noqa: E402

__all__ = ["measure"]

_OURS = tuple(str(REPO / package) + "/" for package in ("supervisor", "sandbox", "toolboxes"))


async def _exchange(client: trio.testing.MemoryReceiveStream | Any, stream: Any, message: dict[str, Any]) -> bytes:
    """Send one JSON-RPC line, read until its answer line (notifications before it are skipped)."""
    await stream.send_all(json.dumps(message).encode() + b"\n")
    buffer = b""
    while True:
        buffer += await stream.receive_some(65536)
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if json.loads(line).get("id") == message.get("id"):
                return line


async def measure() -> dict[tuple[str, str], int]:
    """The project functions (file relative to the repo, qualified name) one ``tools/call`` entered, with how many
    times each was entered."""
    root = bench_folder()
    try:
        policy = setup(root)
        async with Supervisor.open(policy) as sup:
            ours, theirs = trio.testing.memory_stream_pair()
            server = McpStdioServer(sup, theirs, theirs)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(server.serve)
                client = {"name": "call-path", "version": "1"}
                init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": client}
                await _exchange(None, ours, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init})
                await ours.send_all(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
                tools = json.loads(await _exchange(None, ours, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))
                name = tools["result"]["tools"][0]["name"]
                call = {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": name, "arguments": {"v": "x"}}}
                await _exchange(None, ours, {**call, "id": 3})  # warm: schema caches, first-call paths
                seen: Counter[tuple[str, str]] = Counter()

                def profile(frame: Any, event: str, _arg: Any) -> None:
                    if event == "call" and frame.f_code.co_filename.startswith(_OURS):
                        path = frame.f_code.co_filename[len(str(REPO)) + 1 :]
                        seen[(path, frame.f_code.co_qualname)] += 1

                sys.setprofile(profile)
                try:
                    answer = json.loads(await _exchange(None, ours, {**call, "id": 4}))
                finally:
                    sys.setprofile(None)
                assert answer["result"]["isError"] is False, answer
                await ours.aclose()
                nursery.cancel_scope.cancel()
        return dict(seen)
    finally:
        remove_bench_folders()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print each file:function")
    args = parser.parse_args()
    seen = trio.run(measure)
    files = {path for path, _ in seen}
    print(f"{len(seen)} functions in {len(files)} files ({sum(seen.values())} entries)")
    for package in ("supervisor", "sandbox", "toolboxes"):
        mine = [key for key in seen if key[0].startswith(package + "/")]
        print(f"  {package}/: {len(mine)} functions in {len({path for path, _ in mine})} files")
    if args.list:
        for (path, name), count in sorted(seen.items()):
            print(f"  {path}:{name}  x{count}")


if __name__ == "__main__":
    main()
