"""Finding a worker's processes from outside, whichever spawn mode made it."""

from __future__ import annotations

from pathlib import Path

__all__ = ["nspid", "pid_one"]


def nspid(pid: int) -> list[int]:
    """``pid`` as each PID namespace it is in numbers it, the host's first (``NSpid`` of its status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("NSpid:"):
            return [int(n) for n in line.split()[1:]]
    raise AssertionError(f"no NSpid line for {pid}")


def pid_one(pid: int) -> int:
    """The worker process proper, PID 1 of its PID namespace, for the process ``pid`` the supervisor holds: ``pid``
    itself when it is that PID 1 (a fork of the zygote), else the launcher's only child (its outer process stays
    outside the namespace)."""
    if nspid(pid)[1:] == [1]:
        return pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])
