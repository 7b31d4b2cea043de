"""A test hook: stop a worker at a named step of a write, so a test can kill it there (kill -9 mid-write).

Off unless the worker's environment has ``AGENTS_SUPERVISE_TEST_PAUSE=<step>:<marker path>`` (a policy sets it
through ``toolboxes.<name>.env``; nothing else reads that variable). At ``step`` the worker creates the marker
file (the test waits for it) and then blocks that thread for good: the test kills the worker from outside while
it is there. It pauses once: when the marker exists already, the step runs on. Steps: ``atomic-write`` (the
temporary file is written, not yet renamed) and ``in-place-write``
(the journal is durable and half of the target has been rewritten).
"""

from __future__ import annotations

import os
import threading

__all__ = ["PAUSE_ENV", "pause_point"]

PAUSE_ENV = "AGENTS_SUPERVISE_TEST_PAUSE"


def pause_point(step: str) -> None:
    """Block forever here when the test hook names ``step`` (after creating its marker file); else return."""
    spec = os.environ.get(PAUSE_ENV)
    if not spec:
        return
    wanted, _, marker = spec.partition(":")
    if wanted != step or not marker:
        return
    try:
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except FileExistsError:
        return  # paused there once already (the worker was restarted since): run on
    os.close(fd)
    threading.Event().wait()
