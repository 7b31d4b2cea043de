"""Finding the scripts of a source (fingerprints and folder listing: :mod:`toolboxes._listing`).

A ``FileSystemDirectory`` offers every executable regular file directly in the folder (symlinks followed, names
starting with ``.`` skipped: editors' swap and temporary files); a ``SingleTool`` offers its one file, and a missing
or non-executable file is a load error rather than silence. Sub-folders are not searched.
"""

from __future__ import annotations

import os
import stat

from .._listing import Fingerprint, Listing, fingerprint_of, list_folder

__all__ = ["list_scripts"]


def _executable(path: str, st: os.stat_result) -> bool:
    return stat.S_ISREG(st.st_mode) and bool(st.st_mode & 0o111) and os.access(path, os.X_OK)


def _pick(path: str, st: os.stat_result) -> Fingerprint | None:
    return fingerprint_of(st) if _executable(path, st) else None


def list_scripts(path: str, single: bool) -> Listing:
    """List the scripts of a ``SingleTool`` (``single``) or ``FileSystemDirectory`` source at ``path``."""
    if not single:
        return list_folder(path, "tool", _pick)
    out = Listing()
    try:
        st = os.stat(path)
    except OSError as exc:
        out.errors.append({"source": path, "message": f"the tool file cannot be read: {exc.strerror}"})
        return out
    if not _executable(path, st):
        what = "not a regular file" if not stat.S_ISREG(st.st_mode) else "not executable (chmod +x it)"
        out.errors.append({"source": path, "message": f"the tool file is {what}"})
        return out
    out.found[path] = fingerprint_of(st)
    return out
