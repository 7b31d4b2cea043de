"""Agent files in a Kubernetes volume (a ConfigMap, a Secret, a projected volume): the folder they belong to.

The kubelet writes such a volume with its atomic writer: the files of one version in a folder ``D/..<version>``, a
link ``D/..data`` to it, and each file's name ``D/X`` a link to ``..data/X``; an update writes a new version folder,
swaps ``..data`` and deletes the old folder. A file's canonical path therefore moves at every update, while its name
``D/X`` stays. An agent file named ``D/X`` where both links are root's alone to change (root's, in a folder only
root changes or on a read-only mount, as the pod's volume is: ``sandbox._path_walk.ResolvedPath.links_fixed``)
belongs to the folder ``D``: its relative paths are relative to ``D`` (where every name of the volume leads into
the current version, so they mean what they meant relative to the version folder), tools run there, and its slug is
bound to ``D/X`` (``plan/_agent_bindings.py``). So an update changes nothing of an unchanged agent's workers, and a
worker kept over it never stands in a deleted folder.
"""

from __future__ import annotations

import os

from sandbox import resolve_path

__all__ = ["volume_folder"]


def _accept(asked: str, location: str, st: os.stat_result) -> None:
    return None


def volume_folder(named: str) -> str | None:
    """``D`` when ``named`` (absolute, as named) is ``D/X`` of a Kubernetes volume whose links are root's alone
    (module docstring), else ``None`` (also when it cannot be walked)."""
    if not named.startswith("/") or os.path.normpath(named) != named:
        return None
    folder, name = os.path.split(named)
    try:
        resolved = resolve_path(named, _accept)  # directory fds, no link followed unseen
    except (OSError, ValueError):
        return None
    version = os.path.dirname(resolved.canonical)
    layout = (
        resolved.links == ((named, 0), (os.path.join(folder, "..data"), 0))
        and os.path.dirname(version) == folder
        and os.path.basename(version).startswith("..")
        and os.path.basename(resolved.canonical) == name
    )
    return folder if layout and resolved.links_fixed else None
