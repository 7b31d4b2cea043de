"""Run a program under one more Landlock layer that makes it read-only and network-less.

Used for ``CommandFilter`` scripts: they judge a command, so they need to read but never to write or connect.
Landlock layers stack, so a process that is already confined (a worker) can start this as a child:
``python -I -c "<path setup>; from sandbox._readonly_exec import main; main()" PROGRAM ARGS...``. The new layer
handles every filesystem right and grants only read/execute on ``/`` (what the parent layers allow to read stays
readable; nothing can be written, created or removed anywhere, not even ``/dev/null``), handles TCP connect and bind
with no port allowed, and scopes signals and abstract sockets. It fails closed: without Landlock it exits 78 and
runs nothing.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

from ._errors import ConfinementError
from ._landlock import apply_ruleset, landlock_abi, plan_ruleset
from ._plan import READ, FsRule

__all__ = ["main"]

EXIT_REFUSED = 78


def main(argv: list[str] | None = None) -> NoReturn:
    """Apply the read-only layer and ``execv`` ``argv[0]`` (default: ``sys.argv[1:]``); never returns."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        os.write(2, b"readonly-exec: no program given\n")
        os._exit(EXIT_REFUSED)
    try:
        abi = landlock_abi()
        if abi < 1:
            raise ConfinementError("Landlock is not available; refusing to run the program unconfined")
        apply_ruleset(plan_ruleset([FsRule("/", READ)], abi, tcp_connect_ports=()))
    except ConfinementError as exc:
        os.write(2, f"readonly-exec: {exc}\n".encode())
        os._exit(EXIT_REFUSED)
    try:
        os.execv(args[0], args)
    except OSError as exc:
        os.write(2, f"readonly-exec: cannot run {args[0]}: {exc.strerror}\n".encode())
        os._exit(126)
