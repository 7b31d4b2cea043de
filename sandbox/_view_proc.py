"""The private view's ``/proc``: a procfs of the worker's PID namespace (new mount API), host-wide files masked as
:mod:`sandbox._procfs` lists them (the worker's own ``/dev/null`` over files, clones of one empty read-only tmpfs over
folders). Used by :mod:`sandbox._view`."""

from __future__ import annotations

import os
import stat

from sandbox._mount_api import (
    ATTR_NODEV,
    ATTR_NOEXEC,
    ATTR_NOSUID,
    ATTR_RDONLY,
    attach,
    attach_at,
    clone_tree,
    new_fs,
    open_beneath,
    tmpfs,
)
from sandbox._procfs import MASKED_DIRS, MASKED_FILES

__all__ = ["mount_proc"]


def mount_proc(root: int, null: int) -> None:
    """The worker's procfs on ``/proc``, host-wide files masked (the worker's own ``/dev/null`` over files, clones of
    one empty read-only tmpfs over dirs)."""
    proc = new_fs("proc", (), ATTR_NOSUID | ATTR_NODEV | ATTR_NOEXEC, "/proc")
    try:
        attach(proc, root, "/proc")
    finally:
        os.close(proc)
    for name in MASKED_FILES:
        path = f"/proc/{name}"
        try:
            target = open_beneath(root, path)
        except OSError:
            continue  # this kernel has no such file
        try:
            clone = clone_tree(null, "/dev/null")
            try:
                attach_at(clone, target, path)
            finally:
                os.close(clone)
        finally:
            os.close(target)
    empty = -1  # one empty read-only tmpfs, a clone of it on each folder: nothing can be written to share
    try:
        for name in MASKED_DIRS:
            path = f"/proc/{name}"
            try:
                target = open_beneath(root, path)
            except OSError:
                continue
            try:
                if not stat.S_ISDIR(os.fstat(target).st_mode):
                    continue
                if empty < 0:
                    empty = tmpfs(4096, 0o555, ATTR_RDONLY | ATTR_NOSUID | ATTR_NODEV | ATTR_NOEXEC, "/proc masks")
                clone = clone_tree(empty, path)
                try:
                    attach_at(clone, target, path)
                finally:
                    os.close(clone)
            finally:
                os.close(target)
    finally:
        if empty >= 0:
            os.close(empty)
