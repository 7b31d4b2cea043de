"""Shared fixtures."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

#: A world-traversable base for test trees that sandboxed workers (uid 65534) must reach.
SANDBOX_TMP_BASE = "/tmp/agents-supervise-tests"


@pytest.fixture(scope="session", autouse=True)
def _uid_registry() -> Iterator[None]:
    """The tests' own host-wide uid registry (``supervisor/plan/_uid_registry.py``), one per test session: the state
    dirs tests make by the hundred never take uids of the host's registry, whose numbers are never given back. Every
    supervisor a test starts, in this process or a child, shares it (the environment)."""
    from supervisor.plan._uid_registry import REGISTRY_ENV

    if REGISTRY_ENV in os.environ:
        yield
        return
    path = os.path.join(tempfile.gettempdir(), f"agents-supervise-test-uids-{os.getpid()}")
    os.environ[REGISTRY_ENV] = path
    try:
        yield
    finally:
        del os.environ[REGISTRY_ENV]
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def fresh_uid_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A host-wide uid registry of this test alone (empty): for tests that expect the numbers a fresh host gives."""
    from supervisor.plan._uid_registry import REGISTRY_ENV

    path = Path(tempfile.mkdtemp(prefix="agents-supervise-test-uids-"))
    path.chmod(0o700)
    monkeypatch.setenv(REGISTRY_ENV, str(path))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def sandbox_tmp() -> Iterator[Path]:
    """A fresh directory, mode 0755 down from /tmp, that the sandbox uid can traverse and read."""
    os.makedirs(SANDBOX_TMP_BASE, exist_ok=True)
    os.chmod(SANDBOX_TMP_BASE, 0o755)
    path = tempfile.mkdtemp(dir=SANDBOX_TMP_BASE)
    os.chmod(path, 0o755)
    try:
        yield Path(path)
    finally:
        shutil.rmtree(path, ignore_errors=True)
