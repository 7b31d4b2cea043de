"""Finding the components of a ``Path`` and a fingerprint of each (with its sidecar) so a watcher sees changes.

``Path`` is one component file (any name; conventionally ``<tool>.wasm``) or a folder: then every regular file
directly in it whose name ends in ``.wasm`` (symlinks followed, names starting with ``.`` skipped, sub-folders not
searched). The tool's own part of its name is the file name without ``.wasm``. Each component needs its sidecar
``<stem>.json`` beside it (:mod:`._sidecar`); a missing one is a load error naming the file it looked for.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

__all__ = ["Fingerprint", "Listing", "list_components", "sidecar_path", "stem_of"]

#: ``(device, inode, mtime_ns, size, mode)`` of the component, then of its sidecar (zeros when it has none).
Fingerprint = tuple[int, ...]
_NONE = (0, 0, 0, 0, 0)


@dataclass
class Listing:
    """The components found (path -> fingerprint, sorted by path) and problems with the source itself."""

    components: dict[str, Fingerprint] = field(default_factory=dict)
    errors: list[dict[str, str]] = field(default_factory=list)


def stem_of(path: str) -> str:
    """The component's name: its file name without ``.wasm``."""
    name = os.path.basename(path)
    return name[: -len(".wasm")] if name.endswith(".wasm") else name


def sidecar_path(path: str) -> str:
    """Where the sidecar of the component at ``path`` is: ``<stem>.json`` in the same folder."""
    return os.path.join(os.path.dirname(path), stem_of(path) + ".json")


def _stat(path: str) -> tuple[int, ...] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size, st.st_mode) if stat.S_ISREG(st.st_mode) else None


def _fingerprint(path: str) -> Fingerprint | None:
    own = _stat(path)
    if own is None:
        return None
    return own + (_stat(sidecar_path(path)) or _NONE)


def list_components(path: str) -> Listing:
    """List the components of ``path`` (a file or a folder)."""
    out = Listing()
    try:
        st = os.stat(path)
    except OSError as exc:
        out.errors.append({"source": path, "message": f"the component path cannot be read: {exc.strerror}"})
        return out
    if not stat.S_ISDIR(st.st_mode):
        fp = _fingerprint(path)
        if fp is None:
            out.errors.append({"source": path, "message": "the component path is neither a folder nor a file"})
        else:
            out.components[path] = fp
        return out
    try:
        names = sorted(os.listdir(path))
    except OSError as exc:
        out.errors.append({"source": path, "message": f"the component folder cannot be listed: {exc.strerror}"})
        return out
    for name in names:
        if name.startswith(".") or not name.endswith(".wasm"):
            continue
        full = os.path.join(path, name)
        fp = _fingerprint(full)
        if fp is not None:
            out.components[full] = fp
    return out
