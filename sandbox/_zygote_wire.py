"""The zygote's messages: what the supervisor and the zygote (``sandbox._zygote``) say over their socket pair.

The pair is ``AF_UNIX``/``SOCK_SEQPACKET``: one message is one msgpack map (at most :data:`MAX_MESSAGE` bytes),
file descriptors ride along as ``SCM_RIGHTS``. Pure code: encoding, decoding and the checks, no I/O.

Supervisor to zygote:

- ``{"t": "preload", "modules": [name, ...]}`` once, first: the modules the zygote imports before it serves (the
  worker entry and the toolbox kinds' packages). Answered by ``{"t": "ready", "pid", "threads", "failed": {name:
  reason}}``.
- ``{"t": "spawn", "id": n, "fds": [target, ...], "pidns": bool, "cgroup": c}`` with ``len(fds) + c`` fds: fork a
  child that gets the k-th fd as its fd ``fds[k]`` and no other fd; the first three targets are 0, 1 and 2. The
  last ``c`` fds (at most :data:`MAX_CGROUP_FDS`; ``cgroup`` may be left out: 0) are the ``cgroup.procs`` files of
  the child's cgroup, which the child writes ``0`` to (joins) before anything else and closes. With ``pidns`` true
  the child is born PID 1 of a new PID namespace (``pidns`` may be left out: false). Answered by ``{"t":
  "spawned", "id": n, "pid": p, "pidns": bool}`` (whether the child got its PID namespace) with one fd, a pidfd of
  the child (opened before the zygote could reap it, so it names this child and no recycled pid), or ``{"t":
  "refused", "id": n, "error": reason}``.

Zygote to supervisor, unasked: ``{"t": "exit", "pid": p, "status": s}`` once each child was reaped, ``s`` as
``Popen.returncode`` (the exit code, or minus the signal that killed it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import msgpack

from sandbox._errors import SandboxError

__all__ = [
    "MAX_CGROUP_FDS",
    "MAX_FDS",
    "MAX_MESSAGE",
    "SpawnRequest",
    "ZygoteWireError",
    "check_fd_targets",
    "check_modules",
    "check_spawn",
    "decode_message",
    "encode_message",
]

#: the longest message either side sends (a spawn request is about 30 bytes; a ready answer names modules)
MAX_MESSAGE = 64 * 1024
#: the most fds one spawn request may carry (stdio, the bridge end, a test's extra fds)
MAX_FDS = 16
#: the most ``cgroup.procs`` fds one spawn request may carry (cgroup v1: one per hierarchy, pids, memory and cpu)
MAX_CGROUP_FDS = 4
#: the highest fd number a child may be given
MAX_TARGET_FD = 1023

_MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


class ZygoteWireError(SandboxError):
    """A message that is not one of the zygote's (a bug of the peer: the side that reads it stops)."""


def encode_message(message: dict[str, Any]) -> bytes:
    data = msgpack.packb(message, use_bin_type=True)
    if len(data) > MAX_MESSAGE:
        raise ZygoteWireError(f"message of {len(data)} bytes exceeds {MAX_MESSAGE}")
    return bytes(data)


def decode_message(data: bytes) -> dict[str, Any]:
    """Decode one message; raise :class:`ZygoteWireError` unless it is a map with a string ``t``."""
    try:
        message = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        raise ZygoteWireError(f"not msgpack ({type(exc).__name__})") from exc
    if not isinstance(message, dict) or not isinstance(message.get("t"), str):
        raise ZygoteWireError("not a map with a type 't'")
    return message


def check_fd_targets(targets: object, received: int) -> list[int]:
    """The fd numbers of a spawn request, checked: as many as fds came, distinct, 0, 1, 2 first, each at most
    :data:`MAX_TARGET_FD`. Raises :class:`ZygoteWireError`."""
    if not isinstance(targets, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in targets):
        raise ZygoteWireError("fds must be a list of integers")
    if len(targets) != received:
        raise ZygoteWireError(f"fds names {len(targets)} descriptors but {received} came")
    if targets[:3] != [0, 1, 2]:
        raise ZygoteWireError("the first three fds must be the child's stdin, stdout and stderr (0, 1, 2)")
    if len(set(targets)) != len(targets) or not all(0 <= t <= MAX_TARGET_FD for t in targets):
        raise ZygoteWireError(f"fds must be distinct numbers between 0 and {MAX_TARGET_FD}")
    return list(targets)


@dataclass(frozen=True)
class SpawnRequest:
    """A checked spawn request: the child's fd numbers (for the first ``len(targets)`` fds that came), how many fds
    after those are ``cgroup.procs`` files, whether the child gets a new PID namespace."""

    targets: list[int]
    cgroup_fds: int
    new_pidns: bool


def check_spawn(message: dict[str, Any], received: int) -> SpawnRequest:
    """Check a spawn request that came with ``received`` fds. Pure. Raises :class:`ZygoteWireError`."""
    cgroup = message.get("cgroup", 0)
    if not isinstance(cgroup, int) or isinstance(cgroup, bool) or not 0 <= cgroup <= min(MAX_CGROUP_FDS, received):
        raise ZygoteWireError(f"cgroup must be a number of fds between 0 and {MAX_CGROUP_FDS}, at most as many as came")
    pidns = message.get("pidns", False)
    if not isinstance(pidns, bool):
        raise ZygoteWireError("pidns must be true or false")
    targets = message.get("fds")
    if isinstance(targets, list) and cgroup and len(targets) + cgroup != received:
        raise ZygoteWireError(f"fds names {len(targets)} descriptors and cgroup {cgroup} more, but {received} came")
    return SpawnRequest(check_fd_targets(targets, received - cgroup), cgroup, pidns)


def check_modules(modules: object) -> list[str]:
    """The module names of a preload request, checked (dotted identifiers). Raises :class:`ZygoteWireError`."""
    if not isinstance(modules, list) or not all(isinstance(m, str) and _MODULE_RE.match(m) for m in modules):
        raise ZygoteWireError("modules must be a list of dotted module names")
    return list(modules)
