"""The durability check of issue 19 (``scripts/chaos durability``): ``kill -9`` of the supervisor right after an
acknowledged write, many rounds, then what survived.

Each round starts ``python -m supervisor --policy <lab>`` (the MCP frontend on stdio), creates a Developer file and
inserts a SQLite row through it, and SIGKILLs the supervisor the moment the second answer arrives. Afterwards:
every acknowledged write must be present, so must the session store's record of every answered call (as the next
start sees it: the killed supervisor's journal applied), the SQLite
stores (the toolbox's and the sessions database) must pass
``PRAGMA integrity_check``, the trace must end on a complete line, the supervisor's processes (launchers, workers,
the MCP server) must be gone, and after the next start no temporary file of an interrupted atomic write may be
left in the lab.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psutil
from _chaos_lab import REPO, Lab

from supervisor.sessions import SessionStore
from toolboxes import is_temporary

if TYPE_CHECKING:
    from pathlib import Path


@dataclass
class Durability:
    rounds: int = 0
    acked_files: int = 0
    acked_rows: int = 0
    lost_files: int = 0
    lost_rows: int = 0
    acked_records: int = 0  # acknowledged calls whose record the sessions database must hold
    lost_records: int = 0
    corrupt: list[str] = field(default_factory=list)
    torn_trace_ends: int = 0
    survivors: int = 0
    temporaries: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


class _Client:
    """A JSON-RPC client of the supervisor's stdio frontend (blocking; one request at a time)."""

    def __init__(self, policy: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "supervisor", "--policy", str(policy)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=REPO,
        )
        self.next_id = 0

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin
        assert self.proc.stdout
        self.next_id += 1
        self.proc.stdin.write(
            json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}).encode() + b"\n"
        )
        self.proc.stdin.flush()
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"the supervisor ended before answering {method}")
            msg = json.loads(line)
            if msg.get("id") == self.next_id:
                return msg

    def start(self) -> None:
        reply = self.request(
            "initialize",
            {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "durability", "version": "1"}},
        )
        assert "result" in reply, reply
        assert self.proc.stdin
        self.proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        self.proc.stdin.flush()

    def call(self, tool: str, args: dict[str, Any]) -> bool:
        """Whether the call passed (its answer acknowledged the write)."""
        reply = self.request("tools/call", {"name": tool, "arguments": args})
        return "result" in reply and not reply["result"].get("isError")


def _integrity(path: Path) -> str:
    if not path.exists():
        return "ok"
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])


def _recorded_calls(db: Path, nonce: str) -> int:
    """How many tool calls whose arguments name ``nonce`` the sessions database holds once opened again: the store's
    journal of the killed supervisor (its commits before each answer) applied, as the next start applies it."""
    if not db.exists():
        return 0
    SessionStore(str(db)).close()
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return int(conn.execute("SELECT COUNT(*) FROM tool_calls WHERE instr(args, ?) > 0", (nonce,)).fetchone()[0])


def _trace_ends_complete(trace: Path) -> bool:
    data = trace.read_bytes() if trace.exists() else b""
    if not data:
        return True
    if not data.endswith(b"\n"):
        return False
    json.loads(data.rstrip(b"\n").rsplit(b"\n", 1)[-1])
    return True


def _temporaries(root: Path) -> list[str]:
    found = []
    for folder, _dirs, files in os.walk(root):
        found += [os.path.join(folder, f) for f in files if is_temporary(f)]
    return found


def _gone(pids: list[int], timeout_s: float = 10) -> int:
    """How many of ``pids`` are still alive (not zombies) after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive or time.monotonic() > deadline:
            return len(alive)
        time.sleep(0.05)


def durability(lab: Lab, rounds: int) -> Durability:
    """Run ``rounds`` rounds of write, acknowledge, ``kill -9`` (then one clean start) and check what is left."""
    out = Durability()
    files: list[str] = []
    rows: list[str] = []
    for n in range(rounds):
        client = _Client(lab.policy)
        try:
            client.start()
            if n:  # the previous round's kill may have left temporaries: this start must have removed them
                out.temporaries += _temporaries(lab.root)
            nonce = f"d{n:05d}x{os.getpid():x}"
            patch = f"--- /dev/null\n+++ b/{nonce}.txt\n@@ -0,0 +1 @@\n+{nonce}\n"
            answered = 0  # calls answered, passed or not: each answer must have its record
            if client.call("developer_dev_patch_file", {"path": str(lab.project / f"{nonce}.txt"), "patch": patch}):
                files.append(nonce)
            answered += 1
            family = [p.pid for p in psutil.Process(client.proc.pid).children(recursive=True)]
            if client.call("sqlite_acks_query", {"sql": "INSERT INTO acks (nonce) VALUES (?)", "params": [nonce]}):
                rows.append(nonce)
            answered += 1
            os.kill(client.proc.pid, signal.SIGKILL)  # right after the acknowledgement
            client.proc.wait()
            out.acked_records += answered
            out.lost_records += answered - _recorded_calls(lab.root / "state" / "sessions.sqlite3", nonce)
        except (RuntimeError, AssertionError, OSError) as exc:
            out.problems.append(f"round {n}: {exc}")
            client.proc.kill()
            client.proc.wait()
            continue
        out.rounds += 1
        out.survivors += _gone(family)
        out.torn_trace_ends += not _trace_ends_complete(lab.root / "state" / "trace.jsonl")
        for db in (lab.db, lab.root / "state" / "sessions.sqlite3"):
            if (verdict := _integrity(db)) != "ok":
                out.corrupt.append(f"round {n}: {db.name}: {verdict}")
    last = _Client(lab.policy)  # one clean start and stop: the last kill's temporaries must go too
    try:
        last.start()
        out.temporaries += _temporaries(lab.root)
    finally:
        assert last.proc.stdin
        last.proc.stdin.close()
        last.proc.wait(timeout=60)
    out.acked_files, out.acked_rows = len(files), len(rows)
    out.lost_files = len(set(files) - lab.acknowledged_present("developer", set(files)))
    out.lost_rows = len(set(rows) - lab.acknowledged_present("sqlite", set(rows)))
    return out
