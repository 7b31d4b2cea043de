"""systemd's readiness protocol (``sd_notify``): one datagram to ``$NOTIFY_SOCKET`` per state change.

The unit runs ``Type=notify``: systemd counts the service started when it gets ``READY=1``, which ``serve`` sends
once every toolbox's worker started and the frontend serves (``systemctl start`` returns then, and units ordered
after it start then). ``RELOADING=1`` (with ``MONOTONIC_USEC``) and the next ``READY=1`` frame a SIGHUP reload,
``STOPPING=1`` starts a shutdown; ``STATUS=`` says in words what the service is doing (``systemctl status``).

The protocol is a few lines (a datagram on an AF_UNIX socket: a path, or ``@name`` for an abstract one), so no
library is used for it. Without ``$NOTIFY_SOCKET`` (not under systemd) nothing is sent. A notification that cannot
be sent is not an error of the service: it is reported to the caller, which says so on stderr.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["notify", "notify_address", "notify_or_warn", "reloading_message"]


def notify_address(environ: Mapping[str, str]) -> str | bytes | None:
    """The socket address ``$NOTIFY_SOCKET`` names (``@name``: abstract); ``None`` when unset or not a Unix socket
    (systemd's ``vsock:`` form is not used for services on the host)."""
    path = environ.get("NOTIFY_SOCKET", "")
    if path.startswith("@"):
        return b"\0" + path[1:].encode()
    if path.startswith("/"):
        return path
    return None


def notify(message: str, environ: Mapping[str, str] | None = None) -> bool:
    """Send ``message`` (``KEY=value`` lines) to systemd; ``False`` when there is no notify socket.

    Raises:
        OSError: the socket named by ``$NOTIFY_SOCKET`` cannot be reached.
    """
    address = notify_address(os.environ if environ is None else environ)
    if address is None:
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
        sock.connect(address)
        sock.sendall(message.encode())
    return True


def reloading_message() -> str:
    """``RELOADING=1`` with the monotonic time systemd wants beside it (microseconds of CLOCK_MONOTONIC)."""
    now_us = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    return f"RELOADING=1\nMONOTONIC_USEC={now_us}\nSTATUS=reloading the policy"


def notify_or_warn(message: str) -> None:
    """:func:`notify`, a failure said on stderr (the service goes on: systemd then times the start out)."""
    try:
        notify(message)
    except OSError as exc:
        print(f"agents-supervise: warning: cannot notify systemd ($NOTIFY_SOCKET): {exc}", file=sys.stderr)
