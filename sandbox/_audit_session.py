"""Give a worker an audit session of its own, so that the kernel's audit records name it.

Why: a seccomp refusal's audit record (``AUDIT_SECCOMP``) names the process by its pid, which may be gone (a
short-lived command) by the time the supervisor reads the record; it also carries the process's audit *session*
(``ses=``), which the kernel assigns when a process sets its login uid (``/proc/self/loginuid``) and every child
inherits. Set once by the launcher (root, ``CAP_AUDIT_CONTROL``) before anything of the worker runs, it tags
every process of the worker; the supervisor reads the number from ``/proc/<launcher pid>/sessionid`` (a kernel
file of a process it started) and matches records to the worker with it.

The login uid set is the worker's uid (records then read ``auid=<worker uid>``). Nothing else changes for the
worker. Failing to set it is not a confinement failure (the worker is as confined): the supervisor then cannot
match the records and says so in the call's explanation instead.
"""

from __future__ import annotations

import os

__all__ = ["UNSET_SESSION", "read_session", "set_audit_session"]

#: the session id of a process that never set its login uid
UNSET_SESSION = 4294967295


def set_audit_session(login_uid: int) -> bool:
    """Set this process's login uid, which starts a new audit session; ``True`` when the kernel accepted it."""
    try:
        fd = os.open("/proc/self/loginuid", os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        os.write(fd, str(login_uid).encode("ascii"))
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def read_session(pid: int) -> int | None:
    """The audit session of process ``pid`` (``/proc/PID/sessionid``), ``None`` when unset or unreadable."""
    try:
        fd = os.open(f"/proc/{int(pid)}/sessionid", os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        text = os.read(fd, 64).decode("ascii", "replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)
    return int(text) if text.isdigit() and int(text) != UNSET_SESSION else None
