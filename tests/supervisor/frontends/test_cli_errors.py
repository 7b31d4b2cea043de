"""The CLI's one error boundary and a start that fails half way.

Whatever ends a command (a file a person can fix, a store that cannot be opened, a bug) is one
``agents-supervise: error: ...`` line and its exit status, never a traceback; ``call``'s 1 stays "the tool failed".
A :meth:`Supervisor.open` that fails after the OpenTelemetry export started leaves neither its thread nor its
logging filters behind. The store is a real SQLite file made unreadable as a database; the export is the real SDK's.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from supervisor._errors import PolicyRefused
from supervisor._supervisor import Supervisor
from supervisor.config import ConfigError
from supervisor.frontends._cli_errors import EXIT_ERROR, EXIT_INTERNAL, error_status
from supervisor.sessions import SessionStore, SessionStoreUnavailable
from supervisor.traces._otel import _EXPORTER_LOGGERS
from tests._policies import agent, write_policy

REPO = str(Path(__file__).resolve().parents[3])


def _damaged_store(root: Path) -> Path:
    """A policy with no toolbox (nothing to confine) whose state dir holds a session store that is no database."""
    policy = write_policy(root, {"tester": agent()})
    (root / "state").mkdir(exist_ok=True)
    (root / "state" / "sessions.sqlite3").write_bytes(b"not a database, " * 64)
    return policy


def test_a_store_that_cannot_be_opened_is_one_line_and_exit_2(tmp_path: Path) -> None:
    policy = _damaged_store(tmp_path)
    for command in (["call", "system_system_date", "{}"], ["tools"]):
        out = subprocess.run(
            [sys.executable, "-m", "supervisor", command[0], "--policy", str(policy), *command[1:]],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": REPO},
            timeout=120,
        )
        assert out.returncode == EXIT_ERROR, out.stderr  # never 1: that is "the tool failed"
        assert "Traceback" not in out.stderr and out.stdout == ""
        [line] = out.stderr.splitlines()
        store = tmp_path / "state" / "sessions.sqlite3"
        assert line.startswith(f"agents-supervise: error: the session store {store} cannot be opened"), line
        assert "not a database" in line and "move it aside" in line


def test_the_store_names_the_file_and_the_cause(tmp_path: Path) -> None:
    path = tmp_path / "sessions.sqlite3"
    path.write_bytes(b"\x00garbage" * 100)
    with pytest.raises(SessionStoreUnavailable, match="not a database") as caught:
        SessionStore(str(path))
    assert caught.value.path == str(path) and caught.value.__cause__ is not None
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the store's folder should be
    with pytest.raises(SessionStoreUnavailable, match="cannot be opened"):
        SessionStore(str(blocked / "sessions.sqlite3"))


def test_every_exception_is_one_line_and_its_status(capsys: pytest.CaptureFixture[str]) -> None:
    cases: list[tuple[BaseException, int, str]] = [
        (ConfigError.one("policy.yaml", "agents", "missing"), EXIT_ERROR, "policy.yaml: at agents: missing"),
        (PolicyRefused("Landlock is not available"), EXIT_ERROR, "Landlock is not available"),
        (ExceptionGroup("start", [PolicyRefused("deep down")]), EXIT_ERROR, "deep down"),
        (FileNotFoundError(2, "No such file or directory", "/nowhere"), EXIT_ERROR, "/nowhere"),
        (RuntimeError("a bug\nsecond line"), EXIT_INTERNAL, "internal error: RuntimeError: a bug"),
        (ExceptionGroup("g", [KeyError("k")]), EXIT_INTERNAL, "internal error: KeyError"),
    ]
    for exc, status, words in cases:
        assert error_status(exc) == status
        err = capsys.readouterr().err
        assert err.startswith("agents-supervise: error: ") and words in err, err
        assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert error_status(KeyboardInterrupt()) == 130


async def test_a_failed_start_leaves_no_exporter_thread_nor_logging_filter(tmp_path: Path) -> None:
    policy = _damaged_store(tmp_path)
    data = policy.read_text() + "trace:\n  otel:\n    enabled: true\n    endpoint: http://127.0.0.1:9/v1/traces\n"
    policy.write_text(data)
    import opentelemetry.sdk.trace.export  # noqa: F401 - its import adds a filter of its own: before the count

    before = set(threading.enumerate())
    filters = {name: list(logging.getLogger(name).filters) for name in _EXPORTER_LOGGERS}
    with pytest.raises(SessionStoreUnavailable):
        async with Supervisor.open(policy):
            pass
    # (trio's own worker threads idle in its cache: not the export's)
    left = {t for t in threading.enumerate() if t.is_alive() and not t.name.startswith("Trio thread")} - before
    assert left == set()
    assert {name: list(logging.getLogger(name).filters) for name in _EXPORTER_LOGGERS} == filters
