"""Shared fixtures, and the one place tests that need root are skipped when not root.

Tests that need root (namespaces, setuid, cgroups, a confined worker) are marked ``root`` (a module's
``pytestmark`` or the test's own mark); run as another user (``scripts/check`` runs the rest as ``nobody``) they are
skipped here, saying so, never left to fail half way.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

#: A world-traversable base for test trees that sandboxed workers (uid 65534) must reach (root's); another user's
#: tests get a base of their own (:func:`_sandbox_tmp_base`).
SANDBOX_TMP_BASE = "/tmp/agents-supervise-tests"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the tests marked ``root`` when the run is not root's."""
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="marked root: needs root (namespaces, setuid, cgroups); scripts/test runs it")
    for item in items:
        if item.get_closest_marker("root") is not None:
            item.add_marker(skip)


def _sandbox_tmp_base() -> str:
    """Where :func:`sandbox_tmp` makes its folders: root's :data:`SANDBOX_TMP_BASE` (mode 0755, so workers read
    what is in it), or, for another user, ``agents-supervise-tests-<uid>`` in its temp dir: root's base is not
    writable to it (and a run as root after it must not find a base it cannot chmod)."""
    uid = os.geteuid()
    if uid == 0:
        return SANDBOX_TMP_BASE
    return os.path.join(tempfile.gettempdir(), f"agents-supervise-tests-{uid}")


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
    base = _sandbox_tmp_base()
    os.makedirs(base, exist_ok=True)
    os.chmod(base, 0o755)
    path = tempfile.mkdtemp(dir=base)
    os.chmod(path, 0o755)
    try:
        yield Path(path)
    finally:
        shutil.rmtree(path, ignore_errors=True)
