"""What frontends may use of the supervisor: the :class:`ToolService` protocol a running supervisor offers, the
way to open one (:func:`open_service`), and the few values and helpers frontends share with the rest.

Frontends (MCP over stdio and Streamable HTTP, the CLI, the Python API) import nothing else of ``supervisor``
but :mod:`supervisor.config` (the policy's models) and :mod:`supervisor._errors`: not the workers, the plan, the
runners, the portal, the traces' or the attachments' internals (``tests/test_exports.py`` checks it). What they
need of those is a method here, which the :class:`~supervisor._supervisor.Supervisor` implements.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Protocol

from supervisor.calls import BUDGET_KIND, CatalogError
from supervisor.plan import files_warning, list_state_dirs, rebind_agent, registry_dir, release_state_dir, uid_ranges
from supervisor.sessions import LOCAL_TENANT, ids_from_meta, new_id
from supervisor.traces import TraceRecorder, load_trace, render_text, report
from supervisor.workers import ChunkReader, send_whole

from ._check_report import check_report
from ._check_tool import CheckOutcome, check_tool_call
from ._reload import ReloadOutcome
from ._running import agent_tree
from ._services import PreparedChange, ReloadParticipant, ReloadRefused
from ._supervisor import Supervisor
from ._tool_lists import ToolInfo

if TYPE_CHECKING:
    import os
    from collections.abc import Callable, Sequence
    from contextlib import AbstractAsyncContextManager

    from supervisor.config import LoadedConfig, Policy
    from toolboxes import Attachment, ProgressUpdate, ToolResult

__all__ = [
    "BUDGET_KIND",
    "LOCAL_TENANT",
    "CatalogError",
    "CheckOutcome",
    "ChunkReader",
    "PreparedChange",
    "ReloadOutcome",
    "ReloadParticipant",
    "ReloadRefused",
    "ToolInfo",
    "ToolService",
    "TraceRecorder",
    "agent_tree",
    "check_report",
    "check_tool_call",
    "files_warning",
    "ids_from_meta",
    "list_state_dirs",
    "load_trace",
    "new_id",
    "open_service",
    "rebind_agent",
    "registry_dir",
    "release_state_dir",
    "render_text",
    "report",
    "send_whole",
    "uid_ranges",
]


class ToolService(Protocol):
    """A running supervisor as a frontend sees it. Methods never raise for a caller's mistake unless they say so;
    ``session_id`` is always the frontend's own name for its session, ``tenant`` its owner's tenant."""

    @property
    def trace(self) -> TraceRecorder:
        """The trace: a frontend records its own events (``http_draining``) and listens to records (MCP logging)."""
        ...

    @property
    def policy(self) -> Policy:
        """The policy in force (a reload replaces it)."""
        ...

    def warnings(self) -> list[str]:
        """What the policy's compile warned of (removed paths, weakened settings), for the operator."""
        ...

    def renamed(self) -> dict[str, str]:
        """Public tool names that differ from the toolbox's own (too long, duplicated), public -> own."""
        ...

    def agent_slugs(self) -> list[str]:
        """The slugs of the agents this supervisor serves, in load order."""
        ...

    def catalogs(self, agent: str | None) -> set[str]:
        """Which catalogs (``resources``, ``prompts``) a toolbox of ``agent`` (any agent's: ``None``) can have."""
        ...

    def has_session_skills(self, agent: str) -> bool:
        """Whether ``agent`` has a toolbox whose skills are enabled per session (skills)."""
        ...

    def session_name(self, session_id: str) -> str:
        """The frontend's name for a root session this supervisor opened (else the id itself)."""
        ...

    def read_attachment(self, attachment: Attachment) -> bytes:
        """The stored bytes of an attachment of a result this supervisor returned; ``KeyError``/``OSError`` when
        they are not stored (any more)."""
        ...

    def set_own_ports(self, owner: str, ports: Sequence[int]) -> None:
        """The TCP ports ``owner`` (a frontend) listens on now: no worker's egress and no model request reaches
        them, whatever the policy opens."""
        ...

    def join_reloads(self, participant: ReloadParticipant) -> None:
        """Have ``participant`` prepare its part of every reload (the HTTP frontend: tenants, tokens, listener)."""
        ...

    def leave_reloads(self, participant: ReloadParticipant) -> None:
        """No longer have ``participant`` take part in reloads (a no-op when it does not)."""
        ...

    def list_tools(
        self, session_id: str | None = None, *, tenant: str = LOCAL_TENANT, agent: str | None = None
    ) -> list[ToolInfo]:
        """The tools served to the frontend session ``session_id``, in load order: every tool but the
        session-scoped ones (skills' script tools) whose skill is not enabled in that session with the tool's
        agent. ``session_id`` ``None``: every tool. ``agent``: that agent's name space only (``None``: every
        agent's, so a name two agents have is listed twice, with each ``namespace``)."""
        ...

    def list_catalog(self, kind: str, agent: str | None = None) -> list[dict[str, Any]]:
        """The ``resources``, ``resource_templates`` or ``prompts`` served (of ``agent``'s toolboxes only, when
        given), in MCP's spelling with public names (see :mod:`supervisor.calls._catalog`)."""
        ...

    async def read_resource(
        self, uri: str, *, agent: str | None = None, session_id: str | None = None, tenant: str = LOCAL_TENANT
    ) -> dict[str, Any]:
        """MCP's ``resources/read`` result for ``uri`` (of ``agent``'s toolboxes only, when given); raises
        :class:`CatalogError` saying why it cannot be read. Traced as ``resource_read``."""
        ...

    async def get_prompt(
        self,
        name: str,
        args: dict[str, str],
        *,
        agent: str | None = None,
        session_id: str | None = None,
        tenant: str = LOCAL_TENANT,
    ) -> dict[str, Any]:
        """MCP's ``prompts/get`` result; raises :class:`CatalogError`. Traced as ``prompt_get``."""
        ...

    async def wait_tools_changed(self, session_id: str | None = None) -> None:
        """Return the next time the tool list changes; with ``session_id``, also when that session's own list
        changes (a skill enabled or disabled in it), and not when another session's does."""
        ...

    async def call(
        self,
        name: str,
        args: Any,
        *,
        session_id: str | None = None,
        conversation_id: str = "",
        turn_id: str = "",
        agent_id: str = "",
        tenant: str = LOCAL_TENANT,
        agent_scope: str | None = None,
        progress: Callable[[ProgressUpdate], None] | None = None,
    ) -> ToolResult:
        """Call a tool as a frontend caller (depth 0); always returns a result, never raises for bad input.

        ``session_id`` (``None``: one unique to this supervisor): the call runs in that name's session with the
        agent whose tool it is (:mod:`supervisor.calls._frontend_sessions`). ``conversation_id`` and ``turn_id``
        are the client's ids for this call; without them the call gets the session's conversation and a new turn.
        ``agent_scope``: the agent whose tool ``name`` is (a frontend session bound to one agent); only that
        agent's tools exist for this caller. ``None``: the agent that has a tool of that name; when several have
        one the call is refused, saying the name is ambiguous and which agents have it (it never runs in whichever
        agent happens to be first). ``progress``: called (on the trio loop, without blocking) with each progress
        update of the call (an MCP toolbox server's progress, a sub-agent's steps).
        """
        ...

    def close_session(self, session_id: str | None = None, *, tenant: str = LOCAL_TENANT) -> None:
        """The frontend session ``session_id`` ended (an MCP connection closed, an HTTP session deleted or expired,
        a Python API caller done with a name; ``None``: the default one): drop what the supervisor keeps of it in
        memory (its root sessions with each agent, their call counts under ``sessions.max_calls``, the store's
        caches of them). Its records stay in the session store until ``sessions.keep_days`` removes them; a call
        of it still running ends normally. Using the name again opens it again (the same session ids and
        conversation from the store; call counts from 0). Closing a name never used does nothing."""
        ...

    def enable_every_skill(self, session_id: str, *, agent: str, tenant: str = LOCAL_TENANT) -> None:
        """Every loaded skill of ``agent`` counts as enabled in the frontend session ``session_id`` with ``agent``
        until it is closed (a request of MCP's stateless revision: each is a session of its own, so nothing it
        enabled could last into the next; docs/MCP.md "Revisions")."""
        ...

    async def run_agent(
        self,
        slug: str,
        prompt: str,
        *,
        session_id: str | None = None,
        conversation_id: str = "",
        turn_id: str = "",
        tenant: str = LOCAL_TENANT,
    ) -> ToolResult:
        """Run agent ``slug``'s loop on ``prompt`` at depth 0 (``agents-supervise run``), its run a child of the
        session ``session_id`` names with ``slug`` (see :meth:`call`); always a result."""
        ...

    def load_errors(self) -> list[dict[str, Any]]:
        """Toolboxes that did not load and what toolboxes left out while loading (scripts, invalid tool schemas,
        git sources not cloned, sub-agents not found), each ``{"agent", "toolbox", "source", "message"}`` (a
        sub-agent's has no toolbox); such a toolbox's calls answer with the error."""
        ...

    async def reload(self) -> ReloadOutcome:
        """Load the policy again and apply it (as ``SIGHUP`` does; :mod:`supervisor._reload`), one reload at a time.
        Never raises for a policy that does not load: the outcome's ``refused`` says why, and the running policy
        stays."""
        ...


def open_service(
    policy: str | os.PathLike[str] | LoadedConfig,
    *,
    agents: Sequence[str] = (),
    state_dir: str | None = None,
    start: Literal["all", "on_demand"] = "all",
) -> AbstractAsyncContextManager[ToolService]:
    """Open a supervisor for ``policy`` (:meth:`Supervisor.open <supervisor._supervisor.Supervisor.open>`: what it
    raises, and ``start``) and hand it out as a :class:`ToolService`."""
    opened: AbstractAsyncContextManager[ToolService] = Supervisor.open(
        policy, agents=agents, state_dir=state_dir, start=start
    )
    return opened
