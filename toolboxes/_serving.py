"""Leader/followers: threads that take turns reading requests and run what they read themselves.

One thread at a time is the *leader*: it blocks in ``read()``. When a read returns jobs, the leader hands the reading
role to an idle thread (waking it, or starting one) and runs the first job itself, so a job starts on the thread
that read it, with no wake-up of another thread on its path (a pool would have the reader wake a pool thread, and
every call would wait for that). Jobs beyond what may run at once wait in a queue; a thread that finishes a job takes
the next queued one before it competes for the leader role again.

Guarantees:

- at most ``max_jobs`` jobs run at once, and one more thread can always lead, so reading never stops while
  ``max_jobs`` jobs run (a cancel or a reply still gets through);
- at most ``max_jobs + 1`` threads, started only when needed;
- jobs start in the order they were read;
- a read that gives no job to run (a reply, a cancel, a call run inline by ``read`` itself) leaves the reader leading:
  no other thread is woken for it;
- after ``read()`` returns ``None`` no further job starts; :attr:`stopped` is set.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["LeaderFollowers"]

Job = TypeVar("Job")


class LeaderFollowers(Generic[Job]):
    """Serve ``read`` and ``run`` with leader/follower threads (see the module docstring).

    Args:
        read: blocks until there is input; returns the jobs read (maybe none) or ``None`` when serving must end.
            Called by one thread at a time. An exception from it ends serving too.
        run: runs one job; must not raise (a job's failure is its own result).
        max_jobs: jobs that may run at once (at least 1).
        name: prefix of the threads' names.
    """

    def __init__(
        self, read: Callable[[], list[Job] | None], run: Callable[[Job], None], max_jobs: int, name: str = "serve"
    ) -> None:
        if max_jobs < 1:
            raise ValueError("max_jobs must be at least 1")
        self._read = read
        self._run = run
        self._max_jobs = max_jobs
        self._name = name
        self._cond = threading.Condition()
        self._queue: deque[Job] = deque()
        self._leading = False
        self._running = 0
        self._idle = 0
        self._threads = 0
        #: set once ``read`` returned ``None`` (or raised): no job starts any more
        self.stopped = threading.Event()

    def start(self) -> None:
        """Start the first thread (the first leader). Returns at once."""
        with self._cond:
            self._spawn_locked(1)

    def _spawn_locked(self, wanted: int) -> None:
        """Start up to ``wanted`` threads, within the bound of ``max_jobs + 1``. When the system refuses a thread
        (address-space or process limits), serving goes on with the threads it has: a job then waits for a free one,
        and with no thread free, the one that read a job runs it and reading waits."""
        for _ in range(min(wanted, self._max_jobs + 1 - self._threads)):
            thread = threading.Thread(target=self._serve, name=f"{self._name}-{self._threads + 1}", daemon=True)
            try:
                thread.start()
            except RuntimeError:  # "can't start new thread"
                return
            self._threads += 1

    def _serve(self) -> None:
        while True:
            job, lead = self._next()
            if lead:
                job = self._lead()
            if job is None:
                if self.stopped.is_set():
                    return
                continue
            try:
                self._run(job)
            finally:
                with self._cond:
                    self._running -= 1

    def _next(self) -> tuple[Job | None, bool]:
        """Wait for something to do: ``(job, False)`` to run a queued job, ``(None, True)`` to lead, ``(None,
        False)`` to end (serving stopped)."""
        with self._cond:
            self._idle += 1
            try:
                while True:
                    if self.stopped.is_set():
                        return None, False
                    if self._queue and self._running < self._max_jobs:
                        self._running += 1
                        return self._queue.popleft(), False
                    if not self._leading:
                        self._leading = True
                        return None, True
                    self._cond.wait()
            finally:
                self._idle -= 1

    def _lead(self) -> Job | None:
        """Read until a read yields a job; queue what was read, pass the lead on, and return the job this thread
        runs (if any). A read that yields nothing to run (a reply, a cancel, an inline call already answered)
        keeps this thread leading: handing the lead to another thread then would only cost a wake-up and a thread
        switch for the same next read."""
        while True:
            jobs: list[Job] | None = None
            try:
                jobs = self._read()
            finally:
                if jobs is None:  # the end, or read() raised
                    with self._cond:
                        self._leading = False
                        self.stopped.set()
                        self._cond.notify_all()
            if jobs is None:
                return None
            if not jobs:
                continue
            with self._cond:
                self._leading = False
                self._queue.extend(jobs)
                mine: Job | None = None
                if self._queue and self._running < self._max_jobs:
                    self._running += 1
                    mine = self._queue.popleft()
                # Someone must lead now, and queued jobs that may run want threads of their own.
                wanted = 1 + min(len(self._queue), self._max_jobs - self._running)
                woken = min(wanted, self._idle)
                if woken:
                    self._cond.notify(woken)
                if wanted > woken:
                    self._spawn_locked(wanted - woken)
            return mine
