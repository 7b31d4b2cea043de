"""Inodes of the worker's own in its private view: what the plan marks ``private`` (system paths, devices) is shown
through a read-only overlay of the host's folder (one per folder, all sharing one empty top layer: overlayfs needs
two layers), so a lock the worker takes on them is seen by no other worker and not on the host. A file or device is
cloned alone out of the overlay of its folder and checked to be what the host's is. Used by :mod:`sandbox._view`.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import TYPE_CHECKING

from sandbox._errors import ConfinementError
from sandbox._mount_api import (
    ATTR_NODEV,
    ATTR_NOEXEC,
    ATTR_NOSUID,
    ATTR_RDONLY,
    RESOLVE_NO_SYMLINKS,
    clone_tree,
    fail,
    openat2,
    overlay,
    set_attrs,
    tmpfs,
)

if TYPE_CHECKING:
    from sandbox._view_plan import ViewPlan

__all__ = ["OwnInodes", "own_null", "prepare_private"]

_STEP = "view"


class OwnInodes:
    """The read-only overlays that give this worker inodes of its own, one per host folder, made on first use."""

    def __init__(self) -> None:
        # The fsmount fd itself: it keeps the detached mount in its anonymous namespace, which overlayfs requires
        # of a detached layer (an fd of its root alone would not).
        self.empty = tmpfs(4096, 0o555, ATTR_RDONLY | ATTR_NOSUID | ATTR_NODEV | ATTR_NOEXEC, "the overlays' top layer")
        self.overlays: dict[tuple[str, bool], int] = {}

    def close(self) -> None:
        for fd in (self.empty, *self.overlays.values()):
            os.close(fd)

    def folder(self, path: str, source: int, *, devices: bool) -> int:
        """The overlay of the host folder ``path`` (opened as ``source``), detached; ``devices`` lets device nodes
        in it work (``noexec`` instead of ``nodev``)."""
        key = (path, devices)
        if key not in self.overlays:
            attrs = ATTR_NOSUID | (ATTR_NOEXEC if devices else ATTR_NODEV)
            try:
                self.overlays[key] = overlay(source, self.empty, attrs, path)
            except ConfinementError as exc:
                raise ConfinementError(
                    f"{exc}; a private view shows system paths through read-only overlays of the worker's own "
                    "(so locks on them are not shared), which needs overlayfs with layers given as O_PATH fds "
                    "(Linux 6.15) and no locked mount beneath the folder (a user namespace locks the host's). Use "
                    "a newer kernel, run as root, or private_view: false",
                    step=_STEP,
                    errno=exc.errno,
                ) from exc
        return self.overlays[key]

    def entry(self, path: str, source: int, *, device: bool) -> int:
        """A detached mount of the file or device ``path`` alone, cloned out of the overlay of its folder, and
        checked to be what ``source`` (the host's, opened before) is."""
        parent_path = os.path.dirname(path)
        try:
            parent = openat2(-100, parent_path, RESOLVE_NO_SYMLINKS, os.O_PATH | os.O_DIRECTORY)
        except OSError as exc:
            raise fail(f"cannot open {parent_path}", exc.errno or errno.EINVAL) from exc
        try:
            folder = self.folder(parent_path, parent, devices=device)
        finally:
            os.close(parent)
        clone = clone_tree(folder, path, os.path.basename(path))
        have, want = os.fstat(clone), os.fstat(source)
        if (stat.S_IFMT(have.st_mode), have.st_rdev, have.st_size, have.st_mtime_ns) != (
            stat.S_IFMT(want.st_mode),
            want.st_rdev,
            want.st_size,
            want.st_mtime_ns,
        ):
            os.close(clone)
            raise ConfinementError(f"{path} changed while the view was built", step=_STEP)
        return clone


def own_null(own: OwnInodes, *, locked: bool) -> int:
    """A detached mount of the worker's own ``/dev/null`` (cloned out of its overlay of ``/dev``); ``locked`` (a
    launcher that is not root, whose user namespace cannot overlay ``/dev``: its mounts beneath are locked): a
    read-only clone of the host's device node itself."""
    try:
        host = openat2(-100, "/dev/null", RESOLVE_NO_SYMLINKS)
    except OSError as exc:
        raise fail("cannot open /dev/null", exc.errno or errno.EINVAL) from exc
    try:
        if not locked:
            return own.entry("/dev/null", host, device=True)
        clone = clone_tree(host, "/dev/null")
        set_attrs(clone, ATTR_RDONLY | ATTR_NOSUID | ATTR_NOEXEC, "/dev/null")
        return clone
    finally:
        os.close(host)


def prepare_private(plan: ViewPlan, sources: dict[str, int], own: OwnInodes) -> dict[str, int]:
    """The detached mounts of every ``private`` bind, made from ``sources`` before the view's root is mounted over
    the staging folder (the folders of file sources are opened by path here, while the host's tree is in place)."""
    prepared: dict[str, int] = {}
    try:
        for op in plan.ops:
            if op.op != "bind" or not op.private or op.source not in sources or op.source in prepared:
                continue
            source = sources[op.source]
            if op.kind == "dir":  # read-only, nosuid, nodev already
                prepared[op.source] = clone_tree(own.folder(op.source, source, devices=False), op.source)
            else:
                prepared[op.source] = own.entry(op.source, source, device=op.kind == "device")
    except BaseException:
        for fd in prepared.values():
            os.close(fd)
        raise
    return prepared
