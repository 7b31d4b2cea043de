"""What one policy compile asks of the host, asked once: ``lstat`` of a path, whether a path exists, the mount points,
whether a uid can read a path.

Planning a toolbox's worker (``_compile.plan_worker``) asks the host about every path of its rules: whether each
exists (a missing one is left out with a warning) and, for the private view's report, what ``lstat`` says of every
component on the way to it (``sandbox._view.probe_host``) and which paths are mount points
(``sandbox._view.host_mount_points``). Most of these paths are the same for every toolbox (the system paths, the
interpreter's, the staged code), so one :class:`HostView` per compile answers each question once and the same
answer is given to every toolbox. Planning touches no file (the work folders are made after every toolbox is
planned), so the answers hold for the whole compile; the launcher plans the view again from the host as it is at
each start, so nothing is enforced from them.

Only metadata is read (``lstat``, ``stat``, ``/proc/self/mountinfo``): nothing is opened, followed into or changed.
A test may give planning a subclass with answers of its own (``_host_facts.HostFacts.paths``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sandbox import PathInfo

__all__ = ["HostView"]


class HostView:
    """The host's answers for one compile, each found at the first question (not thread-safe: one compile)."""

    def __init__(self) -> None:
        self._probes: dict[str, PathInfo] = {}
        self._exists: dict[str, bool] = {}
        self._mounts: frozenset[str] | None = None
        self._readable: dict[tuple[str, int, int], bool] = {}

    def probe(self, path: str) -> PathInfo:
        """``sandbox._view.probe_host(path)``: what ``lstat`` says of ``path`` (a link is not followed)."""
        found = self._probes.get(path)
        if found is None:
            from sandbox import probe_host  # (as the private view's planning: loaded when a view is planned)

            found = self._probes[path] = probe_host(path)
        return found

    def exists(self, path: str) -> bool:
        """``os.path.exists(path)``: whether ``path`` resolves (through its links) to something."""
        found = self._exists.get(path)
        if found is None:
            found = self._exists[path] = os.path.exists(path)
        return found

    def mount_points(self) -> frozenset[str]:
        """``sandbox._view.host_mount_points()``: every mount point of this mount namespace."""
        if self._mounts is None:
            from sandbox import host_mount_points

            self._mounts = host_mount_points()
        return self._mounts

    def readable_by(self, path: str, uid: int, gid: int) -> bool:
        """``sandbox._syspaths.uid_can_read(path, uid, gid)``: whether that uid (with that group alone) can read
        ``path``, every folder on the way searched."""
        key = (path, uid, gid)
        found = self._readable.get(key)
        if found is None:
            from sandbox import uid_can_read

            found = self._readable[key] = uid_can_read(path, uid, gid)
        return found
