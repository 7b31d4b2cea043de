"""The kernel's audit netlink socket: its status, turning it on, reading its records, and a barrier.

Why: Landlock (ABI 7) and seccomp (``SECCOMP_FILTER_FLAG_LOG``) report each denial as an audit record: which
domain refused which access on which path, which process made which refused system call. The supervisor (root)
reads them to say *which* rule stopped a call (docs/CONFINEMENT.md, "When the kernel refuses").

How it is read: the multicast group ``AUDIT_NLGRP_READLOG`` (needs ``CAP_AUDIT_READ``), a passive listener that
coexists with ``auditd`` (the records still reach it and the host's log) and never becomes the audit daemon. The
kernel's ``kauditd`` thread delivers records asynchronously; :func:`barrier_message` makes a user record
(``AUDIT_USER``) whose arrival on the group means that every record queued before it has arrived too (the queue is
first in, first out), which is how a call's result waits for the denials it caused.

What it needs: the kernel's audit *enabled* (``AUDIT_GET``'s ``enabled`` 1 or 2): Landlock and seccomp log
nothing otherwise. :func:`enable` turns it on (``AUDIT_SET``, ``CAP_AUDIT_CONTROL``); it is never turned off
again by this module (another reader may rely on it).

Where it is read: the kernel delivers records only to sockets of the *initial* network namespace. A supervisor in
another one (a container, ``unshare -n``, ``ip netns exec``) can ask the status and send barriers, yet receives
nothing. :func:`in_initial_netns` tells from ``/proc`` when it can (a kernel thread is always in the initial
namespaces); where it cannot, only a barrier that comes back says so, which the supervisor waits for once at start.
(In a PID namespace of its own, where no kernel thread is visible, the kernel refuses audit requests outright.)

Pure: :func:`parse_message`, :func:`parse_fields`, :func:`pack_request`, :func:`parse_status`,
:func:`is_kernel_thread`. Thin: the socket functions and :func:`in_initial_netns`. Errors are
:class:`~sandbox._errors.SandboxError` subclasses: :class:`AuditUnavailable`.
"""

from __future__ import annotations

import os
import socket
import struct
from dataclasses import dataclass

from sandbox._errors import SandboxError

__all__ = [
    "AUDIT_LANDLOCK_ACCESS",
    "AUDIT_LANDLOCK_DOMAIN",
    "AUDIT_SECCOMP",
    "AUDIT_SYSCALL",
    "AUDIT_USER",
    "AuditRecord",
    "AuditStatus",
    "AuditUnavailable",
    "audit_status",
    "barrier_message",
    "enable",
    "in_initial_netns",
    "is_kernel_thread",
    "open_control",
    "open_reader",
    "pack_request",
    "parse_fields",
    "parse_message",
    "parse_status",
    "send_barrier",
]

NETLINK_AUDIT = 9
AUDIT_NLGRP_READLOG = 1
AUDIT_GET, AUDIT_SET = 1000, 1001
AUDIT_USER = 1005
AUDIT_SYSCALL = 1300
AUDIT_SECCOMP = 1326
AUDIT_LANDLOCK_ACCESS = 1423
AUDIT_LANDLOCK_DOMAIN = 1424
_NLMSG_ERROR = 2
_NLM_F_REQUEST, _NLM_F_ACK = 0x1, 0x4
_AUDIT_STATUS_ENABLED = 0x1
_SO_RCVBUFFORCE = 33
_HDR = struct.Struct("=IHHII")
#: mask, enabled, failure, pid, rate_limit, backlog_limit, lost, backlog (the fields every kernel since 2.6 has)
_STATUS = struct.Struct("=IIIIIIII")
#: ``PF_KTHREAD`` in the flags of ``/proc/PID/stat``: a kernel thread
_PF_KTHREAD = 0x00200000
#: the process ``kthreadd`` has on every Linux since 2.6.27: the parent of kernel threads, itself one
_KTHREADD_PID = 2
#: the prefix of a barrier record's text, followed by a token
BARRIER_PREFIX = "agents-supervise-barrier "


class AuditUnavailable(SandboxError):
    """The audit socket cannot be used here (no ``CONFIG_AUDIT``, not in the initial namespaces, no capability)."""


@dataclass(frozen=True)
class AuditStatus:
    """``AUDIT_GET``'s answer: ``enabled`` 0 (off), 1 (on) or 2 (on and locked); ``pid`` of auditd or 0."""

    enabled: int
    pid: int
    lost: int
    backlog: int


@dataclass(frozen=True)
class AuditRecord:
    """One record: its type, the event's serial number (records of one event share it) and its fields."""

    type: int
    serial: int
    fields: dict[str, str]


def pack_request(msg_type: int, payload: bytes = b"", seq: int = 1) -> bytes:
    """A netlink request to the audit subsystem, asking for an acknowledgement (pure)."""
    return _HDR.pack(_HDR.size + len(payload), msg_type, _NLM_F_REQUEST | _NLM_F_ACK, seq, 0) + payload


def parse_status(payload: bytes) -> AuditStatus:
    """The ``struct audit_status`` of an ``AUDIT_GET`` answer (pure); raises ``ValueError`` when it is short."""
    if len(payload) < _STATUS.size:
        raise ValueError("audit status shorter than 32 bytes")
    _mask, enabled, _failure, pid, _rate, _limit, lost, backlog = _STATUS.unpack_from(payload)
    return AuditStatus(enabled, pid, lost, backlog)


def _unhex(value: str) -> str:
    try:
        return bytes.fromhex(value).decode("utf-8", "replace")
    except ValueError:
        return value


def parse_fields(text: str) -> dict[str, str]:
    """The ``key=value`` fields of a record's text (pure).

    A quoted value is taken as written; an unquoted value of the keys the kernel writes as untrusted strings
    (``path``, ``exe``, ``comm``, ...) is hex when it held special characters, and is decoded. Values a process
    chose (a path with ``" "`` in it) can therefore never add fields: quoting is the kernel's, hex has no spaces.
    """
    out: dict[str, str] = {}
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] == " ":
            i += 1
        eq = text.find("=", i)
        if eq < 0:
            break
        key = text[i:eq]
        j = eq + 1
        if j < n and text[j] in "\"'":
            end = text.find(text[j], j + 1)
            end = n if end < 0 else end
            value, i = text[j + 1 : end], end + 1
        else:
            end = text.find(" ", j)
            end = n if end < 0 else end
            value, i = text[j:end], end
            if key in _UNTRUSTED and value not in ("(null)", "(none)", "?") and _is_hex(value):
                value = _unhex(value)
        if key and " " not in key:
            out.setdefault(key, value)
    return out


_UNTRUSTED = {"path", "exe", "comm", "ocomm", "name", "cwd", "proctitle", "msg"}


def _is_hex(value: str) -> bool:
    return len(value) % 2 == 0 and len(value) > 0 and all(c in "0123456789ABCDEF" for c in value)


def parse_message(msg_type: int, payload: bytes) -> AuditRecord | None:
    """A record from the text of one multicast message: ``audit(SEC.MSEC:SERIAL): fields`` (pure); ``None`` for a
    text not of that form."""
    text = payload.split(b"\0", 1)[0].decode("utf-8", "replace")
    if not text.startswith("audit(") or "): " not in text:
        return None
    stamp, rest = text[6:].split("): ", 1)
    try:
        serial = int(stamp.rsplit(":", 1)[1])
    except (IndexError, ValueError):
        return None
    return AuditRecord(msg_type, serial, parse_fields(rest))


def barrier_message(token: str, seq: int = 1) -> bytes:
    """The ``AUDIT_USER`` request whose record marks a point in the audit queue (pure)."""
    return pack_request(AUDIT_USER, (BARRIER_PREFIX + token).encode("ascii") + b"\0", seq)


def is_kernel_thread(stat: str) -> bool:
    """Whether a ``/proc/PID/stat`` line is a kernel thread's (``PF_KTHREAD`` in its flags, the 9th field; the
    name in parentheses may hold spaces and parentheses). Pure; a malformed line is not one."""
    try:
        flags = int(stat[stat.rindex(")") + 2 :].split()[6])
    except (ValueError, IndexError):
        return False
    return bool(flags & _PF_KTHREAD)


def in_initial_netns(proc: str = "/proc") -> bool | None:
    """Whether this process is in the initial network namespace, the only one audit records reach: compared with
    the namespace of ``kthreadd`` (a kernel thread, always in the initial namespaces). ``None``: cannot tell (no
    kernel thread is visible, as in a PID namespace of its own, or its namespace cannot be read: not root)."""
    try:
        with open(f"{proc}/{_KTHREADD_PID}/stat", encoding="ascii", errors="replace") as f:
            if not is_kernel_thread(f.read()):
                return None
        initial = os.readlink(f"{proc}/{_KTHREADD_PID}/ns/net")
        own = os.readlink(f"{proc}/self/ns/net")
    except OSError:
        return None
    return own == initial


# --- the thin part: sockets


def _socket() -> socket.socket:
    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_AUDIT)
    except OSError as exc:
        raise AuditUnavailable(f"no audit netlink socket: {exc.strerror}") from exc
    return sock


def _request(msg_type: int, payload: bytes = b"") -> list[tuple[int, bytes]]:
    """Send one request on a fresh socket; return the answers up to and including the acknowledgement."""
    sock = _socket()
    try:
        sock.bind((0, 0))
        sock.settimeout(2.0)
        sock.send(pack_request(msg_type, payload))
        answers: list[tuple[int, bytes]] = []
        while True:
            data = sock.recv(65536)
            off = 0
            while off + _HDR.size <= len(data):
                length, kind, _flags, _seq, _pid = _HDR.unpack_from(data, off)
                body = data[off + _HDR.size : off + length]
                if kind == _NLMSG_ERROR:
                    err = -struct.unpack_from("=i", body)[0]
                    if err:
                        raise AuditUnavailable(f"audit request {msg_type} refused: {os.strerror(err)}")
                    if msg_type != AUDIT_GET or answers:
                        return answers
                else:
                    answers.append((kind, body))
                    if msg_type == AUDIT_GET:
                        return answers
                off += (length + 3) & ~3
    except OSError as exc:
        raise AuditUnavailable(f"audit request {msg_type} failed: {exc.strerror or exc}") from exc
    finally:
        sock.close()


def audit_status() -> AuditStatus:
    """Ask the kernel for the audit status (``AUDIT_GET``). Raises :class:`AuditUnavailable`."""
    for kind, body in _request(AUDIT_GET):
        if kind == AUDIT_GET:
            return parse_status(body)
    raise AuditUnavailable("the kernel sent no audit status")


def enable() -> None:
    """Turn the kernel's audit on (``AUDIT_SET`` enabled=1; needs ``CAP_AUDIT_CONTROL``). Raises
    :class:`AuditUnavailable`; a locked configuration (enabled 2) is left as it is."""
    _request(AUDIT_SET, _STATUS.pack(_AUDIT_STATUS_ENABLED, 1, 0, 0, 0, 0, 0, 0) + b"\0" * 8)


def open_reader() -> socket.socket:
    """A non-blocking socket subscribed to the audit records (``AUDIT_NLGRP_READLOG``; ``CAP_AUDIT_READ``).
    Raises :class:`AuditUnavailable`."""
    sock = _socket()
    try:
        try:  # room for a burst of records while the supervisor is busy (root may exceed rmem_max)
            sock.setsockopt(socket.SOL_SOCKET, _SO_RCVBUFFORCE, 4 << 20)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        sock.bind((0, 1 << (AUDIT_NLGRP_READLOG - 1)))
    except OSError as exc:
        sock.close()
        raise AuditUnavailable(f"cannot join the audit record group: {exc.strerror}") from exc
    sock.setblocking(False)
    return sock


def open_control() -> socket.socket:
    """A non-blocking socket for sending barriers (:func:`send_barrier`). Raises :class:`AuditUnavailable`."""
    sock = _socket()
    try:
        sock.bind((0, 0))
    except OSError as exc:
        sock.close()
        raise AuditUnavailable(f"cannot bind an audit socket: {exc.strerror}") from exc
    sock.setblocking(False)
    return sock


def send_barrier(sock: socket.socket, token: str) -> None:
    """Queue a barrier record (``AUDIT_USER``; ``CAP_AUDIT_WRITE``) and drop any acknowledgements waiting on
    ``sock``. Raises ``OSError`` when the kernel refuses the send."""
    try:
        while sock.recv(65536):
            pass
    except BlockingIOError:
        pass
    sock.send(barrier_message(token))
