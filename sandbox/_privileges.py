"""Privileges: parent-death signal, ``no_new_privs``, dropping uid/gid/groups and every capability.

What it enforces: after :func:`drop_privileges` and :func:`verify_status`, the process runs as the plan's uid
and gid with no supplementary groups, has no capability in any set (effective, permitted, inheritable,
ambient, bounding), and ``no_new_privs`` is set, so no exec (setuid binary, file capabilities) can give any
back. ``PR_SET_PDEATHSIG`` makes the kernel send ``SIGKILL`` when the parent *thread* exits; the setting is
cleared by a change of credentials, so it is set again after the uid drop.

What it does NOT cover: what the uid may still do by ordinary permissions (files owned by or writable for uid
65534, which Landlock must deny, chmod/chown of files it owns); processes of the same uid outside the worker
(Landlock scoping, ABI 6, refuses signals to them); seccomp (no system-call filter is installed). A
non-root launcher in a user namespace cannot call ``setgroups`` (denied for the map to be writable): it keeps
its supplementary groups, as any process of that user would.
"""

from __future__ import annotations

import ctypes
import os
import signal
from dataclasses import dataclass

import prctl  # python-prctl

from sandbox._errors import ConfinementError
from sandbox._libc import LIBC

__all__ = [
    "StatusCheck",
    "check_status",
    "drop_privileges",
    "set_no_new_privs",
    "set_parent_death_signal",
    "verify_status",
]

_PR_CAPBSET_DROP = 24
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _CapData(ctypes.Structure):
    _fields_ = (("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32))


def _fail(step: str, what: str, err: int | None) -> ConfinementError:
    detail = f": {os.strerror(err)} (errno {err})" if err else ""
    return ConfinementError(f"{what}{detail}", step=step, errno=err)


def set_parent_death_signal(sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send ``sig`` when the parent thread exits, and read the setting back.

    The caller must then check that the parent did not die just before (``getppid()`` changed, or an inherited
    pipe from the parent reads EOF): a signal is only sent for a death that happens after this call.
    """
    try:
        prctl.set_pdeathsig(sig)
        ok = prctl.get_pdeathsig() == sig
    except OSError as exc:
        raise _fail("pdeathsig", "PR_SET_PDEATHSIG failed", exc.errno) from exc
    if not ok:
        raise ConfinementError("PR_SET_PDEATHSIG did not take effect", step="pdeathsig")


def set_no_new_privs() -> None:
    """Set ``no_new_privs`` (irreversible; needed by Landlock without ``CAP_SYS_ADMIN``) and read it back."""
    try:
        prctl.set_no_new_privs(1)
        ok = bool(prctl.get_no_new_privs())
    except OSError as exc:
        raise _fail("no_new_privs", "PR_SET_NO_NEW_PRIVS failed", exc.errno) from exc
    if not ok:
        raise ConfinementError("no_new_privs did not take effect", step="no_new_privs")


def drop_privileges(uid: int | None, gid: int | None, groups: tuple[int, ...] = ()) -> None:
    """Drop the bounding set, ambient caps, groups, then gid and uid, then every remaining capability.

    Order: the bounding set needs ``CAP_SETPCAP`` and ``setgroups``/``setres[ug]id`` need ``CAP_SETGID`` and
    ``CAP_SETUID``, so all come before the capabilities go; gid before uid (after the uid drop the gid cannot
    change); ``capset`` last clears the inheritable set, which a uid change leaves alone.

    Args:
        uid / gid: the identity to take, or ``None`` to keep the current one (a non-root launcher, which may
            be in a user namespace where ``setgroups`` is denied: its groups are then left as they are).
        groups: the supplementary groups to keep with ``uid`` (none by default).

    Raises:
        ConfinementError: any step failed.
    """
    libc = LIBC
    for cap in range(64):
        ctypes.set_errno(0)
        if libc.prctl(_PR_CAPBSET_DROP, ctypes.c_ulong(cap), 0, 0, 0) != 0:
            err = ctypes.get_errno()
            if err == 22 and cap > 0:  # EINVAL: past the last capability this kernel knows
                break
            raise _fail("capabilities", f"PR_CAPBSET_DROP {cap} failed", err)
    ctypes.set_errno(0)
    if libc.prctl(_PR_CAP_AMBIENT, ctypes.c_ulong(_PR_CAP_AMBIENT_CLEAR_ALL), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        if err != 22:  # EINVAL: a kernel without ambient capabilities has none to clear
            raise _fail("capabilities", "PR_CAP_AMBIENT_CLEAR_ALL failed", err)
    try:
        if uid is not None or gid is not None:
            if gid is None or uid is None:
                raise ConfinementError("uid and gid must be given together", step="identity")
            os.setgroups(list(groups))
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
    except OSError as exc:
        hint = ""
        if exc.errno == 22:  # EINVAL: the id does not exist in this user namespace
            hint = (
                " (this user namespace does not map that id, as in a container that maps only some uids: set the"
                " policy's worker_uids to a range it maps, or to null for one sandbox_uid)"
            )
        raise _fail("identity", f"cannot switch to uid {uid} gid {gid}{hint}", exc.errno) from exc
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    ctypes.set_errno(0)
    if libc.capset(ctypes.byref(header), data) != 0:
        raise _fail("capabilities", "capset(0) failed", ctypes.get_errno())


@dataclass(frozen=True)
class StatusCheck:
    """What :func:`check_status` found: ``problems`` is empty when everything is as expected."""

    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return not self.problems


def check_status(status_text: str, uid: int | None, gid: int | None, groups: tuple[int, ...] = ()) -> StatusCheck:
    """Check the text of ``/proc/self/status`` after the drop. Pure.

    Expects ``NoNewPrivs: 1``, every ``Cap*`` line 0, and when ``uid``/``gid`` are given, all four ids of the
    ``Uid:``/``Gid:`` lines equal to them and exactly ``groups`` as supplementary ``Groups:``.
    """
    fields: dict[str, str] = {}
    for line in status_text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    problems: list[str] = []
    if fields.get("NoNewPrivs") != "1":
        problems.append(f"NoNewPrivs is {fields.get('NoNewPrivs')!r}, expected '1'")
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        cap_value = fields.get(cap)
        if cap_value is None:
            if cap != "CapAmb":  # kernels before 4.3 have no ambient set
                problems.append(f"{cap} missing from /proc/self/status")
        elif int(cap_value, 16) != 0:
            problems.append(f"{cap} is {cap_value}, expected 0")
    for name, want in (("Uid", uid), ("Gid", gid)):
        if want is None:
            continue
        ids = fields.get(name, "").split()
        if ids != [str(want)] * 4:
            problems.append(f"{name} is {ids}, expected {want} for real, effective, saved and filesystem ids")
    if uid is not None and sorted(int(g) for g in fields.get("Groups", "").split()) != sorted(set(groups)):
        wanted = " ".join(str(g) for g in sorted(set(groups))) or "none"
        problems.append(f"supplementary groups remain: {fields.get('Groups', '')} (expected {wanted})")
    return StatusCheck(tuple(problems))


def verify_status(uid: int | None, gid: int | None, groups: tuple[int, ...] = ()) -> None:
    """Read ``/proc/self/status`` and raise :class:`ConfinementError` unless :func:`check_status` passes."""
    try:
        with open("/proc/self/status") as f:
            text = f.read()
    except OSError as exc:
        raise _fail("verify", "cannot read /proc/self/status", exc.errno) from exc
    check = check_status(text, uid, gid, groups)
    if not check.ok:
        raise ConfinementError("privileges not dropped: " + "; ".join(check.problems), step="verify")
