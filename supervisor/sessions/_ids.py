"""Who owns a session, the ids of root sessions, and the conversation and turn ids a frontend may send (pure).

A session belongs to an :class:`Owner`, a (tenant, agent) pair. Until the supervisor serves several tenants every
session's tenant is :data:`LOCAL_TENANT`, the local operator; the host service adds real tenants by giving frontends
an ``Owner`` with another tenant, nothing else changes.

A frontend names its session (an MCP connection's own name, ``call --session NAME``, ``Supervisor.call(session_id=
NAME)``). A name is not a session: the session is the pair (owner, name), and its id is derived from both with
:func:`root_session_id`. So one frontend session that calls the tools of two agents has two sessions, one per
agent, and a name used by agent A and agent B (even the id of A's session given as a name to B) is two unrelated
sessions: a session id never crosses agents or tenants. The derivation is deterministic (no table to keep in
step), so two supervisors sharing a state dir, and the next ``call --session NAME`` run, find the same session.

Conversation and turn ids come from the client when it sends them (MCP ``_meta``, ``--conversation``/``--turn``,
the API's keywords) and are checked by :func:`client_id`; otherwise the supervisor makes them (:func:`new_id`).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "LOCAL_TENANT",
    "MAX_ID_CHARS",
    "META_KEYS",
    "Owner",
    "client_id",
    "ids_from_meta",
    "new_id",
    "root_session_id",
]

#: The tenant of every session until tenants exist: the operator who runs this supervisor.
LOCAL_TENANT = "local"
#: The longest session name, conversation id or turn id a client may send.
MAX_ID_CHARS = 200
#: ``_meta`` keys of an MCP ``tools/call`` request read as the call's conversation and turn ids.
META_KEYS = {
    "conversation_id": ("conversationId", "agents-supervise/conversationId"),
    "turn_id": ("turnId", "agents-supervise/turnId"),
}


@dataclass(frozen=True)
class Owner:
    """Whose a session is: a tenant (:data:`LOCAL_TENANT` for now) and an agent slug."""

    agent: str
    tenant: str = LOCAL_TENANT


def root_session_id(owner: Owner, name: str) -> str:
    """The id of the root session ``name`` of ``owner``: a UUID-shaped digest of tenant, agent and name.

    Distinct owners never share an id (the owner is part of what is hashed, with separators no slug contains).
    """
    digest = hashlib.sha256(f"{owner.tenant}\x00{owner.agent}\x00{name}".encode()).digest()
    return str(uuid.UUID(bytes=digest[:16]))


def new_id() -> str:
    """A fresh conversation or turn id (a random UUID)."""
    return str(uuid.uuid4())


def client_id(value: Any, what: str) -> str:
    """``value`` as an id a client sent for ``what``; raises ``ValueError`` saying what is wrong with it.

    An id is a non-empty string of at most :data:`MAX_ID_CHARS` printable characters (no control characters: ids
    go into environment variables, trace lines and SQL parameters).
    """
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, not {type(value).__name__}")
    if not value or len(value) > MAX_ID_CHARS:
        raise ValueError(f"{what} must have 1 to {MAX_ID_CHARS} characters, not {len(value)}")
    if not value.isprintable():
        raise ValueError(f"{what} must be printable text (no control characters, no line breaks)")
    return value


def ids_from_meta(meta: Any) -> dict[str, str]:
    """The conversation and turn ids an MCP request's ``_meta`` carries (``{}`` when none); raises ``ValueError``
    for a ``_meta`` that is not an object or an id that :func:`client_id` refuses."""
    if meta is None:
        return {}
    if not isinstance(meta, Mapping):
        raise ValueError("_meta must be an object")
    out: dict[str, str] = {}
    for field, keys in META_KEYS.items():
        for key in keys:
            if key in meta:
                out[field] = client_id(meta[key], f"_meta.{key}")
                break
    return out
