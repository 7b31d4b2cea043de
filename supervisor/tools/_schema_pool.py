"""The compiled schemas of the supervisor's current tool lists, shared by every worker that starts.

Compiling a schema is the largest part of taking a worker's ``hello`` (about 1-2 ms of CPU for the smallest
schema, more for larger ones; on a worker thread, but holding the GIL). Toolboxes of one kind often list the same
schemas (a hundred System toolboxes, one ``date`` tool each): a :class:`SchemaPool` keeps every compiled schema of
the lists the supervisor holds, by fingerprint, and a starting worker is given them as its ``reuse``
(:func:`~supervisor.tools._tool_lists.prepare_tool_list`), so each distinct schema is compiled once. A fingerprint
is a digest of the schema's canonical JSON, so a reused schema is the same schema; nothing is reused that was left
out for want of time (``retry``).

The pool holds what the tool lists hold: :meth:`SchemaPool.retain` drops what no current list has (the supervisor
calls it when it rebuilds its registry), so its memory is bounded by theirs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ._tool_lists import CompiledSchema

__all__ = ["SchemaPool"]


class SchemaPool:
    """Compiled schemas by fingerprint (see the module docstring)."""

    def __init__(self) -> None:
        self._schemas: dict[str, CompiledSchema] = {}

    def __len__(self) -> int:
        return len(self._schemas)

    def add(self, schemas: Iterable[CompiledSchema | None]) -> None:
        """Keep ``schemas`` (one tool list's input and output schemas; ``None`` and ``retry`` ones are skipped)."""
        for schema in schemas:
            if schema is not None and not schema.retry:
                self._schemas.setdefault(schema.fingerprint, schema)

    def retain(self, schemas: Iterable[CompiledSchema | None]) -> None:
        """Keep only the schemas among ``schemas`` (every current list's), dropping the rest."""
        keep = {s.fingerprint for s in schemas if s is not None}
        self._schemas = {k: v for k, v in self._schemas.items() if k in keep}

    def schemas(self) -> list[CompiledSchema]:
        """Every schema kept: a starting worker's ``reuse``."""
        return list(self._schemas.values())
