"""The shipped ``policies/permissive.yaml`` unchanged, run by an unprivileged user (issue 25): the CLI as a uid that
is not root, with user namespaces, serves calls from confined workers (its own user, network, PID, mount and IPC
namespaces, the private view, Landlock, seccomp), says what needs root and is off, and ``strict.yaml`` refuses
with the reason. The test starts as root only to become that user (``setpriv``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.root

REPO = Path(__file__).resolve().parents[2]
#: an unprivileged uid of no account and no worker's
USER = 4253


def _as_user(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"HOME": str(root), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "LANG": "C.UTF-8"}
    return subprocess.run(
        ["setpriv", f"--reuid={USER}", f"--regid={USER}", "--clear-groups", sys.executable, "-m", "supervisor", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(root),
        timeout=180,
    )


@pytest.fixture
def user_home(sandbox_tmp: Path) -> Path:
    probe = subprocess.run(
        ["setpriv", f"--reuid={USER}", f"--regid={USER}", "--clear-groups", sys.executable, "-c", "import supervisor"],
        capture_output=True,
        env={"PYTHONPATH": str(REPO)},
        cwd="/",
    )
    if probe.returncode != 0:
        pytest.skip(f"uid {USER} cannot read the checkout or the interpreter here: {probe.stderr[-300:]!r}")
    os.chown(sandbox_tmp, USER, USER)
    return sandbox_tmp


@pytest.mark.slow
def test_permissive_yaml_serves_calls_rootless(user_home: Path) -> None:
    permissive = str(REPO / "policies" / "permissive.yaml")
    state = str(user_home / "state")
    for tool, check in (
        ("system_system_date", lambda data: data["capability"] == "date"),
        ("system_system_running_user", lambda data: data["data"]["uid"] == USER),
        ("system_system_process_info", lambda data: data["data"]["noNewPrivs"] in (True, 1, "1")),
    ):
        out = _as_user(user_home, "call", "--policy", permissive, "--state-dir", state, tool, "{}")
        assert out.returncode == 0, out.stdout + out.stderr
        result = json.loads(out.stdout)
        assert result["status"] == "passed" and check(result["structured"]), result
    assert "overlayfs" not in out.stderr and "load error" not in out.stderr, out.stderr
    assert "kernel audit: not read (the supervisor is not root)" in out.stderr
    summary = _as_user(user_home, "check", "--policy", permissive, "--state-dir", state)
    assert summary.returncode == 0, summary.stderr
    assert f"the supervisor is not root: every worker runs as its uid {USER}" in summary.stdout, summary.stdout
    assert "cgroup limits (memory_bytes, cpus; processes is only RLIMIT_NPROC)" in summary.stdout


def test_strict_yaml_refuses_rootless_and_says_why(user_home: Path) -> None:
    out = _as_user(
        user_home, "call", "--policy", str(REPO / "policies" / "strict.yaml"), "--state-dir", str(user_home / "s"),
        "system_system_date", "{}",
    )  # fmt: skip
    assert out.returncode == 2, out.stdout
    assert "need a cgroup of its own and none can be made here" in out.stderr, out.stderr
    assert "strict: true never runs a worker less confined than it says" in out.stderr and "Traceback" not in out.stderr
