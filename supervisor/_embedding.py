"""The Python API: what a program embedding agents-supervise may use, the same under trio and asyncio.

::

    async with open_supervisor("policies/strict.yaml") as sup:      # trio.run(main) or asyncio.run(main)
        tools = await sup.list_tools(agent="coder")
        result = await sup.call("system_system_date", {}, agent="coder", session_id="job-1")
        await sup.close_session("job-1")

:func:`open_supervisor` finds which library runs it (``sniffio``). Under trio it opens the supervisor in the
caller's run. Under asyncio it runs the supervisor in a trio guest run on the caller's event loop
(:mod:`supervisor._asyncio_guest`): cancelling an asyncio task that awaits a call cancels the call in the
supervisor, and an exception of the supervisor is raised unchanged.

:class:`EmbeddedSupervisor` is the whole public surface of a running supervisor (docs/EMBEDDING.md): every method
is a coroutine in both libraries, on top of the frontends' face (:class:`~supervisor._face.ToolService`). Everything
else of :class:`~supervisor._supervisor.Supervisor` (runners, the registry, the portal, reload internals) is the
implementation and may change.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Any

import sniffio
import trio

from ._asyncio_guest import GuestBridge
from ._face import open_service

if TYPE_CHECKING:
    import os
    from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

    from supervisor.config import LoadedConfig
    from toolboxes import ProgressUpdate, ToolResult

    from ._face import ToolInfo, ToolService

__all__ = ["EmbeddedSupervisor", "open_supervisor"]


async def _direct(fn: Callable[[], Awaitable[Any]]) -> Any:
    return await fn()


class EmbeddedSupervisor:
    """A running supervisor, as an embedding program sees it. Made by :func:`open_supervisor`; valid inside its
    ``async with`` block only. Every method is a coroutine, under trio as under asyncio."""

    def __init__(self, sup: ToolService, run: Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]]) -> None:
        self._sup = sup
        self._run = run

    async def agents(self) -> list[str]:
        """The slugs of the agents served, in the policy's order."""
        slugs: list[str] = await self._run(self._agents)
        return slugs

    async def _agents(self) -> list[str]:
        return self._sup.agent_slugs()

    async def list_tools(self, *, agent: str | None = None, session_id: str | None = None) -> list[ToolInfo]:
        """The tools of ``agent`` (``None``: of every agent, a name two agents have listed twice with each
        ``agent``), as a session named ``session_id`` sees them (skills' script tools only once enabled in it;
        ``None``: every tool)."""

        async def tools() -> list[ToolInfo]:
            return self._sup.list_tools(session_id, agent=agent)

        listed: list[ToolInfo] = await self._run(tools)
        return listed

    async def call(
        self,
        name: str,
        arguments: Any = None,
        *,
        agent: str | None = None,
        session_id: str | None = None,
        conversation_id: str = "",
        turn_id: str = "",
        progress: Callable[[ProgressUpdate], None] | None = None,
    ) -> ToolResult:
        """Call the tool ``name`` of ``agent`` (``None``: the first agent that has it) with ``arguments`` (a JSON
        object; ``None``: ``{}``). Always a result, never an exception for bad input or a failed tool: status
        ``passed``, ``failed`` or ``error`` (refused, invalid, timed out, crashed), with a reason.

        ``session_id`` names the caller's session (``None``: a session of its own for this call); the call runs
        in that name's session with ``agent``, which :meth:`close_session` ends. ``conversation_id``/``turn_id``
        are the caller's ids (default: the session's conversation and a new turn). ``progress`` is called with
        each progress update (an MCP server's progress, a sub-agent's steps), on the event loop, never blocking.
        Cancelling the caller cancels the call: its worker is told to stop, and the cancellation is raised once
        the supervisor has ended the call.
        """

        async def one() -> ToolResult:
            return await self._sup.call(
                name,
                {} if arguments is None else arguments,
                session_id=session_id,
                conversation_id=conversation_id,
                turn_id=turn_id,
                agent_scope=agent,
                progress=progress,
            )

        result: ToolResult = await self._run(one)
        return result

    async def run_agent(
        self, agent: str, prompt: str, *, session_id: str | None = None, conversation_id: str = "", turn_id: str = ""
    ) -> ToolResult:
        """Run ``agent``'s loop (its model, its tools) on ``prompt``; its answer is the result's ``data``."""

        async def run() -> ToolResult:
            return await self._sup.run_agent(
                agent, prompt, session_id=session_id, conversation_id=conversation_id, turn_id=turn_id
            )

        result: ToolResult = await self._run(run)
        return result

    async def close_session(self, session_id: str) -> None:
        """The caller is done with the session ``session_id``: the supervisor forgets it (its records stay in the
        session store until ``sessions.keep_days``). Using the name again opens it again."""

        async def close() -> None:
            self._sup.close_session(session_id)

        await self._run(close)

    async def load_errors(self) -> list[dict[str, Any]]:
        """Toolboxes that did not load (and scripts left out), each ``{"agent", "toolbox", "source", "message"}``;
        their tools answer with the error."""

        async def errors() -> list[dict[str, Any]]:
            return self._sup.load_errors()

        found: list[dict[str, Any]] = await self._run(errors)
        return found

    async def reload(self) -> str:
        """Load the policy again and apply it (as SIGHUP does); returns the one-line account of what changed, or
        why nothing did (a policy that does not load changes nothing)."""

        async def reload() -> str:
            return (await self._sup.reload()).describe()

        line: str = await self._run(reload)
        return line


@asynccontextmanager
async def open_supervisor(
    policy: str | os.PathLike[str] | LoadedConfig, *, agents: Sequence[str] = (), state_dir: str | None = None
) -> AsyncIterator[EmbeddedSupervisor]:
    """Load ``policy``, start every toolbox's confined worker, and yield the running supervisor; leaving the block
    stops every worker. Works under trio and under asyncio (a trio guest run on the running loop).

    ``agents``: agent files to load besides the policy's; ``state_dir``: instead of the policy's.

    Raises, before any worker starts: ``ConfigError`` (the policy or an agent file does not load),
    ``PolicyRefused`` (this machine cannot enforce it), ``OSError`` (the state directory cannot be made). A
    toolbox that cannot load is a load error (:meth:`EmbeddedSupervisor.load_errors`), not an exception.
    """
    if sniffio.current_async_library() == "trio":
        async with open_service(policy, agents=agents, state_dir=state_dir) as sup:
            yield EmbeddedSupervisor(sup, _direct)
        return
    bridge = GuestBridge()
    await bridge.open()
    try:
        async with _in_trio(bridge, policy, agents, state_dir) as embedded:
            yield embedded
    finally:
        await bridge.close()


@asynccontextmanager
async def _in_trio(
    bridge: GuestBridge, policy: str | os.PathLike[str] | LoadedConfig, agents: Sequence[str], state_dir: str | None
) -> AsyncIterator[EmbeddedSupervisor]:
    """The supervisor held open by one trio task of ``bridge``'s run (a trio context manager is entered and left
    in the same task), from the bridge's first call to its last."""
    held = _Held(policy, agents, state_dir)
    sup = await bridge.run(partial(held.open, bridge))
    try:
        yield EmbeddedSupervisor(sup, bridge.run)
    finally:
        await bridge.run(held.close)


class _Held:
    """One :meth:`Supervisor.open` block run by a task of its own in the guest run's nursery."""

    def __init__(self, policy: str | os.PathLike[str] | LoadedConfig, agents: Sequence[str], state_dir: str | None):
        self._args = (policy, agents, state_dir)
        self._scope = trio.CancelScope()
        self._ready, self._stop, self._closed = trio.Event(), trio.Event(), trio.Event()
        self._sup: ToolService | None = None
        self._error: BaseException | None = None

    async def _hold(self) -> None:
        policy, agents, state_dir = self._args
        try:
            with self._scope:
                async with open_service(policy, agents=agents, state_dir=state_dir) as sup:
                    self._sup = sup
                    self._ready.set()
                    await self._stop.wait()
        except trio.Cancelled:
            raise  # the guest run ends: not this block's to keep
        except BaseException as exc:  # kept for the caller: never into the nursery other supervisors share
            self._error = exc
        finally:
            self._ready.set()
            self._closed.set()

    async def open(self, bridge: GuestBridge) -> ToolService:
        """Start the holding task and wait until the supervisor is open; raises what opening it raised. Cancelled,
        it cancels the opening and waits until everything it started stopped."""
        bridge.start_soon(self._hold)
        try:
            await self._ready.wait()
        except trio.Cancelled:
            self._scope.cancel()
            with trio.CancelScope(shield=True):
                await self._closed.wait()
            raise
        if self._sup is None:
            raise self._error or RuntimeError("the supervisor did not open")
        return self._sup

    async def close(self) -> None:
        """Leave the block (every worker stopped) and wait until it is left; raises what leaving it raised."""
        self._stop.set()
        with trio.CancelScope(shield=True):
            await self._closed.wait()
        if self._error is not None:
            raise self._error
