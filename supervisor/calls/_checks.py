"""The portal's first stage: may this call be made at all (no I/O, nothing counted).

Checks, in order (DESIGN.md "Call context and the portal"):

1. the tool exists (``PortalToolNotFound``; a tool of a toolbox that did not load is named, with why);
2. the caller may call it: a worker may call only the tools its toolbox's ``AllowedTools`` lists, a frontend caller
   only the tools of its agent set (``PortalToolNotAllowed``, with the allowed list);
3. the arguments are plain JSON of bounded size and validate against the tool's JSON schema (``PortalInvalid
   Arguments``, the seed's text), mended where the tool's ``ValidationConfig`` allows (``supervisor.tools._relax``);
4. the depth stays within ``max_call_depth`` (``PortalDepthExceeded``, showing the call stack).

:func:`check_call` answers the tool with the arguments to send it, or a :class:`Refusal`: an error a caller can act
on, never an exception. What the policy says of every call is one :class:`CallPolicy` value (a generation's).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from supervisor.tools import ValidationConfig, format_validation_errors, relax
from toolboxes import encode, json_problem

from ._budget import BudgetPolicy
from ._ledger import SessionLimits
from ._unloaded import unloaded_note

if TYPE_CHECKING:
    from collections.abc import Mapping

    from supervisor.config import LoadError, Policy

    from ._origin import CallOrigin
    from ._registry import RegisteredTool, ToolRegistry

__all__ = ["Admitted", "CallPolicy", "Refusal", "check_call"]

#: Bounds on a call's arguments: they must be plain JSON (no bytes, sets or NaN from the Python API), nested at
#: most this deep, with at most this many values and this many bytes once encoded for the worker.
MAX_ARGS_DEPTH = 100
MAX_ARGS_VALUES = 1_000_000
MAX_ARGS_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class CallPolicy:
    """What the running policy says of every call (one generation's; a reload makes another, which applies to
    the calls after it). The default bounds nothing but the depth."""

    max_call_depth: int = 4
    session_limits: SessionLimits = field(default_factory=SessionLimits)
    #: what a root call's tree may use (the policy's ``budget``, per tenant)
    budgets: BudgetPolicy = field(default_factory=BudgetPolicy)
    #: the policy's ``limits.output_bytes`` (a toolbox's own, from its plan, wins: ``output_limit``)
    output_bytes: int | None = None
    #: the media classes' largest sizes (``context``), for attachments
    media_limits: Mapping[str, int] = field(default_factory=dict)
    #: the loaded policy, for each toolbox's ``validation``; ``None``: strict for every tool
    policy: Policy | None = None
    #: toolboxes that could not be compiled (a call of a name of theirs is told why it is not found)
    unloaded: tuple[LoadError, ...] = ()

    @classmethod
    def from_policy(cls, policy: Policy, unloaded: tuple[LoadError, ...] = ()) -> CallPolicy:
        """The call rules of ``policy``; ``unloaded``: its compile's load errors."""
        return cls(
            max_call_depth=policy.max_call_depth,
            session_limits=SessionLimits(policy.sessions.max_calls, policy.sessions.max_concurrent_calls),
            budgets=BudgetPolicy.from_policy(policy),
            output_bytes=policy.limits.output_bytes,
            media_limits=policy.context.media_limits(),
            policy=policy,
            unloaded=unloaded,
        )

    def validation(self, tool: RegisteredTool) -> ValidationConfig | None:
        """The seed's ``ValidationConfig`` of ``tool``'s toolbox (asked only when its arguments failed the strict
        check); ``None``: strict."""
        if self.policy is None:
            return None
        v = self.policy.effective_validation(tool.toolbox, tool.agent)
        return ValidationConfig(allow_extra_properties=v.allow_extra_properties, strict_mode=v.strict_mode)


@dataclass(frozen=True)
class Refusal:
    """A call the portal does not make: the seed's error ``kind`` (``PortalToolNotFound`` ...) and the words for
    the caller; ``meta``: metadata pairs the refusal's result carries besides ``portal_error``."""

    kind: str
    message: str
    meta: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Admitted:
    """A call that passed the checks: the tool, the arguments to send it (mended where its ``ValidationConfig``
    allowed) and a note per change."""

    tool: RegisteredTool
    args: Any
    notes: tuple[str, ...] = ()


def _arguments_problem(args: Any) -> str | None:
    """Why ``args`` cannot be sent to a worker, or ``None``."""
    problem, _ = json_problem(args, max_depth=MAX_ARGS_DEPTH, max_nodes=MAX_ARGS_VALUES)
    if problem:
        return problem
    try:
        size = len(encode(args))
    except (ValueError, TypeError, OverflowError) as exc:
        return f"cannot be encoded ({exc})"
    if size > MAX_ARGS_BYTES:
        return f"take {size} bytes, more than the limit of {MAX_ARGS_BYTES}"
    return None


def _not_allowed(name: str, origin: CallOrigin) -> Refusal:
    allowed = ", ".join(sorted(origin.allowed or ())) or "none"
    return Refusal(
        "PortalToolNotAllowed", f"Tool '{name}' is not allowed for {origin.caller}. Allowed tools: {allowed}."
    )


def check_call(
    registry: ToolRegistry, rules: CallPolicy, name: str, args: Any, origin: CallOrigin
) -> Admitted | Refusal:
    """Checks 1-4 of the module docstring for the call of ``name`` with ``args`` from ``origin``."""
    scope = origin.agent_scope
    tool = registry.get(name, scope)
    if tool is None and origin.allowed is not None and registry.get(name) is not None:
        # Another agent's tool, asked for by a worker or an agent loop (which name what they may call): not
        # allowed, as the seed says for a tool outside the caller's set. A frontend is told "not found".
        return _not_allowed(name, origin)
    if tool is None:
        known = sorted(registry.names(scope) if origin.allowed is None else origin.allowed)
        shown = ", ".join(known[:40]) + (", ..." if len(known) > 40 else "")
        note = unloaded_note(name, registry.runners, scope, rules.unloaded)
        return Refusal(
            "PortalToolNotFound",
            f"Tool not found: '{name}'. {note + ' ' if note else ''}Available tools: {shown or 'none'}.",
        )
    if origin.allowed is not None and name not in origin.allowed:
        return _not_allowed(name, origin)
    problem = _arguments_problem(args)
    if problem:
        return Refusal(
            "PortalInvalidArguments",
            f"Tool call validation failed for '{name}': the arguments {problem}. Send a smaller JSON object.",
        )
    errors = tool.validator.errors(args)
    notes: list[str] = []
    if errors:
        config = rules.validation(tool)
        if config is not None and config.relaxed:
            relaxed = relax(tool.validator, args, config)
            errors, args, notes = relaxed.errors, relaxed.args, relaxed.notes
        if errors:
            return Refusal("PortalInvalidArguments", format_validation_errors(name, errors))
    depth = origin.depth + 1
    if depth > rules.max_call_depth:
        frames = " -> ".join(f"{e.tool} (agent {e.agent or '-'}, depth {e.depth})" for e in origin.stack)
        return Refusal(
            "PortalDepthExceeded",
            f"Call depth limit of {rules.max_call_depth} reached: calling '{name}' would be "
            f"depth {depth}. Call stack: {frames or '(empty)'} -> {name}.",
        )
    return Admitted(tool, args, tuple(notes))
