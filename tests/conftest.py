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
