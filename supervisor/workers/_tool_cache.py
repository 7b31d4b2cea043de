"""The last tool list of a lazily started toolbox (``toolboxes.<name>.start: lazy``), kept between supervisor starts.

A lazy toolbox's tools are listed before its worker runs: from this cache when it holds a list made for the same
worker payload (the toolbox's config, limits and environment, by sha256), else by starting the worker once at
supervisor start, taking its ``hello`` and stopping it again (the list is then written here). Its worker starts for
real on the first call; the list it announces then replaces the cached one (``tools_changed`` as for any change).

The cache is the supervisor's own file, ``<state_dir>/tool-lists/<agent>/<toolbox>.json`` (folders root's, 0700),
never in the worker's state folder: a worker can write there, and the supervisor does not read what a worker can
plant. What is cached was already checked when the worker announced it (``tools/_tool_lists.py``). A cache that is
missing, unreadable, malformed or for another payload is ignored (the toolbox is described again).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any

from toolboxes import atomic_write

__all__ = ["CachedTools", "payload_fingerprint", "read_tool_cache", "tool_cache_path", "write_tool_cache"]

#: A cache file larger than this is not read (a tool list is bounded far below it by the protocol's checks).
MAX_CACHE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class CachedTools:
    """What a lazy toolbox serves before its worker runs."""

    tools: list[dict[str, Any]]
    load_errors: list[dict[str, Any]]
    catalog: dict[str, list[dict[str, Any]]]


def tool_cache_path(state_dir: str, agent: str, toolbox: str) -> str:
    """Where the supervisor keeps the last tool list of ``agent``'s ``toolbox``."""
    return os.path.join(state_dir, "tool-lists", agent or "_", f"{toolbox}.json")


def payload_fingerprint(payload: dict[str, Any]) -> str:
    """The sha256 of a worker payload in canonical JSON: a cached list is used only for the same payload."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def read_tool_cache(path: str, fingerprint: str) -> CachedTools | None:
    """The cached list at ``path`` made for ``fingerprint``, or ``None`` (missing, unreadable, malformed, stale)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CACHE_BYTES + 1)
        data = json.loads(raw) if len(raw) <= MAX_CACHE_BYTES else None
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("fingerprint") != fingerprint:
        return None
    tools, errors, catalog = data.get("tools"), data.get("load_errors"), data.get("catalog")
    if not (
        isinstance(tools, list)
        and all(isinstance(t, dict) for t in tools)
        and isinstance(errors, list)
        and isinstance(catalog, dict)
        and all(isinstance(v, list) for v in catalog.values())
    ):
        return None
    return CachedTools(tools, errors, catalog)


def write_tool_cache(path: str, fingerprint: str, cached: CachedTools) -> None:
    """Replace the cache at ``path`` (atomically; its folders made root's 0700). Raises ``OSError``."""
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    data = {
        "fingerprint": fingerprint,
        "tools": cached.tools,
        "load_errors": cached.load_errors,
        "catalog": cached.catalog,
    }
    atomic_write(path, json.dumps(data, default=str).encode(), 0o600, fsync=False)
