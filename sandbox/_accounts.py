"""A name for the worker's uid: private ``/etc/passwd`` and ``/etc/group`` when the host has no entry for it.

With a uid per worker (the policy's ``worker_uids``), a worker runs as a uid the host's ``/etc/passwd`` does not
know. Programs then stumble: ``id -un`` and ``whoami`` fail, Node's ``os.userInfo()`` throws, git cannot find an
identity. :func:`plan_account_files` (pure) adds one line for the worker's uid (and, when the host lacks it, one for
its gid) to copies of the host's files; :func:`apply_account_files` shows those copies, read-only, at ``/etc/passwd``
and ``/etc/group`` of the worker's own mount namespace (``sandbox._private_files``). The host's files are untouched.

The launcher calls it as root after the worker's mount namespace exists and before Landlock, so the policy's rules
on ``/etc/passwd`` and ``/etc/group`` cover the copies. A uid or gid the host already names is left as the host names
it (nothing is mounted for it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandbox._private_files import show_private_file

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["AccountFiles", "apply_account_files", "plan_account_files", "plan_view_accounts", "shared_group_name"]

PASSWD = "/etc/passwd"
GROUP = "/etc/group"
#: The group name used when the host has none for the worker's gid.
GROUP_NAME = "agents-supervise"


@dataclass(frozen=True)
class AccountFiles:
    """The new contents of ``/etc/passwd`` and ``/etc/group`` (``None``: keep the host's)."""

    passwd: str | None
    group: str | None


def _ids(text: str, field: int) -> set[int]:
    out = set()
    for line in text.splitlines():
        parts = line.split(":")
        if len(parts) > field and parts[field].isdigit():
            out.add(int(parts[field]))
    return out


def _names(text: str) -> set[str]:
    return {line.split(":", 1)[0] for line in text.splitlines() if line and not line.startswith("#")}


def plan_account_files(
    passwd: str, group: str, *, uid: int, gid: int, name: str, home: str, groups: Sequence[int] = ()
) -> AccountFiles:
    """What to show for ``uid``/``gid`` given the host's ``passwd`` and ``group`` texts. Pure.

    ``name`` is the account name wanted for ``uid``; when the host already uses it for another uid, a number is
    appended. Fields are cleaned of ``:`` and newlines. ``groups`` (supplementary groups) the host does not name
    get a line each (:func:`shared_group_name`).
    """

    def clean(value: str) -> str:
        return "".join(c for c in value if c not in ":\n\r") or "worker"

    new_passwd = None
    if uid not in _ids(passwd, 2):
        taken = _names(passwd)
        base = clean(name)[:32]
        account, n = base, 1
        while account in taken:
            n += 1
            account = f"{base}{n}"
        body = passwd if passwd.endswith("\n") or not passwd else passwd + "\n"
        new_passwd = f"{body}{account}:x:{uid}:{gid}:agents-supervise worker:{clean(home)}:/usr/sbin/nologin\n"
    known = _ids(group, 2)
    lines = ""
    if gid not in known:
        label = GROUP_NAME if GROUP_NAME not in _names(group) else f"{GROUP_NAME}-{gid}"
        lines += f"{label}:x:{gid}:\n"
    lines += "".join(f"{shared_group_name(g)}:x:{g}:\n" for g in sorted(set(groups)) if g not in known and g != gid)
    new_group = None
    if lines:
        new_group = (group if group.endswith("\n") or not group else group + "\n") + lines
    return AccountFiles(new_passwd, new_group)


def shared_group_name(gid: int, host_name: str = "") -> str:
    """The name a shared group (the policy's ``shared_groups``) has in a worker's ``/etc/group``: the host's name for
    ``gid`` when it has one, else ``shared-<gid>``."""
    cleaned = "".join(c for c in host_name if c not in ":\n\r,")[:32]
    return cleaned or f"shared-{gid}"


def plan_view_accounts(
    *, uid: int, gid: int, name: str, home: str, group_name: str = "", groups: Sequence[tuple[int, str]] = ()
) -> AccountFiles:
    """``/etc/passwd`` and ``/etc/group`` of a worker's private view (``sandbox._view_plan``). Pure.

    They name ``root`` (the owner of the system files every worker sees) and the worker's own uid and gid, and no
    other account of the host: ``name`` (cleaned of ``:`` and newlines; ``worker`` when empty) for the uid, home
    ``home``; ``group_name`` (default: ``name``) for the gid. ``groups`` are the worker's supplementary groups
    (``(gid, name)``, named by :func:`shared_group_name`), each listed with the worker as its member, so ``id``,
    ``ls -l`` and ``getent group`` name them.
    """

    def clean(value: str) -> str:
        return "".join(c for c in value if c not in ":\n\r")[:32] or "worker"

    account = clean(name) if uid != 0 else "root"
    passwd = "root:x:0:0:root:/root:/usr/sbin/nologin\n"
    if uid != 0:
        passwd += f"{account}:x:{uid}:{gid}:agents-supervise worker:{clean(home)}:/usr/sbin/nologin\n"
    own = clean(group_name or account)
    group = "root:x:0:\n" + (f"{own}:x:{gid}:\n" if gid != 0 else "")
    taken = {"root", own}
    for extra, label in sorted(dict(groups).items()):
        if extra in (0, gid):
            continue
        label = shared_group_name(extra, label)
        if label in taken:
            label = f"shared-{extra}"
        taken.add(label)
        group += f"{label}:x:{extra}:{account if uid != 0 else ''}\n"
    return AccountFiles(passwd, group)


def apply_account_files(files: AccountFiles, *, workdir: str) -> None:
    """Show ``files`` at ``/etc/passwd`` and ``/etc/group`` in this process's mount namespace, which must be
    private already (the launcher's private ``/proc`` made it so). Raises
    :class:`~sandbox._errors.ConfinementError`."""
    if files.passwd is not None:
        show_private_file(files.passwd, PASSWD, workdir=workdir, step="accounts")
    if files.group is not None:
        show_private_file(files.group, GROUP, workdir=workdir, step="accounts")
