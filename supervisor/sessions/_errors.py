"""Errors of the session store.

::

    SupervisorError                (supervisor/_errors.py)
    └── SessionStoreUnavailable    the store cannot be opened at start; nothing was started

A write that fails once the store is open is never raised: it is counted (``SessionStore.write_errors``), and the
call it records goes on.
"""

from __future__ import annotations

from supervisor._errors import SupervisorError

__all__ = ["SessionStoreUnavailable"]


class SessionStoreUnavailable(SupervisorError):
    """The session store (``<state_dir>/sessions.sqlite3``) cannot be opened: the file is not a database, is
    damaged, or its folder cannot be made or read. Raised when the store opens (the supervisor's start), before any
    worker runs; the message names the file, the cause and what to do. The cause is in ``__cause__``."""

    def __init__(self, path: str, cause: BaseException) -> None:
        reason = cause.strerror if isinstance(cause, OSError) and cause.strerror else str(cause)
        super().__init__(
            f"the session store {path} cannot be opened ({type(cause).__name__}: {reason}); fix its permissions, "
            "or move it aside to start with an empty store (the sessions, their calls and enabled skills are kept "
            "nowhere else)"
        )
        self.path = path
