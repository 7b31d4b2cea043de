"""A polling watcher: calls ``check()`` every ``interval_s`` on a daemon thread until stopped.

Polling (a ``stat`` of each script every half second) rather than inotify: it needs no extra file access under
Landlock, sees changes made through any mount, and costs little for the few dozen scripts a toolbox has. A change is
seen within one interval plus the time to ``describe`` the changed scripts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["Watcher"]


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
