#!/usr/bin/env python3
"""Create the small databases that policies/agents/sqlite-example.json names.

- ``policies/agents/sqlite-example/analytics.db`` (read-only in the example): ``users`` and ``events`` tables.
- ``policies/agents/sqlite-example/memory/dev-memory.db`` (read-write): an ``analysis_results`` table. It sits
  in a directory of its own because a read-write SQLite toolbox is granted write on the database's directory
  (journal and WAL files are created and removed there; see docs/SQLITE.md).

Existing files are replaced. Usage: ``scripts/make_example_dbs.py [DIR]`` (default: the example's folder).
"""

from __future__ import annotations

import os
import sqlite3
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DIR = os.path.join(HERE, "..", "policies", "agents", "sqlite-example")


def make_analytics(path: str) -> None:
    """Users and their events; a rollback-journal database, so a read-only worker needs only the file."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT NOT NULL, active INTEGER NOT NULL)")
    conn.execute(
        "CREATE TABLE events (id INTEGER PRIMARY KEY, user_id INTEGER REFERENCES users(id), "
        "kind TEXT NOT NULL, at TEXT NOT NULL)"
    )
    conn.executemany(
        "INSERT INTO users (name, active) VALUES (?, ?)", [("ada", 1), ("brian", 1), ("chen", 0), ("dora", 1)]
    )
    conn.executemany(
        "INSERT INTO events (user_id, kind, at) VALUES (?, ?, ?)",
        [
            (1, "login", "2024-01-15T10:30:00Z"),
            (1, "query", "2024-01-15T10:31:00Z"),
            (2, "login", "2024-01-16T08:00:00Z"),
            (4, "login", "2024-01-17T09:12:00Z"),
        ],
    )
    conn.close()


def make_memory(path: str) -> None:
    """The shared working memory: where agents store what they found."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(
        "CREATE TABLE analysis_results (id INTEGER PRIMARY KEY, content TEXT NOT NULL, "
        "created_at TEXT NOT NULL DEFAULT (datetime('now')))"
    )
    conn.close()


def main(argv: list[str]) -> int:
    base = os.path.abspath(argv[1] if len(argv) > 1 else DEFAULT_DIR)
    os.makedirs(os.path.join(base, "memory"), exist_ok=True)
    for path, build in (
        (os.path.join(base, "analytics.db"), make_analytics),
        (os.path.join(base, "memory", "dev-memory.db"), make_memory),
    ):
        for leftover in (path, path + "-journal", path + "-wal", path + "-shm"):
            if os.path.exists(leftover):
                os.unlink(leftover)
        build(path)
        os.chmod(path, 0o644)
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
