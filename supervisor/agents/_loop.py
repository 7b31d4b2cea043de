"""Agent loops run by the supervisor: ``io_prompt_agent_<slug> {what}`` and ``agents-supervise run``.

:class:`AgentService` runs one agent's loop against its OpenAI-compatible endpoint (``modelUrl``, ``modelName``;
:mod:`supervisor.agents._llm`): the agent's ``systemPrompt``, the user's ``what``, and the agent's tools as function
tools. The tools of an agent are those of the toolboxes its own file declares (the registry knows each tool's
agent) plus one ``io_prompt_agent_<slug>`` per sub-agent it names. Each tool call the model asks for goes through
:meth:`Portal.call <supervisor.calls._portal.Portal.call>` with a :class:`~supervisor.calls._portal.CallOrigin` whose
``allowed`` is that tool set, whose ``agent_id`` is the agent, and whose depth and stack continue the caller's, so
``max_call_depth`` counts sub-agent calls like any other nested call (A calls B calls A ... stops at the limit, and
the refusal, with the stack, is what the model gets back). A caller that asked for progress (``CallOrigin.progress``)
gets one update per step (``step_progress``: the step of ``max_steps`` and what the model did); the loop's own
tool calls are made without it.

Bounds (the policy's ``agent_loop``): at most ``max_steps`` model requests per loop, then an ``error`` result; each
request bounded by ``request_timeout_s`` and retried after transient failures (see :mod:`supervisor.agents._llm`).
Every model request (each attempt) is charged to the call tree's budget (:mod:`supervisor.calls._budget`): once
its ``model_requests`` ran out, the loop ends before its next request with a ``CallTreeBudget`` error, which its
caller's loop gets as the tool's answer, and so on up the tree; at the tree's wall-time end the loop is cancelled
and ends the same way. An ``agents-supervise run`` is a root call: it opens its tree's budget itself. A
tool call with unparsable arguments, or naming a tool the agent does not have, is answered to the model with the reason
(it can correct itself); it still costs a step.

Images a tool returns reach the model: after the step's tool messages, one ``user`` message carries them as
``image_url`` parts with data URLs (:mod:`supervisor.agents._model_media`), each within ``context.images.max_bytes``;
the tool message itself lists every attachment.

Model endpoints are reached under the egress proxy's address rules (:mod:`supervisor.agents._model_network`):
before its first request a loop checks its ``modelUrl`` against the ceilings' ``model_hosts`` (a refusal is its
``error`` result, naming the key), and every connection is decided when it is made (loopback and private ranges
only where ``agent_loop`` opens them, metadata and the supervisor's own ports never).

Each loop is a session of its own in the session store, child of the caller's session, with its turns; the API key
is resolved here, per loop, and goes nowhere but the request header (not into traces, sessions or workers).

:class:`~._agent_runner.AgentRunner` serves one sub-agent's tool to the registry: it duck-types a toolbox runner
(``name``, ``spec.agent``, ``spec.toolbox``, ``tools``, ``call``) with no worker behind it. What the model gets back
for a tool's result, and a step's progress update, are :mod:`._tool_messages`.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import trio

from supervisor.calls import (
    BudgetExhausted,
    CallOrigin,
    Portal,
    RegisteredTool,
    ToolRegistry,
    budget_result,
    trace_exhaustion,
)
from toolboxes import Attachment, ProgressUpdate, ToolResult

from ._agent_runner import AgentRunner
from ._chat_reply import ModelError, completion_url, function_tool
from ._llm import ChatClient, RetryBounds, complete_with_retries
from ._model_keys import resolve_api_key
from ._model_media import image_parts
from ._model_network import ModelAccess, ModelHttp, ceiling_refusal
from ._tool_messages import step_progress, tool_message

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from supervisor.calls import CallTreeBudget
    from supervisor.config import AgentLoop, AgentTree
    from supervisor.sessions import SessionStore
    from supervisor.traces import TraceRecorder

__all__ = ["AgentRunner", "AgentService", "tool_message"]


class AgentService:
    """Runs agent loops for one supervisor (owns no resources besides what it is given)."""

    def __init__(
        self,
        *,
        tree: AgentTree,
        portal: Portal,
        registry: ToolRegistry,
        trace: TraceRecorder,
        sessions: SessionStore | None,
        http: ModelHttp,
        bounds: AgentLoop,
        model_keys: Mapping[str, str],
        environ: Mapping[str, str] | None = None,
        new_id: Callable[[], str] = lambda: uuid.uuid4().hex,
        read_attachment: Callable[[Attachment], bytes] | None = None,
        max_image_bytes: int = 5 * 1024 * 1024,
    ) -> None:
        self.tree = tree
        self.portal = portal
        self.registry = registry
        self.trace = trace
        self.sessions = sessions
        #: the HTTP clients of model requests (each run takes the one of what the policy opens now)
        self.http = http
        self.bounds = bounds
        self.model_keys = model_keys
        self.environ = environ
        self._new_id = new_id
        self.read_attachment = read_attachment
        self.max_image_bytes = max_image_bytes
        self._runners: list[AgentRunner] = []

    def runners(self) -> list[AgentRunner]:
        """One runner per sub-agent (every agent some agent names), in first-seen order (made once)."""
        if not self._runners:
            self._runners = [AgentRunner(self, slug) for slug in self.tree.subagent_slugs]
        return self._runners

    def tools_of(self, slug: str) -> list[RegisteredTool]:
        """The tools agent ``slug`` may call: its name space in the registry (its own toolboxes' tools, then its
        sub-agents' tools, see :meth:`Supervisor._rebuild <supervisor._supervisor.Supervisor>`)."""
        return self.registry.all(slug)

    def forget_runners(self) -> None:
        """Make the runners again at the next :meth:`runners` (the tree changed: a policy reload)."""
        self._runners = []

    def guests(self) -> dict[str, list[AgentRunner]]:
        """Agent -> the runners of the sub-agents it names, in the order it names them (their tools join its name
        space in the registry)."""
        runners = {r.slug: r for r in self._runners}
        return {parent: [runners[s] for s in subs if s in runners] for parent, subs in self.tree.subagents.items()}

    async def run(self, slug: str, prompt: str, origin: CallOrigin) -> ToolResult:
        """Run agent ``slug``'s loop on ``prompt``; always a result (``error`` with the reason when it fails).

        ``origin`` is the call that asked (its depth and stack are those of the ``io_prompt_agent`` call itself, or
        depth 0 for ``agents-supervise run``); the loop's tool calls are made one level deeper. Cancellation
        propagates (the session is marked failed first).
        """
        try:
            agent = self.tree.config.agent(slug)
        except KeyError:
            known = ", ".join(a.slug for a in self.tree.config.agents) or "none"
            return ToolResult.error(f"no agent {slug!r} is loaded; loaded agents: {known}")
        desc = agent.description
        if not desc.model_url or not desc.model_name:
            return ToolResult.error(f"agent {slug} cannot run: its file ({agent.file}) sets no modelUrl/modelName")
        refused = self._endpoint_refusal(slug, desc.model_url)
        if refused:
            self.trace.record("model_refused", agent=slug, reason=refused[:500])
            return ToolResult.error(f"agent {slug} cannot run: {refused}")
        try:
            key = resolve_api_key(desc.api_key_id, self.model_keys, self.environ)
        except ModelError as exc:
            return ToolResult.error(f"agent {slug} cannot run: {exc}")
        http = self.http.client(ModelAccess.from_policy(self.bounds))
        client = ChatClient(http, completion_url(desc.model_url), desc.model_name, key)
        budget = origin.budget
        if budget is None:  # agents-supervise run: a root call of its own, its tree's budget starts now
            budget = self.portal.budgets.open(origin.tenant, trio.current_time())
            origin = replace(origin, budget=budget)
        tools = self.tools_of(slug)
        allowed = frozenset(t.name for t in tools)
        functions = [function_tool(t.name, t.description, t.input_schema) for t in tools]
        session_id, conversation_id = self._new_id(), self._new_id()
        inner = replace(
            origin,
            session_id=session_id,
            conversation_id=conversation_id,
            agent_id=slug,
            allowed=allowed,
            caller=f"agent {slug}",
            progress=None,
            agent_scope=slug,
        )
        if self.sessions is not None:
            self.sessions.start_child(
                session_id, conversation_id, origin.session_id, slug, origin.parent_call_id, tenant=origin.tenant
            )
            self.sessions.add_turn(session_id, "user", prompt)
        self.trace.record(
            "agent_start",
            agent=slug,
            session=session_id,
            parent_session=origin.session_id,
            parent_call_id=origin.parent_call_id,
            depth=origin.depth,
            model=desc.model_name,
            tools=sorted(allowed),
        )
        status = "failed"
        try:
            with trio.CancelScope(deadline=budget.deadline) as scope:
                system = "\n".join(desc.system_prompt)
                result = await self._loop(slug, client, prompt, system, functions, inner, budget, origin.progress)
            if scope.cancelled_caught:  # the tree's wall time ended (only its deadline cancels this scope)
                late = budget.out_of_time()
                trace_exhaustion(self.trace, budget, late, agent=slug, session=session_id)
                result = budget_result(late, f"agent {slug} was stopped: {late.message()}.")
            status = "idle" if result.status == "passed" else "failed"
            return result
        finally:
            if self.sessions is not None:
                self.sessions.finish(session_id, status)
            self.portal.forget_session(session_id)  # a run's session is never used again: nothing kept of it
            self.trace.record("agent_end", agent=slug, session=session_id, status=status)

    def _endpoint_refusal(self, slug: str, model_url: str) -> str:
        """Why agent ``slug`` may not send requests to ``model_url`` at all (:func:`ceiling_refusal`)."""
        return ceiling_refusal(self.tree.config.policy, self.tree.subagents, slug, model_url)

    async def _loop(
        self,
        slug: str,
        client: ChatClient,
        prompt: str,
        system: str,
        functions: list[dict[str, Any]],
        inner: CallOrigin,
        budget: CallTreeBudget,
        progress: Callable[[ProgressUpdate], None] | None = None,
    ) -> ToolResult:
        messages: list[dict[str, Any]] = []
        if system:
            messages.append({"role": "system", "content": system})
        messages.append({"role": "user", "content": prompt})
        bounds = RetryBounds(
            self.bounds.retries, self.bounds.backoff_initial_s, self.bounds.backoff_max_s, self.bounds.request_timeout_s
        )

        def on_retry(attempt: int, error: ModelError, delay: float) -> None:
            self.trace.record(
                "model_retry",
                agent=slug,
                session=inner.session_id,
                attempt=attempt,
                status=error.status,
                reason=str(error)[:300],
                delay_s=delay,
            )

        def admit() -> None:  # before every model request (retries included): the tree's budget counts it
            spent = budget.charge_model_request(trio.current_time())
            if spent is not None:
                raise BudgetExhausted(spent)

        # The seed's continuation_id: an endpoint that holds the conversation returns an id; the next request then
        # carries only the messages after those it holds (``held`` of them), plus the id.
        continuation = ""
        held = 0
        for step in range(1, self.bounds.max_steps + 1):
            start = time.perf_counter()
            try:
                try:
                    sent = messages[held:] if continuation else messages
                    reply = await complete_with_retries(client, sent, functions, bounds, on_retry, continuation, admit)
                except ModelError as exc:
                    if not continuation or exc.transient:
                        raise
                    # The endpoint refused the continued request (it may have lost the state): send it all.
                    self.trace.record(
                        "model_continuation_dropped",
                        agent=slug,
                        session=inner.session_id,
                        step=step,
                        reason=str(exc)[:300],
                    )
                    continuation = ""
                    reply = await complete_with_retries(client, messages, functions, bounds, on_retry, admit=admit)
            except BudgetExhausted as exc:
                spent = exc.exhaustion
                trace_exhaustion(self.trace, budget, spent, agent=slug, session=inner.session_id, step=step)
                why = f"agent {slug} was stopped before its model request {step}: {spent.message()}."
                return budget_result(spent, why)
            except ModelError as exc:
                self.trace.record(
                    "agent_step",
                    agent=slug,
                    session=inner.session_id,
                    step=step,
                    error=str(exc)[:500],
                    duration_s=round(time.perf_counter() - start, 6),
                )
                result = ToolResult.error(f"agent {slug}: {exc}")
                return result.with_meta("transient", "true" if exc.transient else "false")
            self.trace.record(
                "agent_step",
                agent=slug,
                session=inner.session_id,
                step=step,
                tool_calls=[c.name for c in reply.tool_calls],
                finish_reason=reply.finish_reason,
                duration_s=round(time.perf_counter() - start, 6),
            )
            messages.append(reply.message())
            continuation, held = reply.continuation_id, len(messages)
            if progress is not None:
                progress(step_progress(slug, step, self.bounds.max_steps, reply))
            if self.sessions is not None and reply.thinking:
                self.sessions.add_turn(inner.session_id, "thinking", reply.thinking)
            if self.sessions is not None and (reply.content or not reply.tool_calls):
                self.sessions.add_turn(inner.session_id, "assistant", reply.content)
            if not reply.tool_calls:
                return ToolResult.passed(
                    reply.content, summary=f"agent {slug} answered after {step} step" + ("s" if step > 1 else "")
                )
            images: list[dict[str, Any]] = []
            for call in reply.tool_calls:
                origin = replace(inner, turn_id=str(step))
                result = await self._tool_call(call.name, call.arguments, origin)
                parts, notes = self._images(call.name, result)
                images += parts
                text = tool_message(result) + "".join(f"\n[{n}]" for n in notes)
                if parts:
                    text += "\n[its images follow in the next message]"
                messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
                if self.sessions is not None:
                    self.sessions.add_turn(inner.session_id, "tool", text, tool=call.name)
            if images:
                # The chat format has no images in tool messages: they follow them, in one user message.
                messages.append({"role": "user", "content": images})
        self.trace.record(
            "limit_hit",
            limit="agent_loop.max_steps",
            value=self.bounds.max_steps,
            agent=slug,
            session=inner.session_id,
            root_call_id=budget.root or None,
        )
        return ToolResult.error(
            f"agent {slug} reached its step limit of {self.bounds.max_steps} model requests "
            "without a final answer (it kept calling tools); the loop was stopped"
        )

    def _images(self, call: str, result: ToolResult) -> tuple[list[dict[str, Any]], list[str]]:
        if not result.attachments:
            return [], []
        if self.read_attachment is None:
            return [], ["this loop cannot read attachments: none is shown to you"]
        return image_parts(call, result.attachments, self.read_attachment, self.max_image_bytes)

    async def _tool_call(self, name: str, arguments: str, origin: CallOrigin) -> ToolResult:
        try:
            args = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            return ToolResult.error(
                f"the arguments of your call to {name} are not valid JSON ({exc.msg} at "
                f"character {exc.pos}); send one JSON object that matches the tool's schema"
            )
        if not isinstance(args, dict):
            return ToolResult.error(
                f"the arguments of your call to {name} must be a JSON object, not {type(args).__name__}"
            )
        return await self.portal.call(name, args, origin)
