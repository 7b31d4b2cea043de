"""How a process ended, in words for a message: ``exited with status N`` or ``was killed by SIGNAME``."""

from __future__ import annotations

import signal

__all__ = ["describe_exit"]


def describe_exit(code: int | None) -> str:
    """``code`` as ``subprocess`` gives it (negative: the signal that killed the process; ``None``: none known) in
    words that follow the process's name: ``exited with status 1``, ``was killed by SIGKILL``, ``is gone``."""
    if code is None:
        return "is gone"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with status {code}"
