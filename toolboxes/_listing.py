"""Listing the files of a tool folder, and fingerprints that tell a watcher what changed (bash, skills, WASM).

A *fingerprint* is ``(device, inode, mtime_ns, size, mode)`` of a file (a kind may append its companion files'):
it changes when the file is rewritten, replaced or chmod-ed. :func:`list_folder` offers the entries directly in a
folder (symlinks followed, names starting with ``.`` skipped: editors' swap and temporary files; sub-folders not
searched) that a kind's ``pick`` accepts; an entry that vanishes while listing (or a dangling symlink) is skipped.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["Fingerprint", "Listing", "fingerprint_of", "list_folder"]

#: ``(device, inode, mtime_ns, size, mode)``, possibly followed by the same of companion files.
Fingerprint = tuple[int, ...]


@dataclass
class Listing:
    """The files found (path -> fingerprint, sorted by path) and problems with the source itself."""

    found: dict[str, Fingerprint] = field(default_factory=dict)
    errors: list[dict[str, str]] = field(default_factory=list)


def fingerprint_of(st: os.stat_result) -> Fingerprint:
    """The fingerprint of a file from its ``stat``."""
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size, st.st_mode)


def list_folder(path: str, what: str, pick: Callable[[str, os.stat_result], Fingerprint | None]) -> Listing:
    """The entries of the folder ``path`` that ``pick(full_path, stat)`` gives a fingerprint. A folder that cannot
    be listed is the one error: ``the <what> folder cannot be listed: <why>``."""
    out = Listing()
    try:
        names = sorted(os.listdir(path))
    except OSError as exc:
        out.errors.append({"source": path, "message": f"the {what} folder cannot be listed: {exc.strerror}"})
        return out
    for name in names:
        if name.startswith("."):
            continue
        full = os.path.join(path, name)
        try:
            st = os.stat(full)
        except OSError:
            continue  # removed while listing, or a dangling symlink
        fp = pick(full, st)
        if fp is not None:
            out.found[full] = fp
    return out
