"""The SQLite toolbox (SPEC.md section 4, sqlite)."""

from ._toolbox import SqliteToolbox, open_toolbox, parse_versioning

__all__ = ["SqliteToolbox", "open_toolbox", "parse_versioning"]
