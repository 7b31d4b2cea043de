"""Whether the kernel's audit records can reach this supervisor, and what it can explain (``check``; no effect).

The records explain which rule refused a call (``_kernel_audit.py``). They need root (``CAP_AUDIT_READ``), the host's
initial PID namespace (audit requests are refused elsewhere) and its initial network namespace (records are
delivered only there; ``sandbox._audit_netlink.in_initial_netns``). :func:`host_explanations` says, for ``check``,
which explanations this host gives, asking the kernel only (``AUDIT_GET``), sending nothing.
"""

from __future__ import annotations

import os

from sandbox import _audit_netlink as netlink
from sandbox import landlock_abi

__all__ = ["BARRIER_TIMEOUT_S", "NOT_INITIAL_NETNS", "PID_NAMESPACE_NOTE", "host_explanations"]

#: how long a failed call waits for its barrier record before it is answered anyway (and the start for its probe)
BARRIER_TIMEOUT_S = 1.0
#: why no record can come: the supervisor is outside the one network namespace the kernel sends them to
NOT_INITIAL_NETNS = (
    "the supervisor is not in the host's initial network namespace (a container, unshare -n, ip netns exec), "
    "and the kernel delivers audit records only there"
)
#: added to a refused audit request where no kernel thread is visible: why the kernel refuses it
PID_NAMESPACE_NOTE = (
    "; no kernel thread is visible: the supervisor runs in a PID namespace of its own, as in a container, and the "
    "kernel serves audit only to the host's initial namespaces"
)


def host_explanations(mode: str, *, euid: int | None = None) -> list[str]:
    """What this host can explain, for ``check``: one line per kind of refusal. Changes nothing (``AUDIT_GET``)."""
    euid = os.geteuid() if euid is None else euid
    reason = ""
    status = netlink.AuditStatus(0, 0, 0, 0)
    netns = netlink.in_initial_netns()
    if mode == "off":
        reason = "kernel_audit: off in the policy"
    elif euid != 0:
        reason = "the supervisor is not root (reading audit records needs CAP_AUDIT_READ)"
    elif netns is False:
        reason = NOT_INITIAL_NETNS
    else:
        try:
            status = netlink.audit_status()
        except netlink.AuditUnavailable as exc:
            reason = f"no kernel audit here ({exc}{PID_NAMESPACE_NOTE if netns is None else ''})"
        else:
            if status.enabled == 0 and mode != "enable":
                reason = "the host's audit is off and the policy says kernel_audit: use (enable turns it on)"
    if reason:
        return [
            f"Landlock denials: guessed from the 'Permission denied' paths in a failed call's text and the "
            f"toolbox's rules ({reason})",
            f"seccomp refusals: not named ({reason})",
        ]
    when = " (turned on at start)" if mode == "enable" and status.enabled == 0 else ""
    landlock = (
        f"Landlock denials: from the kernel's audit records{when}: path or port, access, and the rule"
        if landlock_abi() >= 7
        else "Landlock denials: guessed from the 'Permission denied' paths in a failed call's text and the "
        "toolbox's rules (Landlock below ABI 7 writes no audit records)"
    )
    lines = [landlock, f"seccomp refusals: from the kernel's audit records{when}: the system call"]
    if netns is None:  # a PID namespace of its own (a container): whether records arrive is known only at start
        lines.append(
            "whether audit records reach this supervisor cannot be told from here (no kernel thread is visible: a "
            "PID namespace of its own, as in a container, where they reach only the host's initial network "
            "namespace); the supervisor checks at start with a barrier record and, if none comes back within "
            f"{BARRIER_TIMEOUT_S:g} s, explains from the error text and says so"
        )
    return lines
