"""Run trio code from asyncio: a trio guest run on the asyncio event loop (``trio.lowlevel.start_guest_run``).

The supervisor is trio code. Under asyncio it runs in a trio *guest run* hosted by the running asyncio loop: trio's
tasks run on the loop's own thread, between asyncio's callbacks (trio waits for I/O on a helper thread and hands
its events to the loop with ``call_soon_threadsafe``). No trio code runs concurrently with asyncio code, so the
supervisor's state needs no locks, and nothing is copied between threads.

Trio allows one guest run per host loop, so every :class:`GuestBridge` of one loop shares one: the first one
opened starts it, the last one closed ends it and waits until it ended (a :class:`trio.lowlevel.RunVar` holds the
count, so there is no state outside the run). A guest run of someone else on this loop is not joined: its end is
not ours to wait for (:class:`GuestRunTaken`).

:meth:`GuestBridge.run` awaits one trio coroutine from asyncio. Cancelling the asyncio task that awaits it cancels
the trio task (a cancel scope around it) and waits until the trio side ended, then raises ``CancelledError``: a
cancelled tool call is a cancelled call in the supervisor (its worker told to stop), not one left running. An
exception of the trio coroutine is raised in the asyncio task, unchanged.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, TypeVar

import outcome
import trio

from ._errors import SupervisorError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = ["GuestBridge", "GuestRunTaken"]

T = TypeVar("T")


class GuestRunTaken(SupervisorError):
    """Raised when the running asyncio loop already hosts a trio guest run that is not this module's: trio allows
    one per loop. Run the supervisor from that trio run (``open_supervisor`` works under trio too)."""


class _Host:
    """The state of one guest run, kept in the run itself (:data:`_HOST`)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.users = 0  # changed on the loop's thread only, like everything here
        self.closing = False  # the last user left: the run is ending, a new user starts another
        self.nursery: trio.Nursery | None = None
        self.pending: list[Callable[[], Awaitable[Any]]] = []  # started before the main task opened its nursery
        self.gone = False  # the main task's nursery is closed: nothing starts any more
        self.idle = trio.Event()
        self.ended: asyncio.Future[None] = loop.create_future()

    async def main(self) -> None:
        """The guest run's main task: hosts the bridges' tasks until the last bridge closed."""
        _HOST.set(self)
        try:
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                for fn in self.pending:
                    nursery.start_soon(fn)
                self.pending.clear()
                await self.idle.wait()
                nursery.cancel_scope.cancel()
        finally:
            self.nursery, self.gone = None, True

    def start_soon(self, fn: Callable[[], Awaitable[Any]]) -> bool:
        """Start ``fn()`` in the run's nursery (from trio code of the run); ``False`` once the run is ending."""
        if self.gone:
            return False
        if self.nursery is None:
            self.pending.append(fn)
        else:
            self.nursery.start_soon(fn)
        return True

    def done(self, result: outcome.Outcome[None]) -> None:
        """``done_callback`` of the guest run (on the loop's thread)."""
        if self.ended.done():
            return
        if isinstance(result, outcome.Error):
            self.ended.set_exception(result.error)
        else:
            self.ended.set_result(None)


_HOST: trio.lowlevel.RunVar[_Host | None] = trio.lowlevel.RunVar("agents_supervise_asyncio_host", default=None)


def _running_host(loop: asyncio.AbstractEventLoop) -> tuple[_Host | None, bool]:
    """This loop's guest host and whether a trio run is active on this thread at all."""
    try:
        trio.lowlevel.current_trio_token()
    except RuntimeError:
        return None, False
    host = _HOST.get()
    return (host if host is not None and host.loop is loop else None), True


async def _wait_out(future: asyncio.Future[Any]) -> None:
    """Wait until ``future`` is done, whatever cancels this task meanwhile (those are raised after)."""
    cancelled = False
    while not future.done():
        try:
            await asyncio.shield(future)
        except asyncio.CancelledError:
            if future.done():
                break
            cancelled = True
        except BaseException:
            break
    if cancelled:
        raise asyncio.CancelledError


class GuestBridge:
    """One user of this loop's trio guest run: :meth:`open` joins (or starts) it, :meth:`run` awaits trio
    coroutines in it, :meth:`close` leaves it (the last user ends the run and waits for its end)."""

    def __init__(self) -> None:
        self._host: _Host | None = None
        self._token: trio.lowlevel.TrioToken | None = None

    async def open(self) -> None:
        """Join the running loop's guest run, starting it when there is none. Raises :class:`GuestRunTaken`."""
        loop = asyncio.get_running_loop()
        host, active = _running_host(loop)
        while host is not None and host.closing:
            await _wait_out(host.ended)  # the last user is ending it: start afresh once it ended
            host, active = _running_host(loop)
        if host is None and active:
            raise GuestRunTaken(
                "a trio guest run of another owner is hosted on this asyncio loop, and trio allows one per "
                "loop; open the supervisor from that trio run (open_supervisor works under trio too)"
            )
        if host is None:
            host = _Host(loop)
            trio.lowlevel.start_guest_run(
                host.main,
                run_sync_soon_threadsafe=loop.call_soon_threadsafe,
                run_sync_soon_not_threadsafe=loop.call_soon,
                done_callback=host.done,
                host_uses_signal_set_wakeup_fd=True,
            )
        host.users += 1
        self._host = host
        self._token = trio.lowlevel.current_trio_token()

    def start_soon(self, fn: Callable[[], Awaitable[Any]]) -> None:
        """Start ``fn()`` as a task of the guest run's own nursery, from a trio task of the run (a task that must
        outlive the :meth:`run` that started it); it must catch its own exceptions but ``trio.Cancelled``."""
        host = self._host
        if host is None or not host.start_soon(fn):
            raise SupervisorError("the supervisor is closed (its async with block ended)")

    async def run(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Await ``fn()`` in the trio run and return its result (or raise its exception) in this asyncio task.

        Cancelling this task cancels ``fn()``'s trio task and waits until it ended before ``CancelledError`` is
        raised. Raises ``SupervisorError`` when the bridge is closed.
        """
        host, token = self._host, self._token
        if host is None or token is None:
            raise SupervisorError("the supervisor is closed (its async with block ended)")
        loop = host.loop
        answer: asyncio.Future[T] = loop.create_future()
        ended: asyncio.Future[None] = loop.create_future()
        scope = trio.CancelScope()

        async def task() -> None:
            try:
                with scope:
                    result = await fn()
                    if not answer.done():
                        answer.set_result(result)
                if scope.cancelled_caught and not answer.done():
                    answer.cancel()
            except BaseException as exc:
                if not answer.done():
                    if isinstance(exc, trio.Cancelled):  # the run ends (the last bridge closed under us)
                        answer.set_exception(SupervisorError("the supervisor closed before the call ended"))
                    else:
                        answer.set_exception(exc)
                if isinstance(exc, trio.Cancelled | KeyboardInterrupt | SystemExit):
                    raise
            finally:
                if not ended.done():
                    ended.set_result(None)

        def start() -> None:
            if not host.start_soon(task):
                answer.set_exception(SupervisorError("the supervisor's trio run has ended"))
                ended.set_result(None)

        token.run_sync_soon(start)
        try:
            return await answer
        except asyncio.CancelledError:
            token.run_sync_soon(scope.cancel)
            await _wait_out(ended)
            raise

    async def close(self) -> None:
        """Leave the guest run; the last user ends it and waits until it ended. Idempotent."""
        host, token = self._host, self._token
        self._host = self._token = None
        if host is None or token is None:
            return
        host.users -= 1
        if host.users > 0:
            return
        host.closing = True
        token.run_sync_soon(host.idle.set)
        await _wait_out(host.ended)
        host.ended.result()  # the run's own failure (a TrioInternalError), if it had one
