"""Finding the scripts of a source, and a fingerprint of each so a watcher can tell what changed.

A ``FileSystemDirectory`` offers every executable regular file directly in the folder (symlinks followed, names
starting with ``.`` skipped: editors' swap and temporary files); a ``SingleTool`` offers its one file, and a missing
or non-executable file is a load error rather than silence. Sub-folders are not searched.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

__all__ = ["Fingerprint", "Listing", "list_scripts"]

#: ``(device, inode, mtime_ns, size, mode)``: changes when a file is rewritten, replaced or chmod-ed.
Fingerprint = tuple[int, int, int, int, int]


@dataclass
class Listing:
    """The scripts found (path -> fingerprint, sorted by path) and problems with the source itself."""

    scripts: dict[str, Fingerprint] = field(default_factory=dict)
    errors: list[dict[str, str]] = field(default_factory=list)


def _fingerprint(st: os.stat_result) -> Fingerprint:
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size, st.st_mode)


def _executable(path: str, st: os.stat_result) -> bool:
    return stat.S_ISREG(st.st_mode) and bool(st.st_mode & 0o111) and os.access(path, os.X_OK)


def list_scripts(path: str, single: bool) -> Listing:
    """List the scripts of a ``SingleTool`` (``single``) or ``FileSystemDirectory`` source at ``path``."""
    out = Listing()
    if single:
        try:
            st = os.stat(path)
        except OSError as exc:
            out.errors.append({"source": path, "message": f"the tool file cannot be read: {exc.strerror}"})
            return out
        if not _executable(path, st):
            what = "not a regular file" if not stat.S_ISREG(st.st_mode) else "not executable (chmod +x it)"
            out.errors.append({"source": path, "message": f"the tool file is {what}"})
            return out
        out.scripts[path] = _fingerprint(st)
        return out
    try:
        names = sorted(os.listdir(path))
    except OSError as exc:
        out.errors.append({"source": path, "message": f"the tool folder cannot be listed: {exc.strerror}"})
        return out
    for name in names:
        if name.startswith("."):
            continue
        full = os.path.join(path, name)
        try:
            st = os.stat(full)
        except OSError:
            continue  # removed while listing, or a dangling symlink
        if _executable(full, st):
            out.scripts[full] = _fingerprint(st)
    return out
