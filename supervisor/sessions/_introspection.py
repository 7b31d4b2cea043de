"""Answers to the System toolbox's session capabilities (``list-sessions``, ``search-sessions``, ``read-session``,
``get-session-stats``), and the policy's caps on them.

The worker only forwards the request; :func:`answer_host_request` answers it from the session store with the
supervisor's own copy of the toolbox's config (the worker's copy is not trusted): the scope
(``SessionIntrospectionScope``), ``SessionIntrospectionMaxResults`` and ``SessionIntrospectionIncludeToolOutputs``.
Scopes are relative to the calling session:

- ``subtree``: the calling session and all its descendants (the default);
- ``children-only``: its descendants, not itself;
- ``parents-only``: its ancestors (parent, grandparent, ...), not itself;
- ``all``: every session in the store.

Whatever the scope, introspection never leaves the caller's tenant, and sees only sessions of the caller's agent (the
owner of the calling session) or of its own call tree: the sub-agent runs made from the calling session (and theirs),
whatever their agents, are its subtree (``subtree``, ``children-only``, and ``all``). The policy's
``sessions.introspection.other_agents: true`` widens this to every agent of the tenant (then a sub-agent also sees
its caller's session under ``parents-only``). The policy also caps
which scopes an agent file may set (``sessions.introspection.scopes``) and whether it may read tool outputs
(``sessions.introspection.tool_outputs``): an agent file asking for more is refused when the policy is compiled
(:func:`introspection_problem`), and the caps are applied again here.
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from typing import TYPE_CHECKING, Any

from supervisor.config import Introspection

from ._ids import Owner
from ._scopes import scope_members

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ._store import SessionRow, SessionStore

__all__ = ["SESSION_OPS", "answer_host_request", "introspection_problem", "visible_sessions"]

SESSION_OPS = ("list-sessions", "search-sessions", "read-session", "get-session-stats")
_PREVIEW = 80


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def introspection_problem(config: Mapping[str, Any], caps: Introspection) -> str | None:
    """Why a System toolbox's config asks for more introspection than the policy allows, or ``None`` (pure).

    Only a toolbox with a session capability is judged: the keys mean nothing without one.
    """
    if not set(config.get("Capabilities") or ()) & set(SESSION_OPS):
        return None
    scope = str(config.get("SessionIntrospectionScope") or "subtree")
    if scope not in caps.scopes:
        allowed = ", ".join(caps.scopes) or "none"
        return (
            f"SessionIntrospectionScope {scope!r} is not among the scopes the policy allows "
            f"(sessions.introspection.scopes: {allowed}); set one of those in the agent file, or widen the policy"
        )
    if config.get("SessionIntrospectionIncludeToolOutputs") and not caps.tool_outputs:
        return (
            "SessionIntrospectionIncludeToolOutputs is true but the policy forbids reading tool outputs "
            "(sessions.introspection.tool_outputs: false); set it to false in the agent file, or allow it in the "
            "policy"
        )
    return None


def visible_sessions(
    owners: Mapping[str, Owner], parents: Mapping[str, str | None], current: str, caps: Introspection
) -> set[str]:
    """The sessions a call of session ``current`` may ever see, whatever the scope (pure): its tenant's, and of
    those its own agent's, and its own call tree's (the sub-agent runs made from it, and theirs, whatever their
    agents: a parent link is made only by the supervisor, for a sub-agent call of that session); every agent's
    with ``caps.other_agents``. Its callers' sessions (another agent's) stay unseen without ``other_agents``."""
    me = owners.get(current, Owner(""))
    tree = scope_members("subtree", current, parents)
    return {
        sid
        for sid, owner in owners.items()
        if owner.tenant == me.tenant and (caps.other_agents or owner.agent == me.agent or sid in tree)
    }


class _Refused(Exception):
    pass


def _id_shaped(value: str) -> bool:
    """Whether ``value`` has the form of the ids the supervisor makes (a UUID, with or without dashes): an id of
    another form names no session (``InvalidSessionIdError``), one of this form may name another's (not found)."""
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def _preview(text: str, index: int, length: int) -> str:
    start = max(0, index - _PREVIEW)
    end = min(len(text), index + length + _PREVIEW)
    return ("..." if start else "") + " ".join(text[start:end].split()) + ("..." if end < len(text) else "")


def _render_turns(
    store: SessionStore, row: SessionRow, take_n: int, tool_outputs: bool, thinking: bool
) -> tuple[int, list[str]]:
    """``(totalTurns, lines)``: a session's turns (a model's reasoning only with ``thinking``), or, for a session
    with none (a frontend's), its tool calls, one turn each; ``totalTurns`` is what ``list-sessions`` calls its
    ``turnCount`` (``SessionStore.rows``)."""
    turns = store.turns(row.id)
    lines: list[str] = []
    if turns:
        shown = [t for t in turns if thinking or t[1] != "thinking"]
        for n, role, content, tool in shown[:take_n]:
            if role == "thinking":
                lines.append(f"Turn {n}: [Thinking] {content}")
            elif role == "user":
                lines.append(f"Turn {n}: [User] {content}")
            elif role == "assistant":
                lines.append(f"Turn {n}: [LLM] {content}")
            elif tool_outputs:
                lines.append(f"Turn {n}: [Tool {tool}] {content}")
            else:
                lines.append(f"Turn {n}: [Tool {tool}] (output not shown)")
        return len(turns), lines
    calls = store.tool_calls(row.id)
    for i, call in enumerate(calls[:take_n], 1):
        text = f"Turn {i}: [Tool call] {call['tool']} {call['args']} -> {call['status']}"
        if tool_outputs and call["output"]:
            text += f": {call['output']}"
        lines.append(text)
    return len(calls), lines


def _search(store: SessionStore, rows: list[SessionRow], query: str, tool_outputs: bool) -> list[dict[str, Any]]:
    needle = query.casefold()
    results = []
    for row in rows:
        hit: tuple[str, str] | None = None
        for _n, role, content, _tool in store.turns(row.id):
            if role == "tool" and not tool_outputs:
                continue
            i = content.casefold().find(needle)
            if i >= 0:
                kind = {"tool": "tool_output", "thinking": "thinking"}.get(role, "content")
                hit = (_preview(content, i, len(query)), kind)
                break
        if hit is None:
            for call in store.tool_calls(row.id):
                texts = [("tool_call", f"{call['tool']} {call['args']}")]
                if tool_outputs:
                    texts.append(("tool_output", call["output"] or ""))
                for kind, text in texts:
                    i = text.casefold().find(needle)
                    if i >= 0:
                        hit = (_preview(text, i, len(query)), kind)
                        break
                if hit:
                    break
        if hit is not None:
            results.append(
                {
                    "sessionId": row.id,
                    "conversationId": row.conversation_id,
                    "turnCount": row.turn_count,
                    "preview": hit[0],
                    "matchType": hit[1],
                }
            )
    return results


def _answer(
    store: SessionStore, config: Mapping[str, Any], caps: Introspection, current: str, op: str, args: Mapping[str, Any]
) -> Any:
    scope = str(config.get("SessionIntrospectionScope") or "subtree")
    if scope not in caps.scopes:
        raise _Refused(
            f"SessionAccessDeniedError: the policy does not allow the scope {scope!r} "
            f"(sessions.introspection.scopes: {', '.join(caps.scopes) or 'none'})"
        )
    max_results = int(config.get("SessionIntrospectionMaxResults") or 50)
    tool_outputs = bool(config.get("SessionIntrospectionIncludeToolOutputs", False)) and caps.tool_outputs
    parents = store.parents()
    visible = visible_sessions(store.owners(), parents, current, caps)
    members = scope_members(scope, current, parents) & visible
    rows = store.rows(members)
    ancestors = scope_members("parents-only", current, parents)
    descendants = scope_members("children-only", current, parents)
    if op == "list-sessions":
        return {
            "sessions": [
                {
                    "sessionId": r.id,
                    "conversationId": r.conversation_id,
                    "modificationTime": _iso(r.modified),
                    "turnCount": r.turn_count,
                    "isParent": r.id in ancestors,
                    "isChild": r.id in descendants,
                    "isLocked": r.status == "running",
                    "status": r.status,
                    "agent": r.agent,
                    **({"name": r.name} if r.name else {}),
                }
                for r in rows[:max_results]
            ],
            "totalAccessible": len(rows),
            "scope": scope,
            "truncated": len(rows) > max_results,
        }
    if op == "search-sessions":
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            raise _Refused("MissingParameterError: search-sessions needs a non-empty 'query'")
        results = _search(store, rows, query.strip(), tool_outputs)
        return {"query": query, "results": results[:max_results], "totalMatches": len(results), "scope": scope}
    if op == "read-session":
        target = args.get("session_id")
        if not isinstance(target, str) or not target or len(target) > 200:
            raise _Refused("InvalidSessionIdError: read-session needs 'session_id', a session id from list-sessions")
        if target not in parents and not _id_shaped(target):
            raise _Refused(
                f"InvalidSessionIdError: {target!r} is not a session id (session ids are UUIDs, as list-sessions "
                "gives them in sessionId)"
            )
        if target not in parents or target not in visible:
            # Another agent's or tenant's session is reported as absent: its existence is not the caller's business.
            raise _Refused(f"SessionNotFoundError: no session {target!r}")
        if target not in members:
            raise _Refused(f"SessionAccessDeniedError: session {target!r} is outside this toolbox's scope ({scope})")
        take_n = args.get("take_n")
        take = max_results if not isinstance(take_n, int) or take_n < 1 else min(take_n, max_results)
        show_outputs = tool_outputs and args.get("include_tool_responses", True) is not False
        row = store.rows({target})[0]
        total, lines = _render_turns(store, row, take, show_outputs, args.get("include_thinking") is True)
        return {
            "sessionId": row.id,
            "conversationId": row.conversation_id,
            "totalTurns": total,
            "returnedTurns": len(lines),
            "content": "\n".join(lines),
            "format": "condensed-text",
            "scope": scope,
            "access": "granted",
        }
    if op == "get-session-stats":
        return {
            "totalSessions": len(rows),
            "totalTurnsAcrossAllSessions": sum(r.turn_count for r in rows),
            "totalToolCalls": store.count_calls(members),
            "scope": scope,
            "note": "counts cover the sessions this toolbox's scope lets it see",
        }
    raise _Refused(f"unknown session operation {op!r}; expected one of {', '.join(SESSION_OPS)}")


def answer_host_request(
    store: SessionStore | None,
    config: Mapping[str, Any],
    session_id: str,
    op: Any,
    args: Any,
    caps: Introspection | None = None,
) -> dict[str, Any]:
    """Answer a System toolbox's session ``host`` request as the reply frame's body (``result`` or ``error``).

    Args:
        store: the supervisor's store (``None``: no store configured).
        config: the supervisor's copy of the calling toolbox's config (its capabilities, scope and limits).
        session_id: the session of the call that made the request (from the supervisor's record of the call).
        op: the capability asked for; args: its arguments (untrusted).
        caps: the policy's ``sessions.introspection`` (``None``: its defaults).
    """
    caps = caps if caps is not None else Introspection()
    if store is None:
        return {"error": "SessionStoreNotConfiguredError: this supervisor keeps no session store"}
    if op not in SESSION_OPS:
        return {"error": f"unknown host operation {op!r}; expected one of {', '.join(SESSION_OPS)}"}
    if op not in (config.get("Capabilities") or []):
        return {"error": f"CapabilityNotEnabledError: {op} is not among this toolbox's Capabilities"}
    if not isinstance(args, dict):
        args = {}
    store.ensure_session(session_id)
    try:
        return {"result": _answer(store, config, caps, session_id, op, args)}
    except _Refused as exc:
        return {"error": str(exc)}
    except ValueError as exc:
        return {"error": str(exc)}
    except sqlite3.Error as exc:
        return {"error": f"SessionStoreError: the session store could not be read ({type(exc).__name__}: {exc})"}
