"""``toolboxes.<name>.spawn: launcher`` (issue 24 item 10): a toolbox whose worker is a fresh exec gets its own
address layout, stack-canary seed and Python hash seed, where the zygote's forks share the zygote's.

Read from outside, as root, in the real workers: where the stack and the C library are mapped
(``/proc/<pid>/maps``), the 16 random bytes the kernel gave the process at exec (``AT_RANDOM`` in
``/proc/<pid>/auxv``, read through ``/proc/<pid>/mem``: the C library's stack canary is made from them), and the
interpreter's hash secret (``_Py_HashSecret``, at the same offset from the interpreter's base as in this process:
the workers run this interpreter)."""

from __future__ import annotations

import ctypes
import json
import os
import struct
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from supervisor._supervisor import Supervisor
from tests._policies import agent, system_toolbox, write_policy
from tests._workers import pid_one

if TYPE_CHECKING:
    from supervisor.workers import Worker

pytestmark = pytest.mark.root

EXE = os.path.realpath(sys.executable)
AT_RANDOM = 25


def _base(pid: int, match: str) -> int:
    """The lowest address at which a file whose path ``match`` names (exactly, or as a part) is mapped in ``pid``."""
    starts = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 6 and (fields[5] == match or (match.startswith("/") is False and match in fields[5])):
            starts.append(int(fields[0].split("-")[0], 16))
    assert starts, f"{match} is not mapped in {pid}"
    return min(starts)


def _read(pid: int, address: int, size: int) -> bytes:
    with open(f"/proc/{pid}/mem", "rb", 0) as mem:
        mem.seek(address)
        return mem.read(size)


def _at_random(pid: int) -> bytes:
    raw = Path(f"/proc/{pid}/auxv").read_bytes()
    pairs = struct.iter_unpack("=QQ", raw)
    address = next(value for key, value in pairs if key == AT_RANDOM)
    return _read(pid, address, 16)


def _hash_secret(pid: int) -> bytes:
    ours = ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, "_Py_HashSecret"))
    offset = ours - _base(os.getpid(), EXE)
    return _read(pid, _base(pid, EXE) + offset, 24)  # the union _Py_HashSecret_t is 24 bytes


def _facts(worker: Worker | None) -> tuple[int, int, bytes, bytes]:
    """Where its stack and its C library are, its AT_RANDOM bytes, its hash secret. (Not the interpreter's own
    base: Debian's python3.11 is not position-independent, so it is at the same address in every process.)"""
    assert worker is not None and worker.pid is not None
    pid = pid_one(worker.pid)
    return _base(pid, "[stack]"), _base(pid, "libc.so"), _at_random(pid), _hash_secret(pid)


async def test_a_fresh_exec_worker_has_its_own_layout_and_seeds(sandbox_tmp: Path) -> None:
    boxes = [system_toolbox(name, ["date"]) for name in ("alpha", "beta", "gamma")]
    policy = write_policy(
        sandbox_tmp,
        {"tester": agent(builtinToolboxes=boxes)},
        toolboxes={"gamma": {"spawn": "launcher"}},
        trace={"path": str(sandbox_tmp / "t.jsonl")},
    )
    async with Supervisor.open(policy) as sup:
        workers = {name: sup.runner(name).worker for name in ("alpha", "beta", "gamma")}
        assert {n: w.spawned_by for n, w in workers.items() if w is not None} == {
            "alpha": "zygote",
            "beta": "zygote",
            "gamma": "launcher",
        }
        alpha, beta, gamma = (_facts(workers[n]) for n in ("alpha", "beta", "gamma"))
        for name in ("alpha", "beta", "gamma"):
            assert (await sup.call(f"system_{name}_date", {})).status == "passed"
    # siblings forked from one zygote: the same layout, canary source and hash secret
    assert alpha == beta
    # the fresh exec: its own of each (ASLR and the kernel's and CPython's random bytes; a clash is 2**-28 or less)
    for i, what in enumerate(("stack", "C library base", "AT_RANDOM", "hash secret")):
        assert gamma[i] != alpha[i], what
    spawns = {
        r["toolbox"]: r["spawned_by"]
        for r in map(json.loads, (sandbox_tmp / "t.jsonl").read_text().splitlines())
        if r["event"] == "worker_spawn"
    }
    assert spawns == {"alpha": "zygote", "beta": "zygote", "gamma": "launcher"}
