"""A polling watcher: calls ``check()`` every ``interval_s`` on a daemon thread until stopped; and
:func:`snapshot_tree`, a fingerprint of every entry of a folder tree, for checks that watch trees (skill folders).

Polling (a ``stat`` of each script every half second) rather than inotify: it needs no extra file access under
Landlock, sees changes made through any mount, and costs little for the few dozen scripts a toolbox has. A change is
seen within one interval plus the time to ``describe`` the changed scripts.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from ._listing import Fingerprint

__all__ = ["Watcher", "snapshot_tree"]


def _fingerprint(path: str) -> Fingerprint | None:
    try:
        st = os.stat(path)  # a symlink is seen through (a script may be one)
    except OSError:
        try:
            st = os.lstat(path)  # a dangling symlink is still an entry
        except OSError:
            return None  # removed while walking
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size, st.st_mode)


def snapshot_tree(roots: Iterable[str]) -> dict[str, Fingerprint]:
    """Path -> fingerprint of each root and of every folder and file beneath it; equal snapshots mean nothing was
    added, removed, rewritten, replaced or chmod-ed. Folders whose name starts with ``.`` (``.git``) are neither
    listed nor searched; symlinked folders are listed but not searched. A missing root has no entries."""
    out: dict[str, Fingerprint] = {}
    for root in roots:
        fp = _fingerprint(root)
        if fp is None:
            continue
        out[root] = fp
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            for name in (*dirnames, *filenames):
                full = os.path.join(dirpath, name)
                fp = _fingerprint(full)
                if fp is not None:
                    out[full] = fp
    return out


class Watcher:
    """Runs ``check`` periodically. ``check`` must not raise; an exception it raises is passed to ``on_error``
    and the watching goes on."""

    def __init__(
        self,
        check: Callable[[], None],
        interval_s: float,
        on_error: Callable[[BaseException], None],
        name: str,
    ) -> None:
        self._check = check
        self._interval = interval_s
        self._on_error = on_error
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._check()
            except Exception as exc:  # keep watching; the toolbox reports the problem
                self._on_error(exc)

    def stop(self) -> None:
        """Stop and wait for the thread (a check in progress finishes first). Safe to call twice."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()
