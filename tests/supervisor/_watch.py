"""Waiting for a file to appear without polling: inotify ``IN_CREATE`` on its directory."""

from __future__ import annotations

import ctypes
import os
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

__all__ = ["CreateWatch"]

_IN_CREATE = 0x100


class CreateWatch:
    """inotify ``IN_CREATE`` on one directory: wake up when a file is created in it (no polling, no sleeps)."""

    def __init__(self, directory: Path) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        assert self.fd >= 0, os.strerror(ctypes.get_errno())
        assert self._libc.inotify_add_watch(self.fd, os.fsencode(directory), _IN_CREATE) >= 0

    async def wait_for(self, condition: Callable[[], bool]) -> None:
        """Return once ``condition()`` holds, re-testing it after each creation in the directory."""
        while not condition():
            await trio.lowlevel.wait_readable(self.fd)
            try:
                os.read(self.fd, 65536)
            except BlockingIOError:
                pass

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> CreateWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
