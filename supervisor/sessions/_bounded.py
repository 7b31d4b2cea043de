"""Bounds for the supervisor's in-memory per-session state, so a service that sees sessions come and go for months
holds memory for a bounded number of them (issue 19: flat under steady load).

Every per-session map the supervisor keeps beside the sessions store is either a cache of what the store holds (it
may forget) or state of sessions that are in use right now. A session's entries go when it is closed
(``Supervisor.close_session``: the frontends call it when an MCP connection, an HTTP session or a stateless request
ends; an agent loop's session goes when the loop ends); for sessions never closed (the Python API's names, a client
that vanishes) each map is capped at :data:`MAX_REMEMBERED_SESSIONS` entries, the oldest forgotten first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from collections.abc import MutableMapping

__all__ = ["MAX_REMEMBERED_SESSIONS", "remember"]

#: Sessions whose in-memory state (caches, idle call counts) one per-session map keeps at most.
MAX_REMEMBERED_SESSIONS = 4096

K = TypeVar("K")
V = TypeVar("V")


def remember(mapping: MutableMapping[K, V], key: K, value: V, limit: int | None = None) -> V:
    """Set ``mapping[key] = value`` as its newest entry (a dict keeps insertion order), then drop the oldest
    entries while it holds more than ``limit`` (default :data:`MAX_REMEMBERED_SESSIONS`); return ``value``."""
    mapping.pop(key, None)
    mapping[key] = value
    cap = MAX_REMEMBERED_SESSIONS if limit is None else limit
    while len(mapping) > cap:
        del mapping[next(iter(mapping))]
    return value
