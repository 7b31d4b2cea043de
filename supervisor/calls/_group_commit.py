"""Group commit: the records of calls that end together are made durable by one flush, before any of their answers
goes.

A frontend's call is answered only once its records (the trace's ``call_end`` and the session store's row) are in
the kernel's hands, so that a supervisor killed right after an answer has lost none of them. Flushing per call costs
a ``write`` and an SQLite commit each; calls in flight end in bursts (one read of a worker's pipe wakes every call
whose result it held), and each of them would commit alone. :meth:`GroupCommit.commit` lets the calls of one burst
share one flush: the first to ask yields once to the scheduler, so that every task already woken queues its
records and asks too, then flushes once and wakes them all. A caller that knows it is alone (no other call whose
records will be committed is running: a sequential caller) flushes at once, without the yield.

Guarantee: when :meth:`GroupCommit.commit` returns, ``flush`` has run after the caller's call to it began (so every
record the caller queued before asking is flushed). A caller cancelled while waiting does not wait for the flush,
which still happens (its answer is not sent anyway).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["GroupCommit"]


class GroupCommit:
    """Shares one ``flush`` among the callers of :meth:`commit` that ask in the same scheduling round."""

    def __init__(self, flush: Callable[[], None]) -> None:
        self._flush = flush
        self._due: trio.Event | None = None  # the flush the callers of this round wait for
        #: flushes run (a test reads it)
        self.flushes = 0

    async def commit(self, *, alone: bool = False) -> None:
        """Return once what the caller queued so far has been flushed (with what the others queued meanwhile).

        ``alone``: no other call that will ask is running, so no other task can queue records this round; the
        flush runs at once (no yield) unless one is already due (then it is waited for, as by anyone).
        """
        due = self._due
        if due is not None:
            await due.wait()
            return
        if alone:
            self.flushes += 1
            self._flush()
            return
        due = self._due = trio.Event()
        try:
            await trio.lowlevel.cancel_shielded_checkpoint()  # the tasks woken with this one queue theirs first
        finally:
            self._due = None
            self.flushes += 1
            try:
                self._flush()
            finally:
                due.set()  # a flush that raised (its error goes to this caller) must not leave the others waiting
