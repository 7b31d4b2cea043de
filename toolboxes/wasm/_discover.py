"""Finding the components of a ``Path`` and a fingerprint of each (with its sidecar) so a watcher sees changes
(folder listing and fingerprints: :mod:`toolboxes._listing`).

``Path`` is one component file (any name; conventionally ``<tool>.wasm``) or a folder: then every regular file
directly in it whose name ends in ``.wasm`` (symlinks followed, names starting with ``.`` skipped, sub-folders not
searched). The tool's own part of its name is the file name without ``.wasm``. Each component needs its sidecar
``<stem>.json`` beside it (:mod:`._sidecar`); a missing one is a load error naming the file it looked for.
"""

from __future__ import annotations

import os
import stat

from .._listing import Fingerprint, Listing, fingerprint_of, list_folder

__all__ = ["list_components", "sidecar_path", "stem_of"]

_NONE = (0, 0, 0, 0, 0)


def stem_of(path: str) -> str:
    """The component's name: its file name without ``.wasm``."""
    name = os.path.basename(path)
    return name[: -len(".wasm")] if name.endswith(".wasm") else name


def sidecar_path(path: str) -> str:
    """Where the sidecar of the component at ``path`` is: ``<stem>.json`` in the same folder."""
    return os.path.join(os.path.dirname(path), stem_of(path) + ".json")


def _regular(path: str) -> Fingerprint | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return fingerprint_of(st) if stat.S_ISREG(st.st_mode) else None


def _fingerprint(path: str, st: os.stat_result) -> Fingerprint | None:
    """The component's fingerprint, then its sidecar's (zeros when it has none); ``None`` for a non-file."""
    if not stat.S_ISREG(st.st_mode):
        return None
    return fingerprint_of(st) + (_regular(sidecar_path(path)) or _NONE)


def _pick(path: str, st: os.stat_result) -> Fingerprint | None:
    return _fingerprint(path, st) if path.endswith(".wasm") else None


def list_components(path: str) -> Listing:
    """List the components of ``path`` (a file or a folder)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        return Listing(errors=[{"source": path, "message": f"the component path cannot be read: {exc.strerror}"}])
    if stat.S_ISDIR(st.st_mode):
        return list_folder(path, "component", _pick)
    fp = _fingerprint(path, st)
    if fp is None:
        return Listing(errors=[{"source": path, "message": "the component path is neither a folder nor a file"}])
    return Listing(found={path: fp})
