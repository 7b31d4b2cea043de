"""The policy's ``sessions``: per-session caps, how long sessions are kept, and the caps on the System
toolbox's session introspection (``sessions.introspection``; an agent file can only narrow them)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ._model import StrictModel

__all__ = ["Introspection", "SessionScope", "Sessions"]


SessionScope = Literal["parents-only", "children-only", "subtree", "all"]


class Introspection(StrictModel):
    """Caps on the System toolbox's session capabilities (an agent file can only narrow them)."""

    scopes: list[SessionScope] = Field(
        default=["parents-only", "children-only", "subtree", "all"],
        description="the SessionIntrospectionScope values agent files may set; another one is refused at load",
    )
    tool_outputs: bool = Field(
        default=True, description="whether agent files may set SessionIntrospectionIncludeToolOutputs: true"
    )
    other_agents: bool = Field(
        default=False,
        description="whether introspection sees sessions of other agents outside the caller's own call tree (the "
        "caller's session from a sub-agent, every agent's under scope all); false: only the caller's agent's own "
        "sessions and its own call tree (the sub-agent runs its session asked for, whatever their agents)",
    )


class Sessions(StrictModel):
    max_calls: int | None = Field(default=None, ge=1, description="calls per session; null = no cap")
    max_concurrent_calls: int = Field(default=16, ge=1)
    keep_days: float | None = Field(
        default=30,
        gt=0,
        description="sessions (turns, tool calls) not modified for this long are deleted; null = keep all",
    )
    introspection: Introspection = Field(default=Introspection(), description="caps on session introspection")
