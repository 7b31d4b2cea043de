"""Locks on shared system files are no channel between tenants (issue 12, defect 9, the last part).

Two agents: ``tester`` with ``alpha`` (the sender) and ``other`` with ``gamma`` (the receiver), both with a shell.
The sender takes every kind of lock a read-only file allows (``flock``, a POSIX read lock, an OFD read lock) on
files every worker reads: one inside a bound system folder (``/usr/bin/env``), a system file bound alone
(``/etc/ld.so.cache``) and a device node (``/dev/null``); a forked child of the sender confirms the locks are held.
While it holds them, the receiver, in its own worker, probes the same paths for a conflicting lock, and so does the
host. With the private view (system paths shown through overlays of each worker's own) neither sees anything: one
bit (locked or not) cannot cross. ``private_view: false`` shows the channel is real: there the receiver sees them.
"""

from __future__ import annotations

import fcntl
import json
import os
import struct
from typing import TYPE_CHECKING, Any

import pytest
import trio

from supervisor._supervisor import Supervisor
from supervisor.config._policy import DEFAULT_SYSTEM_PATHS
from tests._policies import agent, system_toolbox, write_policy
from tests.supervisor._watch import CreateWatch

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.root

PATHS = ("/usr/bin/env", "/etc/ld.so.cache", "/dev/null")

#: Python shared by both ends: ``probe(path)`` says which locks a fresh open of ``path`` would conflict with.
PROBE = r"""
import fcntl, json, os, struct, sys, time
F_OFD_GETLK, F_OFD_SETLK = 36, 37
def lock_struct(kind): return struct.pack("hhqqi", kind, 0, 0, 0, 0)
def probe(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        seen = []
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
        except BlockingIOError:
            seen.append("flock")
        for name, cmd in (("posix", fcntl.F_GETLK), ("ofd", F_OFD_GETLK)):
            if struct.unpack("hhqqi", fcntl.fcntl(fd, cmd, lock_struct(fcntl.F_WRLCK)))[0] != fcntl.F_UNLCK:
                seen.append(name)
        return seen
    finally:
        os.close(fd)
"""

SENDER = (
    PROBE
    + r"""
held = []
for path in json.loads(sys.argv[1]):
    a, b, c = (os.open(path, os.O_RDONLY) for _ in range(3))
    fcntl.flock(a, fcntl.LOCK_EX)
    fcntl.fcntl(b, fcntl.F_SETLK, lock_struct(fcntl.F_RDLCK))
    fcntl.fcntl(c, F_OFD_SETLK, lock_struct(fcntl.F_RDLCK))
    held += [a, b, c]
r, w = os.pipe()
if os.fork() == 0:  # another process of the sender's own worker: it must see every lock
    os.write(w, json.dumps({p: probe(p) for p in json.loads(sys.argv[1])}).encode())
    os._exit(0)
os.close(w)
own = os.read(r, 65536).decode()
os.wait()
open("ready.tmp", "w").write(own)
os.link("ready.tmp", "ready")  # whole, and an IN_CREATE for the test's watch
while not os.path.exists("done"):  # hold the locks until the receiver and the host have looked
    time.sleep(0.01)
print(own)
"""
)

RECEIVER = (
    PROBE
    + r"""
print(json.dumps({p: probe(p) for p in json.loads(sys.argv[1])}))
"""
)


def _command(script: str) -> str:
    """The script as a command, run in the work folder (``$HOME``), where it leaves ``ready`` for the test."""
    return f"cd \"$HOME\" && python3 - '{json.dumps(PATHS)}' <<'PY'\n{script}\nPY"


def _host_probe(path: str) -> list[str]:
    """The host's own look (this test runs as root in the host's namespaces)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        seen = []
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
        except BlockingIOError:
            seen.append("flock")
        for name, cmd in (("posix", fcntl.F_GETLK), ("ofd", 36)):
            answer = fcntl.fcntl(fd, cmd, struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 0, 0))
            if struct.unpack("hhqqi", answer)[0] != fcntl.F_UNLCK:
                seen.append(name)
        return seen
    finally:
        os.close(fd)


def _policy(root: Path, **policy: Any) -> Path:
    tester = agent("tester", builtinToolboxes=[system_toolbox("alpha", capabilities=["execute-command"])])
    other = agent("other", builtinToolboxes=[system_toolbox("gamma", capabilities=["execute-command"])])
    return write_policy(
        root, {"tester": tester, "other": other}, landlock_min_abi=6, system_paths=list(DEFAULT_SYSTEM_PATHS), **policy
    )


async def _signal(root: Path, **policy: Any) -> tuple[dict[str, list[str]], dict[str, list[str]], dict[str, list[str]]]:
    """Run the sender and, while it holds its locks, the receiver and the host's probe. Returns what the
    sender's own second process, the receiver and the host saw."""
    workdir = root / "state" / "work" / "tester" / "alpha"
    async with Supervisor.open(_policy(root, **policy)) as sup:
        assert not sup.load_errors(), sup.load_errors()
        sent: dict[str, Any] = {}

        async def send() -> None:
            result = await sup.call("system_alpha_execute_command", {"command": _command(SENDER)})
            sent["out"] = result.structured

        with CreateWatch(workdir) as watch:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(send)
                with trio.fail_after(60):
                    await watch.wait_for((workdir / "ready").exists)  # the sender holds its locks from here on
                own = json.loads((workdir / "ready").read_text())
                host = {p: _host_probe(p) for p in PATHS}
                result = await sup.call("system_gamma_execute_command", {"command": _command(RECEIVER)})
                assert result.structured is not None and result.structured["exitCode"] == 0, result.data
                received = json.loads(result.structured["stdout"])
                (workdir / "done").write_text("")
        assert sent["out"] is not None and sent["out"]["exitCode"] == 0, sent
    return own, received, host


async def test_a_lock_on_a_shared_system_file_carries_no_bit_to_another_tenant(sandbox_tmp: Path) -> None:
    own, received, host = await _signal(sandbox_tmp)
    assert own == {p: ["flock", "posix", "ofd"] for p in PATHS}, own  # the locks are held: its own worker sees them
    assert received == {p: [] for p in PATHS}, f"BREACH: the other tenant saw the locks: {received}"
    assert host == {p: [] for p in PATHS}, f"the host saw the worker's locks: {host}"


async def test_without_the_view_the_same_locks_are_a_channel(sandbox_tmp: Path) -> None:
    """What the view closes: without it every worker opens the host's inodes, and the receiver sees the locks."""
    own, received, host = await _signal(sandbox_tmp, private_view=False)
    assert own == {p: ["flock", "posix", "ofd"] for p in PATHS}, own
    assert received == own and host == own, (received, host)
